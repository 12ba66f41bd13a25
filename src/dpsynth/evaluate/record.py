"""``metrics.json``: what the evaluate stage writes for one run (``results/runs/{experiment}/``) or one
real-data row (``results/real/{dataset}/``), and what the report reads back.

The writer owns the format: ``MetricsRecord`` is built by the evaluate stage and written with
``write``; the report reads a file through ``MetricsRecord.from_dict``, which refuses one that a
table would misprint (a missing key, a non-finite accuracy, a privacy report where none belongs).

This module stays light (no numpy, torch or pydantic at import): the report imports it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

from dpsynth.errors import DataError

#: The ``method`` of a real-data row (classifiers trained on the real training split).
REAL_DATA = "real data"

#: Keys every metrics.json written by `dpsynth evaluate` has; a file without one is damaged or hand-made.
REQUIRED_KEYS = ("experiment", "dataset", "method", "classifiers", "fid", "privacy", "scale")
#: Written beside each metrics.json: its headline numbers (``MetricsRecord.headline``), DVC's ``metrics:``.
HEADLINE_FILE = "headline.json"
#: Keys of a synthetic-data run only (absent from a real-data row's file); each may be null.
SYNTHETIC_KEYS = ("w2", "n_synthetic_sets", "n_synthetic", "seconds", "train")
#: Inside an available ``fid``: KID, FID-infinity, precision and recall (``dpsynth.evaluate.fidelity``),
#: optional so that records written before them still read.
FIDELITY_KEYS = ("kid", "fid_inf", "precision", "recall")


#: ``protocols`` key of GS-WGAN's Table 1 protocol (``dpsynth.evaluate.gswgan_protocol``), and the name
#: its per-set accuracies give the project's CNN beside the zoo's twelve models.
GS_WGAN = "gs_wgan"
GSWGAN_CNN = "cnn"


def mean_std(values: list[float]) -> dict[str, Any]:
    """{"mean", "std" (population), "n", "values"}: how every metric of a record summarises its
    synthetic sets (NaN mean and std for no values)."""
    import numpy as np

    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return {"mean": math.nan, "std": math.nan, "n": 0, "values": []}
    return {"mean": float(arr.mean()), "std": float(arr.std(ddof=0)), "n": int(arr.size), "values": arr.tolist()}


def average_accuracy(per_set: list[dict[str, float]]) -> dict[str, Any]:
    """GS-WGAN's "Avg Acc": per synthetic set, the mean accuracy of every model it lists (the zoo's
    and the CNN); then mean and std over the sets."""
    return mean_std([math.fsum(accs.values()) / len(accs) for accs in per_set if accs])


def calibrated_accuracy(run: dict[str, Any], real: dict[str, Any]) -> dict[str, Any]:
    """GS-WGAN's "Calibrated Acc" of a run's ``protocols.gs_wgan`` record against the real-data row's:
    per synthetic set, the mean over the models both have of (accuracy when trained on the synthetic
    set) / (accuracy when trained on real data, the real row's mean); then mean and std over the sets.
    A fraction (the paper prints it in percent); the real row's own is 1.

    The paper says "averaged accuracy ... normalized by the accuracy when trained on real data". We
    normalise each model by its own real accuracy, then average: the ratio of the two printed Avg Acc
    values cannot give the printed Calibrated Acc (G-PATE, MNIST: 0.34 / 0.88 is 37.8-39.4 % for any
    unrounded values, printed 40 %; Fashion-MNIST 0.40 / 0.79 is 49.7-51.6 %, printed 54 %), while the
    per-model ratio weighs a weak model's loss as its share of what it can reach. Models one record
    lacks are left out and listed in "missing"."""
    real_sets = real["accuracy"]["per_set"]
    real_acc = {m: math.fsum(s[m] for s in real_sets) / len(real_sets) for m in real_sets[0]} if real_sets else {}
    ours = run["accuracy"]["per_set"]
    models = [m for m in (ours[0] if ours else {}) if m in real_acc and real_acc[m] > 0]
    missing = sorted((set(ours[0]) if ours else set()) ^ set(real_acc))
    if not models:
        return {**mean_std([]), "models": [], "missing": missing}
    values = [math.fsum(s[m] / real_acc[m] for m in models) / len(models) for s in ours]
    return {**mean_std(values), "models": models, "missing": missing}


def unconditional_methods() -> tuple[str, ...]:
    """Methods whose runs have no classifiers (an unconditional generator): they are scored by W2 instead."""
    from dpsynth.config import METHOD_SPECS

    return tuple(name for name, spec in METHOD_SPECS.items() if not spec.conditional)


class MetricsError(DataError):
    """A metrics.json key that is missing or malformed: ``key`` (dotted) and ``why``."""

    def __init__(self, key: str, why: str) -> None:
        super().__init__(f"key {key!r} {why}")
        self.key, self.why = key, why


def _finite(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(float(v))


#: The range of each measured quantity: an accuracy (and a precision or recall) is a fraction, FID, W2 and
#: IS are >= 0 (KID and FID-infinity are estimates that may fall below 0: finite only). A value outside is
#: a damaged or hand-edited file, never a measurement.
ACCURACY, NON_NEGATIVE, ANY = (0.0, 1.0), (0.0, math.inf), (-math.inf, math.inf)
#: The range of each of ``FIDELITY_KEYS``, and the digits ``MetricsRecord.headline`` rounds it to.
FIDELITY_BOUNDS = {"kid": ANY, "fid_inf": ANY, "precision": ACCURACY, "recall": ACCURACY}
FIDELITY_DIGITS = {"kid": 6, "fid_inf": 2, "precision": 4, "recall": 4}


def _check_summary(key: str, rec: dict[str, Any], bounds: tuple[float, float]) -> None:
    """``rec``'s ``mean`` (and each recorded value) within ``bounds``, ``std`` >= 0, and -- where the
    per-set ``values`` are recorded -- ``mean``, ``std`` (population) and ``n`` exactly the ones those
    values give (``mean_std``): a table prints the summary, so an edited summary must not pass."""
    lo, hi = bounds
    mean, std = rec.get("mean"), rec.get("std", 0.0)
    if not _finite(mean) or not _finite(std):
        raise MetricsError(key, f"must be a record with numeric 'mean' and 'std', got {rec!r}")
    if not lo <= mean <= hi:
        raise MetricsError(f"{key}.mean", f"is {mean}, outside [{lo:g}, {hi:g}]")
    if std < 0:
        raise MetricsError(f"{key}.std", f"is {std}, below 0")
    values = rec.get("values")
    if not values:  # not recorded (an empty list: hand-made summaries, records written before values)
        return
    if not isinstance(values, list) or not all(_finite(v) for v in values):
        raise MetricsError(f"{key}.values", f"must be a list of numbers, got {values!r}")
    bad = [v for v in values if not lo <= v <= hi]
    if bad:
        raise MetricsError(f"{key}.values", f"holds {bad[0]}, outside [{lo:g}, {hi:g}]")
    want = mean_std(values)  # the summary every record is written with
    n, want_mean, want_std = want["n"], want["mean"], want["std"]
    if rec.get("n", n) != n:
        raise MetricsError(f"{key}.n", f"is {rec.get('n')!r} but {n} values are recorded")
    if not math.isclose(mean, want_mean, rel_tol=1e-9, abs_tol=1e-12):
        raise MetricsError(f"{key}.mean", f"is {mean:.6g} but its recorded values give {want_mean:.6g}")
    if not math.isclose(std, want_std, rel_tol=1e-6, abs_tol=1e-9):
        raise MetricsError(f"{key}.std", f"is {std:.6g} but its recorded values give {want_std:.6g}")


@dataclass(frozen=True)
class MetricsRecord:
    """One metrics.json. Written keys: the seven of ``REQUIRED_KEYS``, then -- for a synthetic-data
    run, never for a real-data row -- the five of ``SYNTHETIC_KEYS``, then ``preset`` and ``versions``
    (files that lack those two, such as hand-made fixtures, read as None and are written without them),
    then ``protocols`` where a table asked for a paper's own protocol, and ``baselines`` for a run trained on
    locally privatized records. ``extra`` keeps keys this version does not know, so a read record writes back
    what it read."""

    experiment: str  # the run's name; ``real_{dataset}`` for a real-data row
    dataset: str
    method: str  # REAL_DATA for a real-data row
    #: classifier kind -> {"mean", "std", "n", "values", "runs"} (accuracy on the real test split);
    #: empty for an unconditional method, which is scored by ``w2``
    classifiers: dict[str, dict[str, Any]]
    #: {"available": True, "mean", "std", "n", "values", counts, extractor, weights, "kid", "fid_inf",
    #: "precision", "recall" ...} or {"available": False, "fid": None, "reason"}: never a number that was not
    #: measured. "kid", "fid_inf", "precision" and "recall" (``FIDELITY_KEYS``: from the same features and
    #: reference, each {"available": True, "mean", "std", ...protocol} or {"available": False, "reason"}) are
    #: absent from records written before they existed; readers show those as not evaluated
    fid: dict[str, Any]
    privacy: dict[str, Any] | None  # the run's privacy report (verified by readers); None for a real-data row
    scale: str
    # of a synthetic-data run only:
    #: W2 to the clean held-out test split {"mean", "std", ...}; None for conditional methods. (The W2 to a
    #: run's own clean training records is private: ``paths.w2_train_file``; a "train" key here is refused.)
    w2: dict[str, Any] | None = None
    n_synthetic_sets: int | None = None
    n_synthetic: int | None = None
    seconds: dict[str, float] | None = None  # {"load", "classifiers", "fid"}
    train: dict[str, Any] | None = None  # the run's train_summary.json; None when there is none
    # every run:
    preset: dict[str, Any] | None = None  # the scale's preset as evaluated
    versions: dict[str, str] | None = None  # dpsynth, torch, sklearn, python
    #: a paper's own evaluation protocol, computed for the runs of a table that asks for it (``Table.protocol``):
    #: {"gs_wgan": {"is", "fid_train", "zoo", "accuracy", "sizes", ...}} (``dpsynth.evaluate.gswgan_protocol``);
    #: None (not written) for every other run
    protocols: dict[str, dict[str, Any]] | None = None
    #: a run trained on locally privatized records: its trivial private baselines, fitted to its privatized file
    #: and scored as its generator (``evaluate.baselines.run_baselines``: {"available", "privacy", "epsilon",
    #: "delta", "seed", "models": {name: a ``w2``-shaped record}, ...}); None (not written) for every other run
    baselines: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def is_real_data(self) -> bool:
        return self.method == REAL_DATA

    def to_dict(self) -> dict[str, Any]:
        """The JSON object, keys in the order the evaluate stage has always written them."""
        out: dict[str, Any] = {"experiment": self.experiment, "dataset": self.dataset, "method": self.method,
                               "classifiers": self.classifiers}
        if not self.is_real_data:
            out["w2"] = self.w2
        out.update(fid=self.fid, privacy=self.privacy)
        if not self.is_real_data:
            out.update(n_synthetic_sets=self.n_synthetic_sets, n_synthetic=self.n_synthetic, seconds=self.seconds,
                       train=self.train)
        out["scale"] = self.scale
        if self.preset is not None:
            out["preset"] = self.preset
        if self.versions is not None:
            out["versions"] = self.versions
        if self.protocols is not None:
            out["protocols"] = self.protocols
        if self.baselines is not None:
            out["baselines"] = self.baselines
        return {**out, **self.extra}

    def write(self, path: str | os.PathLike[str]) -> None:
        """Atomically, as indented key-sorted JSON (``dpsynth.io.write_json``), and beside it the
        headline numbers (``HEADLINE_FILE``)."""
        from dpsynth.io import write_json

        write_json(path, self.to_dict())
        write_json(os.path.join(os.path.dirname(path), HEADLINE_FILE), self.headline())

    def headline(self) -> dict[str, Any]:
        """The few numbers ``dvc metrics show`` prints per run, readable in a terminal (DVC flattens a
        whole metrics.json into ~130 columns): accuracy per classifier, FID (W2 for an unconditional
        generator), KID, FID-infinity, precision and recall, and for a generator the epsilon it spent and
        the lr, sigma and steps it trained with. None where a number was not measured (or is infinite: a
        non-private run's epsilon)."""
        out: dict[str, Any] = {"accuracy": {k: round(float(v["mean"]), 4) for k, v in self.classifiers.items()},
                               "fid": round(float(self.fid["mean"]), 2) if self.fid.get("available") else None}
        for key in FIDELITY_KEYS:
            sub = self.fid.get(key) if self.fid.get("available") else None
            out[key] = round(float(sub["mean"]), FIDELITY_DIGITS[key]) \
                if isinstance(sub, dict) and sub.get("available") else None
        if self.w2 is not None:
            out["w2"] = round(float(self.w2["mean"]), 4)
        if self.is_real_data:
            return out
        privacy, train = self.privacy or {}, self.train or {}
        eps = (privacy.get("epsilon") or {}).get(privacy.get("headline"))
        out["epsilon"] = round(float(eps), 3) if _finite(eps) else None
        out.update(lr=(train.get("hparams") or {}).get("lr"), sigma=train.get("sigma"), steps=train.get("steps"))
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, experiment: str | None = None, dataset: str | None = None,
                  real: bool = False) -> MetricsRecord:
        """Check one metrics.json object before any table uses it; a ``MetricsError`` names the first bad key.

        ``experiment`` (when given) is the name the file must be of, ``dataset`` the dataset it must
        be on; ``real``: the file is a real-data row's, whose ``privacy`` is null (every other run's
        is a mapping). The checks run in this order: required keys, the experiment's name, the three
        names, the dataset, classifiers, FID (then its KID, FID-infinity, precision and recall, where present),
        privacy."""
        for key in REQUIRED_KEYS:
            if key not in d:
                raise MetricsError(key, "is missing")
        if experiment is not None and d["experiment"] != experiment:
            raise MetricsError("experiment", f"is {d['experiment']!r} but the file is that of {experiment!r} "
                                    "(copied from another run?)")
        for key in ("dataset", "method", "scale"):
            if not isinstance(d[key], str) or not d[key]:
                raise MetricsError(key, f"must be a non-empty string, got {d[key]!r}")
        if dataset is not None and d["dataset"] != dataset:
            raise MetricsError("dataset", f"is {d['dataset']!r}, expected {dataset!r} "
                                          "(a run from another configuration?)")
        clf = d["classifiers"]
        if not isinstance(clf, dict):
            raise MetricsError("classifiers", "must be a mapping of classifier -> accuracy, "
                                              f"got {type(clf).__name__} {clf!r}")
        unconditional = unconditional_methods()
        if not clf and not (d["method"] in unconditional and d.get("w2") is not None):
            raise MetricsError("classifiers", "is empty (only a run of an unconditional method, "
                                              f"{' or '.join(unconditional)}, scored by 'w2', has no classifiers)")
        for kind, rec in clf.items():
            if not isinstance(rec, dict):
                raise MetricsError(f"classifiers.{kind}",
                                   f"must be a record with numeric 'mean' and 'std', got {rec!r}")
            _check_summary(f"classifiers.{kind}", rec, ACCURACY)
        fid = d["fid"]
        if not isinstance(fid, dict) or not isinstance(fid.get("available"), bool):
            raise MetricsError("fid", f"must be a mapping with 'available' true/false, got {fid!r}")
        if fid["available"] and not (_finite(fid.get("mean")) and _finite(fid.get("std", 0.0))):
            raise MetricsError("fid", f"says available but has no numeric 'mean'/'std': {fid!r}")
        if fid["available"]:
            _check_summary("fid", fid, NON_NEGATIVE)
        for key in FIDELITY_KEYS if fid["available"] else ():
            sub = fid.get(key)
            if sub is None:  # written before this measure existed
                continue
            if not isinstance(sub, dict) or not isinstance(sub.get("available"), bool):
                raise MetricsError(f"fid.{key}", f"must be a mapping with 'available' true/false, got {sub!r}")
            if sub["available"] and not (_finite(sub.get("mean")) and _finite(sub.get("std", 0.0))):
                raise MetricsError(f"fid.{key}", f"says available but has no numeric 'mean'/'std': {sub!r}")
            if sub["available"]:
                _check_summary(f"fid.{key}", sub, FIDELITY_BOUNDS[key])
        w2 = d.get("w2")
        if w2 is not None:
            if not isinstance(w2, dict):
                raise MetricsError("w2", f"must be a record with numeric 'mean' and 'std', got {w2!r}")
            _check_summary("w2", w2, NON_NEGATIVE)
            if "train" in w2:  # W2 to the run's own clean training records: private, never in this (released) file
                raise MetricsError("w2.train", "is the W2 to the run's own clean training records, computed on the "
                                   "private records without noise: it belongs under the private root "
                                   "(private/runs/<run>/w2_train.json), never in a released metrics.json")
        priv = d["privacy"]
        if real:
            if priv is not None:
                raise MetricsError("privacy", f"must be null for a real-data row, got {type(priv).__name__}")
        elif not isinstance(priv, dict):
            raise MetricsError("privacy", "must be the run's privacy report (a mapping), "
                                          f"got {type(priv).__name__} {priv!r}")
        protocols = d.get("protocols")
        if protocols is not None:
            _check_protocols(protocols, real=real)
        baselines = d.get("baselines")
        if baselines is not None:
            if real:
                raise MetricsError("baselines", "belongs to a run trained on locally privatized records, never to a "
                                                "real-data row")
            _check_baselines(baselines)
        optional = (*SYNTHETIC_KEYS, "preset", "versions", "protocols", "baselines")
        return cls(**{k: d[k] for k in REQUIRED_KEYS}, **{k: d.get(k) for k in optional},
                   extra={k: v for k, v in d.items() if k not in REQUIRED_KEYS and k not in optional})


def _check_baselines(rec: Any) -> None:
    """A run's ``baselines`` record a table would misprint is refused by key: each baseline's W2 (and, where
    present, its KID, precision and recall) summarised as a run's are (``_check_summary``), with the privacy they
    are released at; one that holds a W2 to clean training records (which they never read) is refused too."""
    if not isinstance(rec, dict) or not isinstance(rec.get("available"), bool):
        raise MetricsError("baselines", f"must be a mapping with 'available' true/false, got {rec!r}")
    if not rec["available"]:
        if not isinstance(rec.get("reason"), str) or not rec["reason"]:
            raise MetricsError("baselines.reason", "must say why a run has no baselines")
        return
    if not isinstance(rec.get("privacy"), str) or not rec["privacy"]:
        raise MetricsError("baselines.privacy", f"must be the baselines' privacy, a non-empty string, got "
                                                f"{rec.get('privacy')!r}")
    for key in ("epsilon", "delta"):
        if not (isinstance(rec.get(key), int | float) and not isinstance(rec.get(key), bool)) or rec[key] < 0:
            raise MetricsError(f"baselines.{key}", f"must be the privatization's {key} (a number >= 0), got "
                                                   f"{rec.get(key)!r}")
    if not isinstance(rec.get("seed"), int) or isinstance(rec.get("seed"), bool):
        raise MetricsError("baselines.seed", f"must be the run's seed (an integer), got {rec.get('seed')!r}")
    models = rec.get("models")
    if not isinstance(models, dict) or not models:
        raise MetricsError("baselines.models", f"must map each baseline's name to its scores, got {models!r}")
    for name, m in models.items():
        where = f"baselines.models.{name}"
        if not isinstance(m, dict):
            raise MetricsError(where, f"must be a record with numeric 'mean' and 'std', got {m!r}")
        _check_summary(where, m, NON_NEGATIVE)
        if "train" in m:
            raise MetricsError(f"{where}.train", "is a W2 to clean training records: a baseline never reads them")
        close = m.get("closeness")
        if close is None:
            continue
        if not isinstance(close, dict):
            raise MetricsError(f"{where}.closeness", f"must be a mapping, got {close!r}")
        for key in ("kid", "precision", "recall"):
            if key in close:
                if not isinstance(close[key], dict):
                    raise MetricsError(f"{where}.closeness.{key}", f"must be a record, got {close[key]!r}")
                _check_summary(f"{where}.closeness.{key}", close[key], FIDELITY_BOUNDS[key])


def _check_protocols(protocols: Any, *, real: bool = False) -> None:
    """A ``protocols`` mapping a table would misprint is refused by key: GS-WGAN's needs numeric IS and
    training-split FID where available, and per-set accuracies of the same models in every set.

    And one a run must not release: its IS and training-split FID are statistics of the training records
    without noise, so a run's record (not a real-data row's, which is never pushed) never holds them
    (``gswgan_protocol.release_training_split``: they stay under the private root; the report shows them for a
    dataset declared public); and no record holds the IS network's key, a hash of its training records."""

    if not isinstance(protocols, dict):
        raise MetricsError("protocols", f"must be a mapping of protocol -> record, got {type(protocols).__name__}")
    gs = protocols.get(GS_WGAN)
    if gs is None:
        return
    if not isinstance(gs, dict):
        raise MetricsError(f"protocols.{GS_WGAN}", f"must be a mapping, got {type(gs).__name__}")
    for key in ("is", "fid_train"):
        sub = gs.get(key)
        if not isinstance(sub, dict) or not isinstance(sub.get("available"), bool):
            raise MetricsError(f"protocols.{GS_WGAN}.{key}",
                               f"must be a mapping with 'available' true/false, got {sub!r}")
        if sub["available"] and not (_finite(sub.get("mean")) and _finite(sub.get("std", 0.0))):
            raise MetricsError(f"protocols.{GS_WGAN}.{key}",
                               f"says available but has no numeric 'mean'/'std': {sub!r}")
        if sub["available"]:
            _check_summary(f"protocols.{GS_WGAN}.{key}", sub, NON_NEGATIVE)
        if sub["available"] and not real:
            raise MetricsError(f"protocols.{GS_WGAN}.{key}", "is computed on the training records without noise: "
                               "never in a run's metrics.json; re-run `dpsynth evaluate`, which keeps it under the "
                               "private root (private/runs/<run>/gswgan_train.json), where the report reads it for a "
                               "dataset data.public declares public")
    classifier = gs["is"].get("classifier")
    if isinstance(classifier, dict) and "key" in classifier:
        raise MetricsError(f"protocols.{GS_WGAN}.is.classifier.key", "is a hash of the IS network's training "
                           "records (it would confirm a guess of them): never in a metrics.json; re-run `dpsynth "
                           "evaluate`")
    acc = gs.get("accuracy")
    per_set = acc.get("per_set") if isinstance(acc, dict) else None
    if not isinstance(per_set, list) or not per_set or not all(
            isinstance(s, dict) and s and set(s) == set(per_set[0]) and all(_finite(v) for v in s.values())
            for s in per_set):
        raise MetricsError(f"protocols.{GS_WGAN}.accuracy.per_set",
                           "must list, per synthetic set, a numeric accuracy of the same models")
    for s in per_set:
        for model, v in s.items():
            if not 0.0 <= v <= 1.0:
                raise MetricsError(f"protocols.{GS_WGAN}.accuracy.per_set", f"holds {model} {v}, outside [0, 1]")
