"""Reshetova et al. (arXiv:2306.09547) Fig. 5: the right panel's measure (entropic W2 at 2 sigma^2 to privatized data), the
MNIST sweep at the paper's settings, and a sweep limited to other scales."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from tests.conftest import REPO, clear_pipeline, run_cli
from dpsynth.config import load_params

# One torch and one BLAS thread (conftest): the 800 x 800 Sinkhorn runs below gain nothing from a
# second thread on the shared 2-core CPU, and an oversubscribed one burnt ~4x the CPU time spinning.
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _half_circle(rng: np.random.Generator, n: int) -> np.ndarray:
    t = rng.uniform(0.0, np.pi, n)
    return np.c_[np.cos(t), np.sin(t)]


@pytest.mark.parametrize("seed", [0, 1])
def test_entropic_w2_at_twice_the_noise_variance_prefers_the_clean_distribution(seed: int) -> None:
    """Reshetova et al. eq. (16): at lambda = 2 sigma^2 the clean distribution minimises the entropic W2 to
    Gaussian-privatized data -- which is why Fig. 5 (right) measures it. A generator that learnt the
    noisy data scores worse. At a tiny lambda (plain W2^2) the order flips: the noisy copy is closer,
    so the test fails if the temperature is not the one the paper names.
    Tolerance: 800 points per side; over seeds 0-2 the gap was 0.025 and its seed-to-seed spread
    0.003, so the asserted gap of 0.01 is ~5 spreads from both the measured value and zero."""
    from dpsynth.evaluate.w2 import entropic_w2

    rng = np.random.default_rng(seed)
    s = 0.3
    privatized = _half_circle(rng, 800) + rng.normal(0.0, s, (800, 2))
    clean = _half_circle(rng, 800)
    noisy = _half_circle(rng, 800) + rng.normal(0.0, s, (800, 2))
    at_2s2 = entropic_w2(clean, privatized, 2 * s * s, n=None), entropic_w2(noisy, privatized, 2 * s * s, n=None)
    assert at_2s2[1] - at_2s2[0] > 0.01, at_2s2
    tiny = entropic_w2(clean, privatized, 1e-3, n=None), entropic_w2(noisy, privatized, 1e-3, n=None)
    assert tiny[0] - tiny[1] > 0.05, tiny


def test_entropic_w2_rejects_bad_input() -> None:
    from dpsynth.errors import ConfigError, DataError
    from dpsynth.evaluate.w2 import entropic_w2

    x = np.zeros((4, 2))
    with pytest.raises(ConfigError, match="temperature"):
        entropic_w2(x, x, 0.0)
    with pytest.raises(DataError, match="dimensions differ"):
        entropic_w2(x, np.zeros((4, 3)), 1.0)
    with pytest.raises(DataError, match="NaN"):
        entropic_w2(np.full((4, 2), np.nan), x, 1.0)


def test_the_sweep_rows_carry_both_panels() -> None:
    """Every (loss, noise) row has Fig. 5's right-panel value, and the clean records' own value is
    the same for every loss of a noise level (it does not depend on the generator)."""
    from dpsynth.evaluate.w2 import noise_sweep

    rng = np.random.default_rng(0)
    rows = noise_sweep(_half_circle(rng, 400), _half_circle(rng, 200), [0.1, 0.3], steps=3, batch_size=50,
                       sinkhorn_iters=20, n_eval=60)
    assert len(rows) == 6
    for r in rows:
        assert np.isfinite(r["entropic_w2_privatized"]) and r["entropic_w2_privatized"] > 0
    for s in (0.1, 0.3):
        clean = {r["entropic_w2_privatized_clean"] for r in rows if r["noise_std"] == s}
        assert len(clean) == 1
    # the entropic OT value grows with the temperature's noise: the clean baseline at 0.3 is larger
    base = {r["noise_std"]: r["entropic_w2_privatized_clean"] for r in rows}
    assert base[0.3] > base[0.1]


def test_mnist_fig5_is_configured_with_the_papers_settings() -> None:
    """Section 4.5: MNIST, p = 2, the three losses, an MLP 2x500 on a 2-D uniform latent, L = 200,
    b = 200, Adam 1e-4; all 60,000 training records at the paper scales; our step count (the paper states
    none) is the one Fig. 11's runs train, checked at twice the steps; both paper scales only."""
    from dpsynth.methods.entropic_wgan import generator_arch

    p = load_params(REPO / "params.yaml")
    sweep = p.w2_noise["mnist"]
    assert sweep.losses == ["entropic", "exact", "sinkhorn_divergence"]
    assert (sweep.batch_size, sweep.sinkhorn_iters, sweep.lr) == (200, 200, 1e-4)
    fig11 = p.all_experiments()["ewgan_mnist_gauss_fig11"]
    assert sweep.steps == fig11.hparams.max_steps
    assert sweep.check_noise_level in sweep.noise_levels and len(sweep.noise_levels) >= 4
    assert sweep.scales == ["paper", "paper_gpu", "paper_cpu"]  # paper_gpu: tests/test_w2_packed.py; the last: the CPU one
    for scale in ("paper", "paper_cpu"):
        preset = p.scales[scale]
        assert preset.w2_noise_steps is None and preset.w2_noise_train_subset is None and preset.train_steps is None
    check = p.all_experiments()[p.tables["reshetova_fig11_mnist"].step_check]
    assert check.hparams.max_steps == 2 * fig11.hparams.max_steps
    assert check.train_size in {p.all_experiments()[c].train_size for c in p.cells_of("n_mnist_fig11")}
    arch = generator_arch("mlp", (1, 28, 28))["kwargs"]
    assert (arch["latent_dim"], arch["hidden"], arch["latent_dist"]) == (2, [500, 500], "uniform")
    tables = {t.dataset: t for t in p.tables.values() if t.kind == "w2_noise"}
    assert {"mnist", "manifold2d_half_circle"} <= set(tables)
    assert tables["mnist"].published == "reshetova_fig5"


