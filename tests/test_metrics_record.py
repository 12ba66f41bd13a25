"""``metrics.json`` as ``MetricsRecord``: the evaluate stage writes exactly the keys it always wrote,
and the report's reader refuses a malformed file by key (``report.runs.validate_metrics`` adds the
file and the fix)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpsynth.errors import DataError
from dpsynth.evaluate.record import REAL_DATA, MetricsError, MetricsRecord

CLF = {"logreg": {"mean": 0.8, "std": 0.0, "n": 1, "values": [0.8], "runs": []}}
FID = {"available": False, "fid": None, "reason": "no weights", "reference_split": "test"}
PRIVACY = {"mechanism": "m", "epsilon": {"rdp_classic": 1.0}}


def _synthetic(**kw: object) -> MetricsRecord:
    fields = dict(experiment="dps_x", dataset="mnist", method="dp_sinkhorn", classifiers=CLF, w2=None, fid=FID,
                  privacy=PRIVACY, n_synthetic_sets=1, n_synthetic=10, seconds={"load": 0.1}, train=None,
                  scale="smoke", preset={"fid_samples": 10}, versions={"dpsynth": "0"})
    return MetricsRecord(**{**fields, **kw})  # type: ignore[arg-type]


def test_the_written_keys_are_the_evaluate_stages(tmp_path: Path) -> None:
    syn = _synthetic()
    assert list(syn.to_dict()) == ["experiment", "dataset", "method", "classifiers", "w2", "fid", "privacy",
                                   "n_synthetic_sets", "n_synthetic", "seconds", "train", "scale", "preset",
                                   "versions"]
    real = MetricsRecord(experiment="real_mnist", dataset="mnist", method=REAL_DATA, classifiers=CLF, fid=FID,
                         privacy=None, scale="smoke", preset={"fid_samples": 10}, versions={"dpsynth": "0"})
    assert list(real.to_dict()) == ["experiment", "dataset", "method", "classifiers", "fid", "privacy", "scale",
                                    "preset", "versions"]
    syn.write(tmp_path / "m.json")
    text = (tmp_path / "m.json").read_text()
    assert text == json.dumps(syn.to_dict(), indent=2, sort_keys=True) + "\n"
    assert MetricsRecord.from_dict(json.loads(text)) == syn
    assert MetricsRecord.from_dict(real.to_dict(), real=True) == real


def test_unknown_keys_are_kept_and_missing_optional_ones_stay_missing() -> None:
    d = {"experiment": "dps_x", "dataset": "mnist", "method": "dp_sinkhorn", "classifiers": CLF, "fid": FID,
         "privacy": PRIVACY, "scale": "quick", "note": "hand-made"}
    rec = MetricsRecord.from_dict(d)
    assert rec.extra == {"note": "hand-made"} and rec.preset is None and rec.versions is None
    assert set(rec.to_dict()) - set(d) == {"w2", "n_synthetic_sets", "n_synthetic", "seconds", "train"}


@pytest.mark.parametrize("edit, key, why", [
    (lambda d: d.pop("fid"), "fid", "is missing"),
    (lambda d: d.update(experiment="other"), "experiment", "is 'other' but the file is that of 'dps_x'"),
    (lambda d: d.update(scale=""), "scale", "must be a non-empty string"),
    (lambda d: d.update(dataset="celeba"), "dataset", "is 'celeba', expected 'mnist'"),
    (lambda d: d.update(classifiers={"mlp": {"mean": float("nan")}}), "classifiers.mlp", "must be a record"),
    (lambda d: d.update(classifiers={}), "classifiers", "is empty"),
    (lambda d: d.update(fid={"available": True, "mean": float("inf")}), "fid", "says available but"),
    (lambda d: d.update(privacy=None), "privacy", "must be the run's privacy report"),
])
def test_a_malformed_file_is_refused_by_key(edit, key: str, why: str) -> None:  # type: ignore[no-untyped-def]
    d = _synthetic().to_dict()
    edit(d)
    with pytest.raises(MetricsError, match=why) as info:
        MetricsRecord.from_dict(d, experiment="dps_x", dataset="mnist")
    assert info.value.key == key and isinstance(info.value, DataError)


def test_an_unconditional_run_may_have_no_classifiers_when_scored_by_w2() -> None:
    d = _synthetic(method="entropic_wgan", classifiers={}, w2={"mean": 1.0, "std": 0.0}).to_dict()
    assert MetricsRecord.from_dict(d).classifiers == {}
    with pytest.raises(MetricsError, match="'classifiers' is empty"):
        MetricsRecord.from_dict({**d, "w2": None})


def test_a_real_data_row_has_no_privacy_report() -> None:
    d = MetricsRecord(experiment="real_mnist", dataset="mnist", method=REAL_DATA, classifiers=CLF, fid=FID,
                      privacy=None, scale="smoke").to_dict()
    assert MetricsRecord.from_dict(d, experiment="real_mnist", real=True).is_real_data
    with pytest.raises(MetricsError, match="must be null for a real-data row"):
        MetricsRecord.from_dict({**d, "privacy": PRIVACY}, real=True)


SMALL_N = {"kid": {"available": True, "mean": 0.0123456789, "std": 0.0, "n": 1, "values": [0.0123456789]},
           "fid_inf": {"available": True, "mean": 25.326, "std": 0.0, "n": 1, "values": [25.326]},
           "precision": {"available": True, "mean": 0.845, "std": 0.0, "n": 1, "values": [0.845], "k": 3},
           "recall": {"available": True, "mean": 0.41237, "std": 0.0, "n": 1, "values": [0.41237], "k": 3}}
FID_OK = {"available": True, "mean": 31.684, "std": 0.0, "n": 1, "values": [31.684]}


def test_kid_and_fid_infinity_sit_inside_fid_and_in_the_headline() -> None:
    rec = MetricsRecord.from_dict(_synthetic(fid={**FID_OK, **SMALL_N}).to_dict())
    assert rec.headline()["fid"] == 31.68 and rec.headline()["kid"] == 0.012346 and rec.headline()["fid_inf"] == 25.33
    assert rec.headline()["precision"] == 0.845 and rec.headline()["recall"] == 0.4124
    # a record written before KID and FID-infinity existed still reads; its headline says None for them
    old = MetricsRecord.from_dict(_synthetic(fid=FID_OK).to_dict())
    assert old.headline()["kid"] is None and old.headline()["fid_inf"] is None and old.headline()["recall"] is None
    # too small a set for FID-infinity: unavailable with a reason, never a number
    part = {**FID_OK, **SMALL_N, "fid_inf": {"available": False, "reason": "too few"}}
    assert MetricsRecord.from_dict(_synthetic(fid=part).to_dict()).headline()["fid_inf"] is None
    assert _synthetic().headline()["kid"] is None  # FID unavailable: so are both


@pytest.mark.parametrize("sub, key, why", [
    ({"kid": 0.01}, "fid.kid", "must be a mapping with 'available'"),
    ({"fid_inf": {"available": True, "mean": float("nan")}}, "fid.fid_inf", "says available but"),
    ({"kid": {"mean": 0.01, "std": 0.0}}, "fid.kid", "must be a mapping with 'available'"),
    # a precision or recall is a fraction (KID and FID-infinity may be any finite number)
    ({"precision": {"available": True, "mean": 1.2, "std": 0.0}}, "fid.precision.mean", "is 1.2, outside \\[0, 1\\]"),
    ({"recall": {**SMALL_N["recall"], "values": [-0.1], "mean": -0.1}}, "fid.recall.mean", "outside \\[0, 1\\]"),
    ({"recall": {**SMALL_N["recall"], "mean": 0.5}}, "fid.recall.mean", "but its recorded values give 0.41237"),
    ({"kid": {"available": True, "mean": -0.002, "std": 0.0}, "precision": {"available": False, "reason": "few"}},
     None, None),
])
def test_a_malformed_kid_or_fid_infinity_is_refused_by_key(sub: dict, key: str | None, why: str | None) -> None:
    d = _synthetic(fid={**FID_OK, **SMALL_N, **sub}).to_dict()
    if key is None:  # a negative KID and an unavailable precision are valid records
        assert MetricsRecord.from_dict(d).headline()["precision"] is None
        return
    with pytest.raises(MetricsError, match=why) as info:
        MetricsRecord.from_dict(d)
    assert info.value.key == key


ACC3 = {"mean": 0.4, "std": 0.0816496580927726, "n": 3, "values": [0.3, 0.4, 0.5], "runs": []}


@pytest.mark.parametrize("where, edit, key, why", [
    ("classifiers", {"mean": 1.7, "std": 0.0}, "classifiers.cnn.mean", "is 1.7, outside \\[0, 1\\]"),
    ("classifiers", {**ACC3, "values": [0.3, 0.4, 1.5], "mean": 0.7333333333333334}, "classifiers.cnn.values",
     "holds 1.5, outside"),
    ("classifiers", {**ACC3, "mean": 0.99}, "classifiers.cnn.mean", "is 0.99 but its recorded values give 0.4"),
    ("classifiers", {**ACC3, "std": 0.5}, "classifiers.cnn.std", "is 0.5 but its recorded values give 0.0816"),
    ("classifiers", {**ACC3, "n": 5}, "classifiers.cnn.n", "is 5 but 3 values are recorded"),
    ("classifiers", {**ACC3, "std": -0.1}, "classifiers.cnn.std", "below 0"),
    ("fid", {**FID_OK, "mean": -3.0, "values": [-3.0]}, "fid.mean", "outside \\[0, inf\\]"),
    ("fid", {**FID_OK, "mean": 20.0}, "fid.mean", "is 20 but its recorded values give 31.684"),
    ("fid", {**FID_OK, **SMALL_N, "kid": {**SMALL_N["kid"], "mean": 0.5}}, "fid.kid.mean", "recorded values give"),
    ("w2", {"mean": -1.0, "std": 0.0}, "w2.mean", "outside"),
])
def test_a_summary_out_of_range_or_not_its_values_is_refused_by_key(where: str, edit: dict, key: str, why: str) -> None:
    """Issue 45, faults 9-10: an accuracy of 1.7 printed as 170.0, or a mean edited to 0.99 while its
    recorded per-set values give 0.4, would replace a good table; the record refuses both by key."""
    fields: dict = {"classifiers": {"cnn": edit}} if where == "classifiers" else {where: edit}
    if where == "w2":
        fields.update(method="entropic_wgan", classifiers={})
    d = _synthetic(**fields).to_dict()
    with pytest.raises(MetricsError, match=why) as info:
        MetricsRecord.from_dict(d)
    assert info.value.key == key


def test_a_summary_of_its_values_reads() -> None:
    """What ``mean_std`` writes passes (population std, floats as JSON gives them back)."""
    from dpsynth.evaluate.record import mean_std

    rec = {**mean_std([0.1234, 0.9876, 0.5555, 0.0001]), "runs": []}
    d = json.loads(json.dumps(_synthetic(classifiers={"cnn": rec}).to_dict()))
    assert MetricsRecord.from_dict(d).classifiers["cnn"]["n"] == 4
