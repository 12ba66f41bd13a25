"""The wavelet-denoising baseline of Reshetova, Chen, Ozgur (ISIT 2024, arXiv:2306.09547), Figs. 2 and 8:
PyWavelets denoising, its tuning on clean data, the WGAN-GP through the one loop, the 'approximately
private' label in the report and the ledger, the six-column figure, and the refusal of a bad parameter."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from dpsynth.config import load_params, parse_params
from dpsynth.errors import ConfigError
from dpsynth.methods.wavelet_wgan import WaveletParams, denoise, grid_cells, mse, tune
from tests.conftest import REPO, clear_pipeline, with_digits28

SHAPE = (1, 28, 28)


def _blocky(n: int, seed: int) -> np.ndarray:
    """Images in [-1, 1] that are constant on aligned 4x4 blocks (a few bright blocks on black): their Haar
    detail coefficients at levels 1 and 2 are exactly zero, so all the detail energy of a noisy copy is noise."""
    rng = np.random.default_rng(seed)
    coarse = np.where(rng.random((n, 7, 7)) < 0.3, 1.0, -1.0)
    return np.kron(coarse, np.ones((4, 4))).reshape(n, -1)


def test_denoising_reduces_the_error_to_the_clean_image() -> None:
    clean = _blocky(200, 0)
    rng = np.random.default_rng(1)
    for noise, std in ((rng.normal(0, 0.5, clean.shape), 0.5), (rng.laplace(0, 0.5 / np.sqrt(2), clean.shape), 0.5)):
        noisy = clean + noise
        before = mse(noisy, clean)  # ~ std^2 = 0.25
        after = mse(denoise(noisy, SHAPE, WaveletParams("haar", 2, "soft", 3.0), std), clean)
        # Tolerance: 15/16 of the pixels' noise energy sits in level-1/2 detail coefficients, where the signal
        # has none; a 3-sigma soft threshold removes all but a few per mille of it. Only the 1/16 in the
        # approximation stays, so MSE ~ 0.25/16 plus clipping gains: far below half of the noisy MSE. A no-op
        # or a thresholded approximation (which would erase the signal) fails the bound.
        assert after < 0.5 * before, (before, after)
        assert after < 0.05
    # Deterministic, shape-preserving, in range
    out = denoise(clean + 0.3, SHAPE, WaveletParams("db2", 1, "hard", 1.0), 0.3)
    assert out.shape == clean.shape and out.dtype == np.float32 and out.min() >= -1 and out.max() <= 1
    assert np.array_equal(out, denoise(clean + 0.3, SHAPE, WaveletParams("db2", 1, "hard", 1.0), 0.3))


def test_tuning_picks_the_grid_cell_closest_to_the_clean_images_deterministically() -> None:
    clean = _blocky(60, 2)
    noisy = clean + np.random.default_rng(3).normal(0, 0.5, clean.shape)
    cells = grid_cells(["haar", "db4"], [1, 2, 3], ["soft", "hard"], [0.0, 1.0, 3.0], 28)
    assert all(c.level <= (3 if c.wavelet == "haar" else 2) for c in cells)  # db4 allows level 2 on 28x28
    best, scores = tune(clean, noisy, SHAPE, cells, 0.5)
    assert [(s["wavelet"], s["level"], s["rule"], s["multiplier"]) for s in scores] == \
        [(c.wavelet, c.level, c.rule, c.multiplier) for c in cells]  # every cell, in grid order
    assert scores[cells.index(best)]["mse"] == min(s["mse"] for s in scores)
    assert best.multiplier > 0 and best.wavelet == "haar"  # thresholding helps; Haar fits the block images
    assert tune(clean, noisy, SHAPE, cells, 0.5) == (best, scores)  # no randomness
    # Ties go to the earliest cell: without thresholding every cell reconstructs the noisy image exactly.
    no_threshold = grid_cells(["db4", "haar"], [2, 1], ["hard"], [0.0], 28)
    assert tune(clean, noisy, SHAPE, no_threshold, 0.5)[0] == no_threshold[0]
    # The choice is a function of the CLEAN images (why the baseline is only approximately private): scored
    # against the noisy images themselves, the identity (no threshold) wins instead.
    assert tune(noisy, noisy, SHAPE, cells, 0.5)[0].multiplier == 0.0


def test_a_bad_wavelet_parameter_is_refused_in_one_line_naming_the_key() -> None:
    import pywt

    from dpsynth.config.hparams import DISCRETE_WAVELETS

    assert DISCRETE_WAVELETS == set(pywt.wavelist(kind="discrete"))  # the configuration's list is pywt's
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["experiments"]["wavelet_mnist_fig2_gauss"]["hparams"] = {"wavelets": ["haar", "db99x"]}
    with pytest.raises(ConfigError) as err:
        parse_params(raw)
    msg = str(err.value)
    assert "\n" not in msg and "experiments.wavelet_mnist_fig2_gauss.hparams.wavelets" in msg and "'db99x'" in msg
    raw["experiments"]["wavelet_mnist_fig2_gauss"]["hparams"] = {"levels": [0]}
    with pytest.raises(ConfigError, match=r"experiments\.wavelet_mnist_fig2_gauss\.hparams\.levels: levels must be >= 1"):
        parse_params(raw)


def _smoke_params(tmp: Path, processed: Path) -> Path:
    """params.yaml at the smoke scale with one wavelet run on the bundled 28x28 digits (data under tmp)."""
    root = with_digits28(processed, tmp / "data")
    p = yaml.safe_load((REPO / "params.yaml").read_text())
    p.update(scale="smoke", datasets=["digits28"])
    clear_pipeline(p)
    p["evaluation"]["real_datasets"] = []
    p["data"]["root"] = str(root)
    exp = copy.deepcopy(p["experiments"]["wavelet_mnist_fig2_gauss"])
    exp.update(dataset="digits28", hparams={"critic_dim": 8, "critic_steps": 1, "batch_size": 16, "tune_records": 100,
                                            "wavelets": ["haar", "db2"], "max_steps": 3})
    p["experiments"] = {"wv": exp}
    p["sweeps"], p["tables"] = {}, {}
    p["scales"]["smoke"]["train_steps"] = 3
    path = tmp / "params.yaml"
    path.write_text(yaml.safe_dump(p))
    return path


def test_the_method_trains_end_to_end_through_the_one_loop(tmp_path: Path, digits28_processed: Path,
                                                         release_ledger: Path) -> None:
    from dpsynth.methods.entropic_wgan import local_noise
    from dpsynth.methods.wavelet_wgan import noise_std
    from dpsynth.stages.privatize import privatize
    from dpsynth.stages.train import run_train

    params_file = _smoke_params(tmp_path, digits28_processed)
    params = load_params(params_file)
    privatize(params, "wv", str(params_file))
    run_train("wv", out=str(tmp_path / "models"), private_out=str(tmp_path / "private"), params_file=str(params_file),
              progress=False, device="cpu")
    out = tmp_path / "models" / "wv"
    assert {"generator.pt", "privacy.json", "train_log.csv", "train_summary.json", "denoised.npz"} <= \
        {p.name for p in out.iterdir()}
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["finished"] and summary["steps"] == 3 and summary["method"] == "wavelet_wgan"
    report = json.loads((out / "privacy.json").read_text())
    assert "approximately private" in report["extra"]["approximately_private"]
    assert report["noise"]["private"] is False and "approximately private" in report["noise"]["label"]
    import csv

    from dpsynth.privacy.randomness import APPROXIMATE_LABEL

    with open(out / "train_log.csv", newline="", encoding="utf-8") as fh:
        log = list(csv.DictReader(fh))
    assert log and all(r["epsilon_label"] == APPROXIMATE_LABEL and float(r["epsilon"]) > 0 for r in log), log
    chosen = report["extra"]["wavelet"]
    assert chosen["wavelet"] in ("haar", "db2")
    # the released denoised set is the privatized records through the chosen denoiser
    with np.load(tmp_path / "data" / "privatized" / "wv.npz") as z:
        priv = z["x_train"]
    params_chosen = WaveletParams(chosen["wavelet"], chosen["level"], chosen["rule"], chosen["multiplier"])
    std = noise_std(local_noise(params.experiments["wv"].local))
    with np.load(out / "denoised.npz") as z:
        assert np.array_equal(z["x_train"], denoise(priv, SHAPE, params_chosen, std))
    # the grid's errors to the CLEAN records stay private: beside the checkpoint, never in the release
    tuning = list((tmp_path / "private").rglob("wavelet_tuning.csv"))
    assert len(tuning) == 1 and "mse" in tuning[0].read_text().splitlines()[0]
    assert not any("mse" in p.read_text(errors="ignore") for p in out.glob("*.csv"))
    # the release ledger: the privatization at its local epsilon, the model as no guarantee (infinite)
    from dpsynth.privacy.ledger_store import ReleaseLedger

    got, _ = ReleaseLedger(release_ledger).read()
    assert [(r.stage, r.status) for r in got] == [("privatize", "confirmed"), ("train", "confirmed")], got
    assert got[1].epsilon == float("inf") and got[1].note == "only approximately private", got[1]


def test_the_wavelet_baseline_is_refused_by_any_finite_budget_before_it_reads_a_record(
        tmp_path: Path, digits28_processed: Path, release_ledger: Path, private_reads: list[str],
        capsys: pytest.CaptureFixture[str]) -> None:
    """An approximately private release counts as infinite epsilon (the ledger composes it so): a budget of
    1,000 refuses it in one line, before the run reads its privatized or its clean records."""
    from dpsynth.cli import main
    from dpsynth.privacy.ledger_store import ReleaseLedger
    from dpsynth.stages.privatize import privatize

    params_file = _smoke_params(tmp_path, digits28_processed)
    raw = yaml.safe_load(params_file.read_text())
    raw["total_budgets"] = {"digits28": {"epsilon": 1000.0}}
    params_file.write_text(yaml.safe_dump(raw))
    privatize(load_params(params_file), "wv", str(params_file))  # the local release fits the budget
    private_reads.clear()
    capsys.readouterr()  # privatize's own line (the release ledger it reserved in)
    rc = main(["train", "wv", "--params", str(params_file), "--out", str(tmp_path / "models"), "--private-out",
               str(tmp_path / "private"), "--device", "cpu", "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "Traceback" not in err[0], err
    assert err[0].startswith("dpsynth: error: total_budgets.digits28: train wv refused before any noise is drawn: "
                             "1 release(s) of digits28 spent ε 98.08") and "would add ε inf" in err[0], err
    assert private_reads == [] and not (tmp_path / "models").exists()
    assert [r.stage for r in ReleaseLedger(release_ledger).read()[0]] == ["privatize"]


def test_the_approximately_private_label_reaches_the_tables_and_the_ledger(tmp_path: Path) -> None:
    from dpsynth.report.ledger import build_ledger
    from dpsynth.report.runs import Run
    from dpsynth.report.tables import build_table

    params = load_params(REPO / "params.yaml")
    built = build_table("reshetova_fig2", params, tmp_path)  # no runs: every cell 'not run'
    wavelet_rows = built.frame[built.frame["Run"].str.startswith("wavelet_")]
    assert len(wavelet_rows) == 2 and wavelet_rows["Privacy"].str.contains("approximately private").all()
    assert (built.frame[~built.frame["Run"].str.startswith("wavelet_")]["Privacy"]
            .str.contains("approximately").sum() == 0)
    assert any("ONLY APPROXIMATELY PRIVATE" in n for n in built.notes)
    assert [p["runs"] for p in built.wavelet_panels] == [
        {"exact": "ewgan_mnist_fig2_gauss_exact", "wavelet": "wavelet_mnist_fig2_gauss", "entropic": "ewgan_mnist_fig2_gauss"},
        {"exact": "ewgan_mnist_fig2_laplace_exact", "wavelet": "wavelet_mnist_fig2_laplace",
         "entropic": "ewgan_mnist_fig2_laplace"}]
    # the ledger: a wavelet run is listed as approximately private and makes the composition not private
    local = {"mechanism": "local_gaussian", "sigma": 5.28, "delta": 1e-4, "headline": "sound",
             "epsilon": {"sound": 98.08, "paper_convention": 35.0}, "noise": {"mode": "secret"},
             "extra": {"local": {"radius": 28, "noise_scale": 5.28, "mechanism": "gaussian"}}}
    runs = [Run("ewgan", tmp_path / "a", {"dataset": "mnist", "privacy": local}),
            Run("wav", tmp_path / "b", {"dataset": "mnist", "privacy": {**local, "extra": {
                **local["extra"], "approximately_private": "only approximately private"}}})]
    frame, notes = build_ledger(tmp_path, runs)
    by = dict(zip(frame["Released model"], frame["Noise"]))
    assert "approximately private" in by["wav"] and "approximately" not in by["ewgan"]
    total = frame[frame["Released model"].str.startswith("ALL")].iloc[0]
    assert total["ε (headline)"] == "∞" and "wav" in total["Mechanism"] and "ewgan" not in total["Mechanism"]
    frame, _ = build_ledger(tmp_path, runs[:1])  # without it: a finite composition
    assert frame[frame["Released model"].str.startswith("ALL")].iloc[0]["ε (headline)"] != "∞"


def test_the_six_column_figure_renders_from_fabricated_files(tmp_path: Path) -> None:
    from dpsynth.evaluate.sampling import write_synthetic
    from dpsynth.io import write_npz
    from dpsynth.report.tables import build_table
    from dpsynth.report.wavelet_figure import cell_images, wavelet_figures

    params = load_params(REPO / "params.yaml")
    built = build_table("reshetova_fig2", params, tmp_path / "results")
    root, models = tmp_path / "data", tmp_path / "models"
    rng = np.random.default_rng(0)
    img = lambda n: rng.integers(0, 256, (n, 1, 28, 28), dtype=np.uint8)  # noqa: E731
    write_npz(root / "processed" / "mnist.npz", x_test=img(20))
    write_npz(root / "privatized" / "wavelet_mnist_fig2_gauss.npz", x_train=rng.normal(0, 5, (20, 784)).astype(np.float32))
    write_npz(models / "wavelet_mnist_fig2_gauss" / "denoised.npz", x_train=rng.uniform(-1, 1, (20, 784)).astype(np.float32))
    for run in ("ewgan_mnist_fig2_gauss", "wavelet_mnist_fig2_gauss"):  # the exact run and the Laplace row: not run
        write_synthetic(root / "synthetic" / run / "seed0.npz", img(20), np.zeros(20, np.int64), 1, {"mechanism": "x"}, {})
    cells = cell_images(built.wavelet_panels[0], root, models, "mnist", 9)
    assert cells["exact"] is None and all(cells[c].shape == (9, 28, 28) for c in cells if c != "exact")
    assert 0 <= cells["privatized"].min() and cells["privatized"].max() <= 1  # clipped for display
    assert all(v is None for k, v in cell_images(built.wavelet_panels[1], root, models, "mnist", 9).items() if k != "clean")
    (png,) = wavelet_figures(params, {"reshetova_fig2": built}, tmp_path / "fig", data_root=root, models=models)
    assert png.name == "reshetova_fig2.png" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


@pytest.mark.parametrize("mechanism,delta", [("laplace", None), ("gaussian", 1e-4)])
def test_the_denoisers_noise_level_is_the_mechanisms_own(mechanism: str, delta: float | None) -> None:
    """The threshold's noise std comes from the mechanism (``LocalNoise.coordinate_std``), not from a
    name comparison: it matches the empirical std of the noise the privatize stage adds to 200,000
    coordinates far inside the ball (the projection moves nothing), within 2 % (the std of a sample std
    of 200,000 Laplace draws is ~0.25 %)."""
    import numpy as np

    from dpsynth.config.experiment import LocalMechanism
    from dpsynth.methods.entropic_wgan import local_noise
    from dpsynth.methods.wavelet_wgan import noise_std
    from dpsynth.privacy import mechanisms

    local = LocalMechanism(mechanism=mechanism, epsilon=5.0, delta=delta, radius=1000.0)
    noisy, _ = mechanisms.local(mechanism).privatize(np.zeros((200_000, 1)), radius=1000.0, epsilon=5.0, delta=delta,
                                                     rng=np.random.default_rng(0))
    assert noise_std(local_noise(local)) == pytest.approx(float(np.std(noisy)), rel=0.02)


def test_an_approximately_private_report_is_labelled_wherever_its_epsilon_is_shown(tmp_path: Path) -> None:
    """The label is read from the run's report (extra.approximately_private), never from its method: the report's
    epsilon cell, the privacy table's epsilon cells and the samples.png caption carry it; the same report without
    it carries none."""
    from dpsynth.evaluate.sampling import privacy_caption
    from dpsynth.privacy.randomness import APPROXIMATE_LABEL, privacy_label
    from dpsynth.report.runs import Run, epsilon_cell

    local = {"mechanism": "local_gaussian", "sigma": 5.28, "delta": 1e-4, "headline": "sound",
             "epsilon": {"sound": 98.08, "paper_convention": 35.0}, "noise": {"mode": "secret", "private": True},
             "extra": {"local": {"radius": 28, "noise_scale": 5.28, "mechanism": "gaussian"}}}
    approx = {**local, "extra": {**local["extra"], "approximately_private": "only approximately private (...)"}}
    assert privacy_label(approx) == APPROXIMATE_LABEL and privacy_label(local) is None
    assert epsilon_cell(Run("w", tmp_path, {"privacy": approx})).endswith(f"[{APPROXIMATE_LABEL}]")
    assert "approximately" not in epsilon_cell(Run("e", tmp_path, {"privacy": local}))
    assert privacy_caption(approx).endswith(f": {APPROXIMATE_LABEL}") and "approx" not in privacy_caption(local)
    # the released train_log.csv: an epsilon_label column beside epsilon, on every row; none for a private run
    from dpsynth.methods.loop import labelled_log
    from dpsynth.methods.trainlog import PUBLIC_LOG_FIELDS
    from dpsynth.privacy.randomness import NOT_PRIVATE_LABEL

    rows = [{"step": 1, "epsilon": 98.08, "steps_per_s": 3.0}, {"step": 2, "epsilon": 98.08, "steps_per_s": 3.1}]
    got, fields = labelled_log(rows, PUBLIC_LOG_FIELDS, approx)
    assert fields == ("step", "epsilon", "epsilon_label", "steps_per_s")
    assert [r["epsilon_label"] for r in got] == [APPROXIMATE_LABEL] * 2
    assert labelled_log(rows, PUBLIC_LOG_FIELDS, local) == (rows, PUBLIC_LOG_FIELDS)
    replay = {**local, "noise": {"mode": "reproducible", "seed": 0}}
    assert labelled_log(rows, PUBLIC_LOG_FIELDS, replay)[0][0]["epsilon_label"] == NOT_PRIVATE_LABEL