def test_a_sweep_limited_to_other_scales_writes_an_empty_result_that_says_why(tmp_path: Path) -> None:
    """Both DAGs run the stage at every scale; at a scale the sweep is not for, the CSV has its
    header and no rows, the JSON the reason, and the report's table and figure repeat it."""
    p = clear_pipeline(yaml.safe_load((REPO / "params.yaml").read_text()))
    p.update(scale="smoke", datasets=["manifold2d_half_circle"])
    p["evaluation"]["real_datasets"] = []
    p["data"]["root"] = str(tmp_path / "data")
    p["w2_noise"] = {"manifold2d_half_circle": {"noise_levels": [0.2], "steps": 3, "scales": ["paper"]}}
    p["tables"] = {"w2": {"title": "t", "paper": "seed 003 Figure 5", "kind": "w2_noise",
                          "published": "reshetova_fig5", "dataset": "manifold2d_half_circle"}}
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(p))
    results = tmp_path / "results"
    r = run_cli("w2noise", "manifold2d_half_circle", "--params", str(params), "--results", str(results))
    assert r.returncode == 0, r.stderr
    csv = results / "w2_noise" / "manifold2d_half_circle.csv"
    df = pd.read_csv(csv)
    assert len(df) == 0 and {"w2", "entropic_w2_privatized"} <= set(df.columns)
    info = json.loads(csv.with_suffix(".json").read_text())
    assert "not run at scale 'smoke'" in info["skipped"] and "scales: ['paper']" in info["skipped"]
    assert "no rows" in r.stdout

    from dpsynth.report.figures import w2_noise
    from dpsynth.report.tables import build_table

    loaded = load_params(params)
    built = build_table("w2", loaded, results)
    assert any("not run at scale 'smoke'" in n for n in built.notes)
    assert set(built.frame["W2 to clean data ours"]) == {"not run"}
    out = w2_noise(loaded, results, tmp_path / "figs")  # no figure: the reason, for the report page's not-run list
    png = tmp_path / "figs" / "w2_noise_manifold2d_half_circle.png"
    (skipped,) = [f for f in out if getattr(f, "path", None) == png]
    assert "not run at scale 'smoke'" in skipped.reason and not png.exists()


