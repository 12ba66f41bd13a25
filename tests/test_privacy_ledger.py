"""The privacy ledger (issue #15): every released model per dataset and the composed epsilon."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from dpsynth.errors import PrivacyError
from dpsynth.privacy import accounting as acc
from dpsynth.privacy.randomness import NoiseSource
from dpsynth.privacy.report import dp_sgd_report, gaussian_release_report, gswgan_report
from dpsynth.report.ledger import build_ledger


def _write(results: Path, name: str, dataset: str, privacy: dict) -> None:
    d = results / "runs" / name
    d.mkdir(parents=True)
    (d / "metrics.json").write_text(json.dumps({"experiment": name, "dataset": dataset, "privacy": privacy,
                                                "classifiers": {}}))


def _dps(steps: int, mode: str = "secret") -> dict:
    rep = dp_sgd_report(mechanism="dp_sinkhorn image-gradient", sigma=1.1, batch_size=50, dataset_size=60000,
                        steps=steps, delta=1e-5)
    rep.noise = NoiseSource(mode, 0 if mode == "reproducible" else None).describe()
    return json.loads(json.dumps(rep.to_dict()))


def test_ledger_composes_every_released_model_of_a_dataset(tmp_path: Path) -> None:
    gsw = json.loads(json.dumps(gswgan_report(sigma=1.07, shards=1000, batch_size=32, steps=2000, delta=1e-5).to_dict()))
    _write(tmp_path, "a", "mnist", _dps(100_000))
    _write(tmp_path, "b", "mnist", _dps(200_000))
    _write(tmp_path, "g", "mnist", gsw)
    _write(tmp_path, "c", "fashion_mnist", _dps(100_000))
    frame, notes = build_ledger(tmp_path)
    mnist = frame[frame["Dataset"] == "mnist"]
    assert list(mnist["Released model"]) == ["a", "b", "g", "ALL 3 (composed)"]
    # independent composition: the three RDP curves added, classic conversion at delta 1e-5
    a = np.array(acc.CLASSIC_ORDERS)
    rdp = (acc.one_step_rdp(1.1, 50 / 60000) * 300_000 + acc.one_step_rdp(1.07 / math.sqrt(32), 1e-3) * 2000)
    want = float(np.min(rdp + math.log(1e5) / (a - 1)))
    total = float(mnist.iloc[-1]["ε (headline)"])
    assert total == pytest.approx(want, abs=0.01)
    singles = [float(x.split()[0]) for x in mnist["ε (headline)"][:3]]
    assert max(singles) < total < sum(singles)  # composition costs more than any one, less than the naive sum
    fm = frame[frame["Dataset"] == "fashion_mnist"]
    assert float(fm.iloc[-1]["ε (headline)"]) == pytest.approx(float(fm.iloc[0]["ε (headline)"].split()[0]), abs=0.01)
    assert any("compos" in n for n in notes)


def test_ledger_composes_a_single_gaussian_release(tmp_path: Path) -> None:
    """DP-MERF's report (one release, q = 1, no sampling field) composes as the plain Gaussian: alone, the
    ledger's total is the run's own epsilon; beside a DP-SGD run, the RDP curves add. (A quick pipeline's
    report failed on it: 'sampling must be one of ...'.)"""
    sigma = acc.calibrate_sigma(1.0, 1, 1e-5, 10.0)  # what DP-MERF releases with at (10, 1e-5): ~0.568
    merf = json.loads(json.dumps(gaussian_release_report(sigma=sigma, dataset_size=60000, delta=1e-5,
                                                         bound=1.0).to_dict()))
    assert merf["sampling"] is None
    _write(tmp_path, "merf", "mnist", merf)
    _write(tmp_path, "merf_f", "fashion_mnist", merf)
    _write(tmp_path, "dps", "fashion_mnist", _dps(100_000))
    frame, _ = build_ledger(tmp_path)
    mnist = frame[frame["Dataset"] == "mnist"]
    own = merf["epsilon"]["rdp_classic"]
    assert float(mnist.iloc[-1]["ε (headline)"]) == pytest.approx(own, abs=0.01) and 9.9 < own <= 10.0
    a = np.array(acc.CLASSIC_ORDERS)
    rdp = a / (2 * sigma**2) + acc.one_step_rdp(1.1, 50 / 60000) * 100_000  # Gaussian RDP: alpha / (2 sigma^2)
    fm = frame[frame["Dataset"] == "fashion_mnist"]
    assert float(fm.iloc[-1]["ε (headline)"]) == pytest.approx(float(np.min(rdp + math.log(1e5) / (a - 1))), abs=0.01)


def test_ledger_is_infinite_with_a_reproducible_run_and_refuses_an_edited_report(tmp_path: Path) -> None:
    _write(tmp_path, "a", "mnist", _dps(1000))
    _write(tmp_path, "r", "mnist", _dps(1000, mode="reproducible"))
    frame, _ = build_ledger(tmp_path)
    assert frame.iloc[-1]["ε (headline)"] == "∞" and "r" in frame.iloc[-1]["Mechanism"]
    assert frame[frame["Released model"] == "r"]["Noise"].item() == "reproducible - NOT private"
    bad = _dps(1000)
    bad["epsilon"]["rdp_classic"] = 0.5
    _write(tmp_path, "z", "mnist", bad)
    with pytest.raises(PrivacyError, match=r"runs/z/metrics.json.*epsilon\['rdp_classic'\] = 0.5"):
        build_ledger(tmp_path)


def test_ledger_records_each_runs_neighbour_relation(tmp_path: Path) -> None:
    """Issue 45, fault 12: DP-MERF's single release is stated for replace-one neighbours, the
    Poisson-sampled runs for add/remove-one; the ledger says which for each run and lists both where a
    dataset composes both (the decision lives in privacy/verify.py, not in the report)."""
    from dpsynth.privacy.verify import ADD_REMOVE, REPLACE_ONE

    sigma = acc.calibrate_sigma(1.0, 1, 1e-5, 10.0)
    merf = json.loads(json.dumps(gaussian_release_report(sigma=sigma, dataset_size=60000, delta=1e-5,
                                                         bound=1.0).to_dict()))
    _write(tmp_path, "merf", "mnist", merf)
    _write(tmp_path, "dps", "mnist", _dps(1000))
    frame, notes = build_ledger(tmp_path)
    rel = dict(zip(frame["Released model"], frame["Neighbours"]))
    assert rel["merf"] == REPLACE_ONE and rel["dps"] == ADD_REMOVE
    assert rel["ALL 2 (composed)"] == f"{ADD_REMOVE}, {REPLACE_ONE}"
    assert any("Neighbours" in n for n in notes)
