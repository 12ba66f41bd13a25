"""The central-DP baseline (issue 69 item 3): a class-conditional Gaussian released through one Gaussian
mechanism -- accounted by the project's accountant, its noise what the accountant was told, reserved in the
release ledger before the noise, refused by a total budget it does not fit, its noise secret."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from dpsynth.config.params import TotalBudget
from dpsynth.data.dataset import load_processed
from dpsynth.data.prepare import Sources, prepare
from dpsynth.errors import PrivacyError
from dpsynth.io import read_json, sha256_file
from dpsynth.methods.central_baseline import (
    SENSITIVITY,
    query_stds,
    release_baseline,
    release_statistics,
)
from dpsynth.privacy import accounting as acc
from dpsynth.privacy.ledger_store import ReleaseLedger
from dpsynth.privacy.randomness import NoiseSource
from dpsynth.privacy.verify import verify_report


@pytest.fixture(scope="module")
def digits(tmp_path_factory: pytest.TempPathFactory) -> tuple[np.ndarray, np.ndarray, int]:
    root = tmp_path_factory.mktemp("data")
    prepare("digits28", Sources(root=root))
    d = load_processed(root / "processed" / "digits28.npz")
    return d.x_train.reshape(len(d.x_train), -1) / 255.0, d.y_train, d.num_classes


def test_the_queries_together_are_one_gaussian_mechanism_of_the_accounted_sigma() -> None:
    """sum_j (Delta_j / s_j)^2 = 1 / sigma^2: the joint multiplier is the sigma the accountant accounts."""
    for sigma in (0.5, 1.0, 3.7):
        s = query_stds(sigma)
        joint = 1.0 / math.sqrt(sum((SENSITIVITY[k] / s[k]) ** 2 for k in s))
        assert joint == pytest.approx(sigma, rel=1e-12)


def test_the_released_noise_has_the_stds_the_accountant_was_told(digits) -> None:
    """The released statistics minus the same statistics computed here without noise: the sums' 7,840 values and
    the projected second moments' 150 upper-triangle values have the stds of ``query_stds``. Tolerance: the
    relative standard error of a sample std of k normal values is 1 / sqrt(2k): 0.8 % and 5.8 %; 5 % and 15 % are
    over 2.5 of them, while a sigma off by a factor of 2 (or noise left off) is 50 % off or more. (The global
    second moment is released only through its eigenvectors here, so its noise is not seen directly.)"""
    x, y, c = digits
    sigma = 0.8
    stats = release_statistics(x, y, c, sigma=sigma, rank=5, rng=np.random.default_rng(0))
    z = x / math.sqrt(x.shape[1])  # images in [0, 1]: already in the unit ball
    s = query_stds(sigma)
    sums = np.stack([z[y == k].sum(axis=0) for k in range(c)])
    assert np.std(stats["sums"] - sums) == pytest.approx(s["sums"], rel=0.05)
    proj = z @ stats["basis"]
    clean = np.stack([proj[y == k].T @ proj[y == k] for k in range(c)])
    r = stats["basis"].shape[1]
    ju = np.triu_indices(r)
    diff = np.concatenate([(stats["projected"][k] - clean[k])[ju] for k in range(c)])
    assert np.std(diff) == pytest.approx(s["projected"], rel=0.15)  # 150 values: s.e. 5.8 %, 2.6 of them
    assert np.allclose(stats["projected"], np.transpose(stats["projected"], (0, 2, 1)))  # mirrored, not twice noised
    counts = np.bincount(y, minlength=c)
    assert np.abs(stats["counts"] - counts).max() < 6 * s["counts"]


def _release(digits, tmp_path: Path, *, noise: NoiseSource, budgets=None, name: str = "b", eps: float = 10.0):
    x, y, c = digits
    ledger = ReleaseLedger.configured(None)  # $DPSYNTH_LEDGER: the test's own folder (tests/conftest.py)
    out = tmp_path / f"{name}.npz"
    model, report = release_baseline(x, y, c, dataset="digits28", name=name, epsilon=eps, delta=1e-5, out=out,
                                     noise=noise, ledger=ledger, budgets=budgets, rank=5)
    return model, report, ledger, out


def test_the_release_is_accounted_and_confirmed_in_the_ledger(digits, tmp_path: Path) -> None:
    model, report, ledger, out = _release(digits, tmp_path, noise=NoiseSource("secret"))
    verify_report(report, str(out))  # every epsilon recomputed from the recorded mechanism
    sigma = report["sigma"]
    assert report["mechanism"] == "gaussian_release" and report["steps"] == 1 and report["q"] == 1.0
    assert report["epsilon"]["rdp_classic"] == pytest.approx(acc.gaussian_release_epsilon(sigma, 1e-5)["rdp_classic"])
    assert report["epsilon"]["rdp_classic"] <= 10.0
    assert acc.gaussian_release_epsilon(sigma * 0.999, 1e-5)["rdp_classic"] > 10.0 * 0.999  # calibrated, not loose
    assert read_json(out.with_suffix(".json"))["epsilon"] == report["epsilon"]
    import json

    lines = [json.loads(t) for t in ledger.path.read_text().splitlines()]
    assert [e["status"] for e in lines if e["name"] == "b"] == ["pending", "confirmed"]  # reserved, then confirmed
    entries = [r for r in ledger.read()[0] if r.name == "b"]
    done = entries[-1]
    assert done.dataset == "digits28" and done.mechanism == "gaussian_release" and done.stage == "baseline"
    assert done.epsilon == pytest.approx(report["epsilon"]["rdp_classic"]) and done.sha256 == sha256_file(out)
    assert done.rdp is not None and done.neighbours == "replace one"
    imgs, labels = model.sample(500, np.random.default_rng(0))
    assert imgs.shape == (500, 784) and imgs.min() >= 0.0 and imgs.max() <= 1.0 and set(labels) <= set(range(10))


def test_a_budget_it_does_not_fit_refuses_it_before_any_noise(digits, tmp_path: Path) -> None:
    with pytest.raises(PrivacyError, match="refused before any noise is drawn"):
        _release(digits, tmp_path, noise=NoiseSource("secret"), budgets={"digits28": TotalBudget(epsilon=5.0)},
                 name="over")
    assert not (tmp_path / "over.npz").exists() and not (tmp_path / "over.json").exists()
    assert not [r for r in ReleaseLedger.configured(None).read()[0] if r.name == "over"]
    # a budget it fits: released
    _release(digits, tmp_path, noise=NoiseSource("secret"), budgets={"digits28": TotalBudget(epsilon=1e6)},
             name="fits")
    assert (tmp_path / "fits.npz").is_file()


def test_its_noise_is_secret(digits, tmp_path: Path) -> None:
    """Two secret releases of the same records differ and their report holds no seed; reproducible noise is
    recorded as a release without a guarantee."""
    _, r1, _, o1 = _release(digits, tmp_path, noise=NoiseSource("secret"), name="s1")
    _, r2, _, o2 = _release(digits, tmp_path, noise=NoiseSource("secret"), name="s2")
    a, b = np.load(o1), np.load(o2)
    assert not np.allclose(a["sums"], b["sums"]) and not np.allclose(a["counts"], b["counts"])
    assert r1["noise"]["mode"] == "secret" and r1["noise"]["private"] is True
    assert "seed" not in str(read_json(o1.with_suffix(".json"))["noise"])
    _, r3, ledger, _ = _release(digits, tmp_path, noise=NoiseSource("reproducible", 3), name="rep")
    assert r3["noise"]["private"] is False
    rep = [r for r in ledger.read()[0] if r.name == "rep"][-1]
    assert math.isinf(rep.epsilon) and rep.status == "confirmed"