def test_the_step_check_trains_each_loss_at_twice_the_steps_and_a_pool_gives_the_same_rows(tmp_path: Path) -> None:
    """sweep_runs adds each loss at the check level at 2x the steps; two worker processes give the rows one
    process gives (every run is seeded by itself); the row cache resumes without training again."""
    from dpsynth.evaluate.w2 import noise_sweep, sweep_runs
    from dpsynth.errors import ConfigError

    runs = sweep_runs([0.1, 0.3], ["entropic", "exact"], 4, check_level=0.3)
    assert [(r.loss, r.noise_std, r.steps, r.role) for r in runs[-2:]] == [
        ("entropic", 0.3, 8, "step_check"), ("exact", 0.3, 8, "step_check")]
    assert len(runs) == 6 and all(r.role == "figure" and r.steps == 4 for r in runs[:4])
    with pytest.raises(ConfigError, match="check_noise_level 0.2"):
        sweep_runs([0.1, 0.3], ["entropic"], 4, check_level=0.2)

    rng = np.random.default_rng(0)
    train, ref = _half_circle(rng, 300), _half_circle(rng, 120)
    kw = dict(losses=["entropic", "exact"], steps=3, batch_size=40, sinkhorn_iters=10, n_eval=40, check_level=0.3)
    one = noise_sweep(train, ref, [0.1, 0.3], **kw)
    cache = tmp_path / "runs"
    pooled = noise_sweep(train, ref, [0.1, 0.3], workers=2, cache_dir=cache, **kw)
    strip = lambda rows: [{k: v for k, v in r.items() if k != "seconds"} for r in rows]  # noqa: E731
    assert strip(pooled) == strip(one)
    assert [r["role"] for r in one] == ["figure"] * 4 + ["step_check"] * 2
    assert len(list(cache.glob("*.json"))) == 6
    seen: list[int] = []
    again = noise_sweep(train, ref, [0.1, 0.3], cache_dir=cache, on_step=lambda: seen.append(1), **kw)
    assert strip(again) == strip(one) and not seen  # all six rows from the cache: no step trained
    # a changed setting misses the cache
    noise_sweep(train, ref, [0.1], cache_dir=cache, on_step=lambda: seen.append(1), **{**kw, "check_level": None,
                                                                                      "sinkhorn_iters": 11})
    assert len(seen) == 2 * 3


def test_several_seeds_are_several_training_runs_each_with_its_draw_spread_and_samples() -> None:
    """Issue 64: each seed is one training run of every (loss, noise) -- its own weights, batches and privatization
    noise -- so the rows of a setting differ; each row carries the spread of its W2 over sample draws and the
    generated records the report's sample grid draws."""
    from dpsynth.evaluate.w2 import SAMPLES_KEPT, noise_sweep, sweep_runs

    runs = sweep_runs([0.1, 0.3], ["entropic"], 4, check_level=0.3, seeds=(0, 5))
    assert [(r.seed, r.role) for r in runs] == [(0, "figure"), (0, "figure"), (0, "step_check"),
                                                (5, "figure"), (5, "figure"), (5, "step_check")]
    rng = np.random.default_rng(0)
    rows = noise_sweep(_half_circle(rng, 300), _half_circle(rng, 120), [0.2], losses=["entropic"], steps=3,
                       batch_size=40, sinkhorn_iters=10, n_eval=40, seeds=(0, 1), draws=4)
    assert [r["seed"] for r in rows] == [0, 1]
    assert rows[0]["w2"] != rows[1]["w2"]  # another run, another generator (and another noise instance)
    assert rows[0]["w2_privatized_data"] != rows[1]["w2_privatized_data"]
    for r in rows:
        assert r["w2_draws"] == 4 and np.isfinite(r["w2_draw_std"]) and r["w2_draw_std"] > 0
        assert np.asarray(r["samples"]).shape == (min(SAMPLES_KEPT, 40), 2)


