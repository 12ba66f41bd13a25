"""The trivial private baselines (issue 69 item 3): a k-means codebook and a Gaussian with the noise removed,
fitted to locally privatized records alone, and scored like the generators."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from dpsynth.config import parse_params
from dpsynth.data.dataset import load_processed
from dpsynth.data.prepare import Sources, prepare
from dpsynth.errors import DataError
from dpsynth.evaluate.baselines import BASELINE, SWEEP_PRIVACY, baseline_rows, sweep_baseline_rows
from dpsynth.evaluate.w2 import privatized_records
from dpsynth.io import read_json, write_json
from dpsynth.methods.entropic_wgan import to_records
from dpsynth.methods.local_baselines import (
    GAUSSIAN,
    codebook_name,
    fit_codebook,
    fit_denoised_gaussian,
    read_privatized,
)
from dpsynth.stages.privatize import privatize, privatized_paths
from tests.conftest import REPO


def test_the_gaussian_fit_removes_the_known_noise_covariance() -> None:
    """Clean records N(m, C) with C of rank 3 in 5 dimensions, plus N(0, s^2 I) noise, s = 1. Tolerance: each
    entry of a sample covariance of N = 20,000 records has a standard error of at most sqrt((c_ii + s^2)(c_jj +
    s^2) / N) <= sqrt(4 * 4 / 20,000) = 0.028 (c_ii <= 3); 0.15 is over 5 of them. Without the removal the
    diagonal is off by s^2 = 1, far outside it."""
    rng = np.random.default_rng(0)
    a = rng.normal(size=(5, 3)) * np.array([1.0, 0.6, 0.3])
    true = a @ a.T
    mean = np.array([0.5, -1.0, 0.0, 2.0, 0.3])
    clean = mean + rng.normal(size=(20_000, 3)) @ a.T
    noisy = clean + rng.normal(0.0, 1.0, clean.shape)
    fit = fit_denoised_gaussian(noisy, 1.0)
    est = fit.factor @ fit.factor.T
    assert np.abs(est - true).max() < 0.15
    assert np.abs(fit.mean - mean).max() < 0.1  # standard error <= sqrt(4 / 20,000) = 0.014
    naive = fit_denoised_gaussian(noisy, 0.0)
    assert np.abs(np.diag(naive.factor @ naive.factor.T) - np.diag(true)).min() > 0.8
    # eigenvalues clipped at 0: a noise variance above every eigenvalue leaves the mean alone
    flat = fit_denoised_gaussian(noisy, 100.0)
    assert flat.factor.shape == (5, 0)
    assert np.allclose(flat.sample(3, rng), fit.mean[None, :])
    # samples have the fitted covariance (relative standard error of a variance over 50,000 samples: 0.6 %)
    s = fit.sample(50_000, np.random.default_rng(1))
    assert np.abs(np.cov(s, rowvar=False) - est).max() < 0.1


def test_a_codebook_finds_the_clusters_and_samples_by_their_frequency() -> None:
    """Three clusters 5 apart with shares 0.5 / 0.3 / 0.2, noise s = 1 per coordinate, 6,000 records: each centre
    averages >= 1,200 records (standard error sqrt(1 / 1,200) = 0.03 per coordinate; tolerance 0.15 = 5 of
    them); a share's standard error is <= sqrt(0.25 / 6,000) = 0.0065 (tolerance 0.03); the sampled frequencies
    of 30,000 draws have standard errors <= 0.003 (tolerance 0.02)."""
    rng = np.random.default_rng(0)
    centres = np.array([[5.0, 0.0], [-5.0, 0.0], [0.0, 5.0]])
    shares = np.array([0.5, 0.3, 0.2])
    which = rng.choice(3, size=6000, p=shares)
    noisy = centres[which] + rng.normal(0.0, 1.0, (6000, 2))
    book = fit_codebook(noisy, 3, seed=0)
    order = [int(np.argmin(np.linalg.norm(book.centres - c, axis=1))) for c in centres]
    assert sorted(order) == [0, 1, 2]
    assert np.abs(book.centres[order] - centres).max() < 0.15
    assert np.abs(book.weights[order] - shares).max() < 0.03
    draws = book.sample(30_000, np.random.default_rng(1))
    assert all(any(np.array_equal(d, c) for c in book.centres) for d in draws[:50])  # every sample is a centre
    freq = np.array([np.mean(np.all(draws == book.centres[i], axis=1)) for i in order])
    assert np.abs(freq - book.weights[order]).max() < 0.02


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    prepare("digits28", Sources(root=root))
    return root


def _params(root: Path, noise: str):
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["data"]["root"] = str(root)
    raw["scale"] = "smoke"
    raw["privacy_noise"] = noise
    raw["experiments"]["g28"] = {
        "method": "entropic_wgan", "dataset": "digits28",
        "local": {"mechanism": "gaussian", "epsilon": 2000.0, "delta": 1e-4, "radius": 28.0, "seed": 5},
        "hparams": {"generator": "dcgan", "loss": "entropic"}}
    return parse_params(raw)


def test_the_baselines_are_built_from_the_privatized_file_alone(data_root: Path) -> None:
    """The privatize stage's output (secret noise, recorded in the test's ledger) is all the baselines read: the
    clean records' folder is removed before they are built, and they are fitted to exactly the privatized
    file's records with the noise variance the mechanism states, labelled with its epsilon."""
    params = _params(data_root, "secret")
    rep = privatize(params, "g28")
    npz, _ = privatized_paths(data_root, "g28")
    clean_test = load_processed(data_root / "processed" / "digits28.npz").x_test[:200]
    shutil.rmtree(data_root / "processed")  # the clean records: gone before a baseline is built
    assert not (data_root / "processed").exists()
    priv = read_privatized(npz)
    assert priv.private and priv.epsilon == rep["epsilon"] == 2000.0 and priv.delta == 1e-4
    assert priv.noise_var == pytest.approx(rep["noise_scale"] ** 2, rel=1e-12)
    assert priv.domain == (-1.0, 1.0) and priv.record_shape == (1, 28, 28)
    assert "ε = 2000" in priv.privacy and "post-processing" in priv.privacy
    assert np.array_equal(priv.records, load_processed(npz).x_train.astype(np.float64))
    rows = baseline_rows(priv.records, priv.noise_var, to_records(clean_test), seed=0, n_eval=100,
                         noise_std=math.sqrt(priv.noise_var), privacy=priv.privacy, draws=2, domain=priv.domain)
    assert [r["loss"] for r in rows] == [codebook_name(10), codebook_name(100), GAUSSIAN]
    assert all(r["role"] == BASELINE and r["privacy"] == priv.privacy and r["w2_draws"] == 2 for r in rows)
    assert all(math.isfinite(r["w2"]) and r["w2"] > 0 for r in rows)
    assert not (data_root / "processed").exists()  # nothing recreated it either