def test_reference_rows_show_that_w2_rewards_blur_on_real_mnist() -> None:
    """The reference rows the report prints beside the generators: on real MNIST, blurred and shrunk images score a
    LOWER W2 to the clean test records than the clean training images themselves, the mean image a higher one.
    Margins: measured on 1,000 points 10.9 (blurred) and 11.3 (shrunk) against 12.4 (clean) and 14.5 (mean), each
    with a spread over draws near 0.05: the order holds by > 0.5, ten times the spread, so the test cannot pass by
    chance nor fail by noise (at 300 points the mean image is only 0.3 above the clean floor: 1,000 are needed)."""
    from dpsynth.data import load_processed
    from dpsynth.evaluate.w2_references import (BLURRED, CLEAN, GAUSSIAN, MEAN, SHRUNK, gaussian_fit, reference_rows,
                                                reference_sets)
    from dpsynth.methods.entropic_wgan import to_records

    data = load_processed(REPO / "data" / "processed" / "mnist.npz")
    rows = {r["loss"]: r for r in reference_rows(data.x_train[:3000], data.x_test[:3000], seed=0, n_eval=1000,
                                                 draws=2)}
    assert list(rows) == [CLEAN, BLURRED, SHRUNK, GAUSSIAN, MEAN]
    assert {r["role"] for r in rows.values()} == {"reference"}
    # the Gaussian carries the clean records' first two moments: before clipping, 5,000 samples' mean image within
    # 0.03 per pixel on average (a pixel's std is at most 1: the error's std is at most 0.014) and their total
    # variance within 5 % (the sum of 784 pixels' variances: its relative error is far below 2 %); its samples in
    # the set are clipped to [-1, 1]; drawing them leaves every other reference set as it was without them
    from dataclasses import replace

    train = to_records(data.x_train[:3000])
    shape = tuple(data.x_train.shape[1:])
    fit = gaussian_fit(train)
    raw = replace(fit, domain=None).sample(5000, np.random.default_rng(1))
    assert np.abs(raw.mean(axis=0) - train.mean(axis=0)).mean() < 0.03
    assert abs(raw.var(axis=0).sum() / train.var(axis=0).sum() - 1) < 0.05
    with_g = reference_sets(train, shape, np.random.default_rng([0, 0x5EF, 0]), 1000, fit)
    without = reference_sets(train, shape, np.random.default_rng([0, 0x5EF, 0]), 1000)
    assert all(np.array_equal(with_g[k], without[k]) for k in without)
    g = with_g[GAUSSIAN]
    assert g.shape == (1000, 784) and g.min() >= -1.0 and g.max() <= 1.0
    assert rows[BLURRED]["w2"] + 0.5 < rows[CLEAN]["w2"] and rows[SHRUNK]["w2"] + 0.5 < rows[CLEAN]["w2"]
    assert rows[MEAN]["w2"] > rows[CLEAN]["w2"] + 0.5
    assert all(0 < r["w2_draw_std"] < 0.3 for r in rows.values())


def test_the_sweeps_log_names_each_run_and_prints_none_of_its_w2(tmp_path: Path,
                                                                 capfd: pytest.CaptureFixture[str]) -> None:
    """The sweep trains on the clean records with seeded noise: its rows are outside the guarantee and never
    pushed (``paths.NOISE_FREE``), and job logs are not private, so the log says which run finished and where the
    rows went, never a W2 of them."""
    from dpsynth.config import parse_params
    from dpsynth.io import write_npz
    from dpsynth.paths import OUTSIDE_GUARANTEE
    from dpsynth.stages.w2noise import run_w2noise
    from tests.conftest import printed_values

    rng = np.random.default_rng(0)
    write_npz(tmp_path / "data" / "processed" / "manifold2d_half_circle.npz",
              x_train=_half_circle(rng, 400).astype(np.float32), y_train=np.zeros(400, np.int64),
              x_test=_half_circle(rng, 100).astype(np.float32), y_test=np.zeros(100, np.int64),
              num_classes=np.int64(1))
    p = clear_pipeline(yaml.safe_load((REPO / "params.yaml").read_text()))
    p.update(scale="smoke", datasets=["manifold2d_half_circle"])
    p["evaluation"]["real_datasets"] = []
    p["data"]["root"] = str(tmp_path / "data")
    p["w2_noise"] = {"manifold2d_half_circle": {"noise_levels": [0.2], "losses": ["exact", "entropic"], "steps": 3,
                                                "batch_size": 50, "sinkhorn_iters": 10, "n_eval": 50}}
    assert run_w2noise(parse_params(p, source="test"), "manifold2d_half_circle", results=str(tmp_path / "results"),
                       private_out=str(tmp_path / "private")) == 0
    log = "".join(capfd.readouterr())
    rows = pd.read_csv(tmp_path / "results" / "w2_noise" / "manifold2d_half_circle.csv")
    gen = rows[rows["role"] == "figure"]  # the reference row (real training points) and the baselines: a W2 only
    values = [float(v) for col in ("w2", "w2_privatized_data", "entropic_w2_privatized") for v in gen[col]]
    values += [float(v) for v in rows.loc[rows["role"].isin(["reference", "baseline"]), "w2"]]
    assert len(values) == 6 + 1 + 3 and printed_values(values, log) == []
    assert log.count("noise 0.2") == 2 and OUTSIDE_GUARANTEE in log


def _mean_and_count(records: np.ndarray, seed: int) -> dict[str, float]:
    """A stand-in second measure (module level: the worker processes unpickle it by name)."""
    return {"kid": float(records.mean()) + seed, "precision": float(len(records))}


def test_the_second_measure_reads_the_draw_w2_reads_in_any_process_and_keys_the_cache(tmp_path: Path) -> None:
    """Issue 64 item 3: the second measure (evaluate.closeness.CloseToClean in the stage) is taken on each generator's
    first sample draw -- the same n_eval records as the row's W2 -- in the pool's workers as in one process, and a
    sweep cached without it is trained again with it rather than served rows that lack it."""
    from dpsynth.evaluate.w2 import noise_sweep

    rng = np.random.default_rng(0)
    train, ref = _half_circle(rng, 300), _half_circle(rng, 120)
    kw = dict(losses=["entropic", "exact"], steps=3, batch_size=40, sinkhorn_iters=10, n_eval=40, seeds=(0, 3))
    cache = tmp_path / "runs"
    plain = noise_sweep(train, ref, [0.2], cache_dir=cache, **kw)
    assert all("kid" not in r for r in plain)
    seen: list[int] = []
    one = noise_sweep(train, ref, [0.2], extra=_mean_and_count, extra_name="stand-in", cache_dir=cache,
                      on_step=lambda: seen.append(1), **kw)
    assert len(seen) == 4 * 3  # the cached rows without the measure were not served
    pooled = noise_sweep(train, ref, [0.2], extra=_mean_and_count, extra_name="stand-in", workers=2, **kw)
    for a, b, p in zip(one, pooled, plain):
        assert a["kid"] == b["kid"] and a["precision"] == 40.0  # n_eval records, as W2 reads
        assert a["w2"] == p["w2"]  # the measure changes nothing else
        # the records it saw are the first draw's, the samples the row keeps are their first rows
        assert abs(a["kid"] - a["seed"] - np.mean(a["samples"])) < 1.0


def test_the_sweeps_second_measure_pickles_with_its_network(tmp_path: Path) -> None:
    """CloseToClean travels to the W2 sweep's spawned workers: it pickles, and the copy measures what the original
    does (digits28's test split stands in for MNIST's; the network is fitted on half of it)."""
    import pickle

    from dpsynth.data.dataset import images_to_signed
    from dpsynth.evaluate.closeness import ROW_FIELDS, CloseToClean, FeatureSpace

    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (80, 1, 8, 8), dtype=np.uint8)
    y = np.arange(80) % 4
    space = FeatureSpace.from_test_split(x, y, 4, cache_dir=tmp_path, max_epochs=1)
    measure = CloseToClean(space)
    records = images_to_signed(x[:30].reshape(30, -1))
    got, copy = measure(records, 2), pickle.loads(pickle.dumps(measure))(records, 2)
    assert set(got) == set(ROW_FIELDS) and got == copy


def test_w2noise_refuses_a_folder_as_its_out_before_training_anything(tmp_path: Path) -> None:
    """Issue 63 item 9: `w2noise --out DIR` ran the whole sweep, then failed with a traceback. The output is
    checked first: one line naming the option and a file to give instead; no data read, nothing written."""
    (tmp_path / "outdir").mkdir()
    res = run_cli("w2noise", "manifold2d_half_circle", "--params", str(REPO / "params.yaml"), "--out",
                  str(tmp_path / "outdir"), "--private-out", str(tmp_path / "private"), cwd=tmp_path, timeout=120)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [
        f"dpsynth: error: --out {tmp_path / 'outdir'}: is a folder; give the CSV file to write, e.g. "
        f"{tmp_path / 'outdir' / 'manifold2d_half_circle.csv'} (nothing was run)"]
    assert not any((tmp_path / "outdir").iterdir()) and not (tmp_path / "private").exists()