def test_a_report_whose_epsilon_is_not_its_mechanisms_is_refused(tmp_path: Path, data_root: Path) -> None:
    params = _params(data_root, "reproducible")
    if not (data_root / "processed" / "digits28.npz").is_file():
        prepare("digits28", Sources(root=data_root))
    privatize(params, "g28")
    npz, js = privatized_paths(data_root, "g28")
    assert read_privatized(npz).privacy == "none (reproducible noise - not private)"
    rep = read_json(js)
    write_json(js, {**rep, "epsilon": rep["epsilon"] / 2})  # claims half the epsilon of its noise
    with pytest.raises(DataError, match="not what its mechanism gives"):
        read_privatized(npz)


def test_the_sweeps_baselines_fit_the_records_its_generators_saw() -> None:
    """Fig. 5's baselines (2-D points, to stay fast): per (seed, level), three rows fitted to
    ``w2.privatized_records`` of that seed and level -- the records that seed's generators train on -- so the
    Gaussian baseline's denoised mean is that of those records, and another seed's records give another row."""
    rng = np.random.default_rng(3)
    train = rng.uniform(-1, 1, (400, 2))
    ref = rng.uniform(-1, 1, (300, 2))
    rows = sweep_baseline_rows(train, ref, [0.1, 0.3], [0, 1], n_eval=100, draws=2)
    assert len(rows) == 2 * 2 * 3
    assert {(r["seed"], r["noise_std"]) for r in rows} == {(s, n) for s in (0, 1) for n in (0.1, 0.3)}
    assert all(r["role"] == BASELINE and r["privacy"] == SWEEP_PRIVACY for r in rows)
    # the codebook with k = 100 fitted to seed 1's records at level 1 is what the row scored
    from dpsynth.evaluate.baselines import sampler
    from dpsynth.evaluate.w2 import score_sampler

    book = fit_codebook(privatized_records(train, 0.3, 1, 1), 100, seed=1)
    _, w2s = score_sampler(sampler(book), ref, seed=1, n_eval=100, draws=2)
    row = next(r for r in rows if r["seed"] == 1 and r["noise_std"] == 0.3 and r["loss"] == codebook_name(100))
    assert row["w2"] == pytest.approx(w2s["w2"], rel=1e-12)
    other = next(r for r in rows if r["seed"] == 0 and r["noise_std"] == 0.3 and r["loss"] == codebook_name(100))
    assert other["w2"] != row["w2"]
