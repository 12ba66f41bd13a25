"""Reshetova, Chen, Ozgur, "Training generative models from privatized data via entropic optimal transport"
(ISIT 2024, arXiv:2306.09547), appendix 5.5, Fig. 11: the training-set size n as a sweep key (each cell trains
on, and privatizes, the first n of its run's records), the W2 to the held-out split (the W2 to the run's own
clean training records kept under the private root, never released), the slope of log W2 against log n with the paper's claim checked, the figure,
and the `reshetova` target planning the 2-D sweep's cells."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from dpsynth.config import load_params, parse_params, resolve_run
from dpsynth.errors import ConfigError
from tests.conftest import REPO

SWEEP, TABLE = "n_half_circle", "reshetova_fig11"


def _raw() -> dict[str, Any]:
    return yaml.safe_load((REPO / "params.yaml").read_text(encoding="utf-8"))


def _with_sweep(raw: dict[str, Any], values: Any, kind: str = "grid") -> dict[str, Any]:
    sweep = {"base": "ewgan_half_circle_gauss",
             **({"grid": {"n": values}} if kind == "grid" else {"cells": [{"n": v} for v in values]})}
    raw["sweeps"]["n_test"] = sweep
    return raw


# --------------------------------------------------------------------------- the sweep key


@pytest.mark.parametrize("values, kind", [([1000, 2.5], "grid"), ([0], "grid"), ([True], "cells"),
                                          (["1e3"], "grid"), ([-5], "cells"), ([6.0e4], "grid")])
def test_a_bad_n_is_refused_in_one_line_naming_the_key(values: list[Any], kind: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_params(_with_sweep(_raw(), values, kind), source="fixture")
    msg = str(exc.value)
    assert "\n" not in msg and "sweeps.n_test.n:" in msg and "training-set sizes must be whole numbers" in msg, msg


def test_n_cells_are_named_by_n_and_set_train_size_only() -> None:
    params = load_params(REPO / "params.yaml")
    cells = params.cells_of(SWEEP)
    assert cells == [f"{SWEEP}-n{n}" for n in (1000, 4000, 15000, 60000)]
    exps, base = params.all_experiments(), params.experiments["ewgan_half_circle_gauss"]
    for name, n in zip(cells, (1000, 4000, 15000, 60000)):
        assert exps[name].train_size == n and base.train_size is None
        # nothing else differs from the base: the rate in n is the only thing the sweep measures
        assert exps[name].model_dump(exclude={"train_size"}) == base.model_dump(exclude={"train_size"})
    # kept out of the quick pipeline's 30 minutes; the MNIST sweep is for the paper scale
    assert SWEEP not in params.pipeline.sweeps and "n_mnist_fig11" not in params.pipeline.sweeps


def test_the_mnist_cells_are_the_papers_setting_sigma_squared_4() -> None:
    from dpsynth.privacy.local import gaussian_sigma_eq5

    params = load_params(REPO / "params.yaml", scale="paper")
    exp = params.experiments["ewgan_mnist_gauss_fig11"]
    local, hp = exp.local, exp.hparams
    assert local.mechanism == "gaussian" and local.radius == math.sqrt(784)  # no image is moved by the projection
    assert gaussian_sigma_eq5(local.epsilon, local.delta, 2 * local.radius) == pytest.approx(2.0, abs=1e-6)
    assert (hp.generator, hp.batch_size, hp.sinkhorn_iters, hp.loss) == ("mlp", 200, 200, "entropic")  # section 4.5
    assert all(resolve_run(params, c).experiment.train_size <= 60000 for c in params.cells_of("n_mnist_fig11"))


# --------------------------------------------------------------------------- the training set of a cell


@pytest.fixture
def half_circle(tmp_path: Path) -> tuple[Any, np.ndarray, np.ndarray]:
    """A small processed half circle (5,000 train, 1,000 held-out points) and the params at smoke
    (train_subset 2,000), with a sweep over n and reproducible noise."""
    from dpsynth.data.prepare import manifold_points
    from dpsynth.io import write_npz

    rng = np.random.default_rng(3)
    x, x_test = manifold_points("half_circle", 5000, rng), manifold_points("half_circle", 1000, rng)
    root = tmp_path / "data"
    write_npz(root / "processed" / "manifold2d_half_circle.npz", x_train=x.astype(np.float32),
              y_train=np.zeros(5000, np.int64), x_test=x_test.astype(np.float32), y_test=np.zeros(1000, np.int64),
              num_classes=np.int64(1))
    raw = _with_sweep(_raw(), [500, 1000, 2000])
    raw.update(scale="smoke", privacy_noise="reproducible")
    raw["data"]["root"] = str(root)
    return parse_params(raw, source="fixture"), x.astype(np.float32), x_test.astype(np.float32)


def test_each_cell_trains_and_privatizes_its_first_n_records_apart_from_the_held_out_ones(
        half_circle: Any, tmp_path: Path) -> None:
    from dpsynth.data.dataset import subset_indices
    from dpsynth.privacy.local import project_l2_ball
    from dpsynth.stages.privatize import privatize

    params, x, x_test = half_circle
    scale_subset = subset_indices(5000, params.preset.train_subset, params.seeds[0])
    assert scale_subset is not None and len(scale_subset) == 2000
    test_rows = {tuple(r) for r in x_test}
    previous: np.ndarray | None = None
    for n in (500, 1000, 2000):
        name = f"n_test-n{n}"
        idx = resolve_run(params, name).train_indices(5000)
        assert len(idx) == n and np.array_equal(idx, scale_subset[:n])  # the first n the scale keeps
        if previous is not None:
            assert np.array_equal(idx[:len(previous)], previous)  # a smaller cell's set is a prefix
        previous = idx
        assert not test_rows & {tuple(r) for r in x[idx]}  # held-out records: none trained on
        rep = privatize(params, name)
        assert rep["num_records"] == n and "the run's" in rep["records_kept"]
        priv = np.load(Path(params.data.root) / "privatized" / f"{name}.npz")["x_train"]
        assert priv.shape == (n, 2)
        # privatized from exactly those records: what is left is the mechanism's noise, of its reported std
        noise = priv.astype(np.float64) - project_l2_ball(x[idx].astype(np.float64), 1.0)
        assert noise.std() == pytest.approx(rep["noise_scale"], rel=0.15)
        shuffled = priv.astype(np.float64) - project_l2_ball(x[np.roll(idx, 1)].astype(np.float64), 1.0)
        assert shuffled.std() > noise.std() * 1.03  # other records would leave more than the noise
    # the train stage reads the privatized file back whole: train_indices of its own output keeps all of it
    assert np.array_equal(resolve_run(params, "n_test-n1000").train_indices(1000), np.arange(1000))
    # more records than the scale keeps: refused, naming the key
    raw = _with_sweep(_raw(), [500, 3000])
    raw["scale"] = "smoke"
    with pytest.raises(ConfigError, match=r"train_size \(sweep key n\) 3000 exceeds the 2000 training records"):
        resolve_run(parse_params(raw, source="fixture"), "n_test-n3000").train_indices(5000)


def test_the_train_stage_trains_on_the_privatized_first_n(half_circle: Any, tmp_path: Path) -> None:
    from dpsynth.stages.privatize import privatize
    from dpsynth.stages.train import build_context

    params, _, _ = half_circle
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump(params.model_dump(mode="json")))
    privatize(params, "n_test-n500")
    ctx = build_context("n_test-n500", out=str(tmp_path / "models"), private_out=str(tmp_path / "private"),
                        params_file=str(params_file), device="cpu", progress=False)
    priv = np.load(Path(params.data.root) / "privatized" / "n_test-n500.npz")["x_train"]
    assert ctx.data.x_train.shape == (500, 2) and np.array_equal(ctx.data.x_train, priv)
    assert len(ctx.data.x_test) == 0  # the trainer never sees the held-out split


# --------------------------------------------------------------------------- the W2-to-train record


def test_evaluate_keeps_the_w2_to_the_runs_own_clean_training_records_under_the_private_root(
        half_circle: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """The W2 to a cell's own clean training records is a statistic of the private records without noise: it is
    written under the private root (labelled), never into the released metrics.json nor the job's log (job logs
    are not private: the log names the file), and a metrics.json that carries it is refused."""
    from tests.conftest import printed_values, train_split_statistics

    from dpsynth.evaluate.record import MetricsError, MetricsRecord
    from dpsynth.evaluate.w2 import w2_distance
    from dpsynth.paths import OUTSIDE_GUARANTEE, privatized_file, release_rule, w2_train_file
    from dpsynth.stages.evaluate import run_evaluate
    from dpsynth.stages.privatize import privatize
    from tests.test_reshetova_figures import _fabricate

    params, x, x_test = half_circle
    name = "n_test-n1000"
    rng = np.random.default_rng(5)
    _fabricate(params, tmp_path / "results", Path(params.data.root), name, 0.5, rng)
    # the run's privatized records, which its evaluate stage fits the trivial baselines to (the fabricated
    # stand-in has no privacy report)
    privatized_file(params.data.root, name).unlink()
    privatize(params, name)
    assert run_evaluate(params, name, synthetic=str(Path(params.data.root) / "synthetic"),
                        models=str(tmp_path / "models"), results=str(tmp_path / "results"),
                        private_out=str(tmp_path / "private"), device="cpu") == 0
    log = "".join(capfd.readouterr())
    rec = json.loads((tmp_path / "results" / "runs" / name / "metrics.json").read_text())
    w2 = rec["w2"]
    assert "train" not in w2 and "train" not in json.dumps(w2)  # nothing of it in the released file
    assert train_split_statistics(rec) == []
    private = json.loads(w2_train_file(tmp_path / "private", name).read_text())
    train = private["w2_train"]
    assert printed_values([train["mean"]], log) == [] and str(w2_train_file(tmp_path / "private", name)) in log
    assert printed_values([w2["mean"]], log)  # the released W2 (to the test records) is printed: the check sees it
    assert private["privacy"] == OUTSIDE_GUARANTEE and private["experiment"] == name
    assert train["n_records"] == 1000 and train["n_points"] == 1000 and "clean" in train["reference_split"]
    gen = np.load(Path(params.data.root) / "synthetic" / name / "seed0.npz")["x"].astype(np.float64)
    idx = resolve_run(params, name).train_indices(5000)
    assert train["mean"] == pytest.approx(w2_distance(gen, x[idx].astype(np.float64), n=1000, seed=0))
    # the released W2 is always to the held-out test records
    assert w2["mean"] == pytest.approx(w2_distance(gen, x_test.astype(np.float64), n=1000, seed=0))
    assert train["mean"] != pytest.approx(w2["mean"], abs=1e-9)  # two references, two numbers
    assert not release_rule(str(w2_train_file("private", name))).push  # and DVC never sends it
    # a run that sweeps no n measures nothing on its training records
    _fabricate(params, tmp_path / "results", Path(params.data.root), "ewgan_half_circle_gauss", 0.5, rng)
    privatized_file(params.data.root, "ewgan_half_circle_gauss").unlink()
    privatize(params, "ewgan_half_circle_gauss")
    assert run_evaluate(params, "ewgan_half_circle_gauss", synthetic=str(Path(params.data.root) / "synthetic"),
                        models=str(tmp_path / "models"), results=str(tmp_path / "results"),
                        private_out=str(tmp_path / "private"), device="cpu") == 0
    assert not w2_train_file(tmp_path / "private", "ewgan_half_circle_gauss").exists()
    # a released metrics.json that carries it (an older evaluate, a hand edit) is refused, naming the key
    bad = {**rec, "w2": {**w2, "train": train}}
    with pytest.raises(MetricsError, match=r"w2\.train") as exc:
        MetricsRecord.from_dict(bad)
    assert "private" in str(exc.value)


# --------------------------------------------------------------------------- slope, claim, figure


def test_the_slope_fit_recovers_the_exponent() -> None:
    from dpsynth.report.tables.train_size import fit_slope

    ns = [1000, 4000, 15000, 60000]
    assert fit_slope(ns, [3.7 * n ** -0.5 for n in ns]) == pytest.approx(-0.5, abs=1e-9)
    assert fit_slope(ns, [0.2 * n ** -0.13 for n in ns]) == pytest.approx(-0.13, abs=1e-9)
    assert fit_slope(ns, [0.4] * 4) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="two different n"):
        fit_slope([1000, 1000], [0.1, 0.2])


def _fabricate_cells(params: Any, results: Path, data: Path, w2: Any) -> None:
    """Metrics of every cell of the 2-D sweep: ``w2(n) -> held-out``."""
    from tests.test_reshetova_figures import _fabricate

    rng = np.random.default_rng(0)
    exps = params.all_experiments()
    for name in params.cells_of(SWEEP):
        _fabricate(params, results, data, name, w2(exps[name].train_size), rng)


def test_figure_and_claim_render_from_fabricated_runs(tmp_path: Path) -> None:
    from dpsynth.report.tables import build_table
    from dpsynth.report.train_size import train_size_figure

    raw = _raw()
    raw["data"]["root"] = str(tmp_path / "data")
    params = parse_params(raw, source="fixture")
    results = tmp_path / "results"
    _fabricate_cells(params, results, tmp_path / "data", lambda n: 2.0 * n ** -0.5)
    built = build_table(TABLE, params, results)
    f = built.frame
    assert list(f["n"]) == ["1,000", "4,000", "15,000", "60,000"] and built.ours == 4
    assert list(f["W2 to clean held-out ours"])[0] == f"{2.0 * 1000 ** -0.5:.3f} (1 run)"
    # the released table shows the held-out curve only and names where each cell's train point lies
    assert "W2 to clean train ours" not in f.columns and set(built.curves["slopes"]) == {"test"}
    assert list(f["W2 to clean train (private)"])[0] == f"private/runs/{SWEEP}-n1000/w2_train.json (not released)"
    assert set(f["W2 paper"]) == {"not reported (plot only)"}
    assert built.curves["slopes"]["test"] == pytest.approx(-0.5, abs=1e-9)
    # the figures' sample grid per n: one run of each n (its own samples.png), labelled with the runs it stands for
    assert [(label.split(" (")[0], run) for label, run in built.runs] == [
        (f"n = {n:,}", f"{SWEEP}-n{n}") for n in (1000, 4000, 15000, 60000)]
    assert all("1 of 1 runs" in label for label, _ in built.runs)
    claim = next(n for n in built.notes if n.startswith("Claim (Reshetova et al., Figure 11)"))
    # exactly 2 / sqrt(n): the excess falls (c = 2) and the free exponent is 1/2, both with zero residual
    assert "Ours: holds -- c of W2 = a + c n^-1/2 (the excess falls) = +2.000" in claim, claim
    assert "free exponent b - 1/2 = +0.000" in claim and "Held-out curve only: the train curve is private" in claim
    assert any("outside the privacy guarantee" in n and "private/runs/<cell>/w2_train.json" in n for n in built.notes)
    assert any(n.startswith("Ours: Our adaptation") for n in built.notes)
    drawn = train_size_figure(built, params, tmp_path / "fig")
    assert drawn.name == f"{TABLE}.png" and drawn.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # W2 rising with n: the claim does not hold; the figure is another picture
    _fabricate_cells(params, results, tmp_path / "data", lambda n: 0.5 - 2.0 * n ** -0.5)
    flat = build_table(TABLE, params, results)
    claim = next(n for n in flat.notes if n.startswith("Claim (Reshetova et al., Figure 11)"))
    assert "Ours: does not hold -- c of W2 = a + c n^-1/2 (the excess falls) = -" in claim, claim
    assert train_size_figure(flat, params, tmp_path / "flat").read_bytes() != drawn.read_bytes()
    # falling at n^-0.1 over a floor: the excess falls, the exponent is not 1/2 (decided against the margin)
    _fabricate_cells(params, results, tmp_path / "data", lambda n: 0.05 + 1.1 * n ** -0.1)
    slow = next(n for n in build_table(TABLE, params, results).notes if n.startswith("Claim (Reshetova"))
    assert "Ours: does not hold" in slow and "(the excess falls) = " in slow and "free exponent b = 0.100" in slow

    # the MNIST figure without runs: every row "not run", the claim not checked, no figure (the reason instead)
    mnist = build_table("reshetova_fig11_mnist", params, results)
    assert set(mnist.frame["W2 to clean held-out ours"]) == {"not run"} and mnist.ours == 0
    assert any("Ours: not checked" in n for n in mnist.notes)
    none = train_size_figure(mnist, params, tmp_path / "none")
    assert "fewer than two training-set sizes evaluated" in none.reason and not none.path.exists()


@pytest.mark.parametrize("edit, message", [
    (lambda r: r["tables"][TABLE].update(sweeps=["pm_mnist_quick"]), "sweeps ['m', 'p']"),
    (lambda r: r["tables"][TABLE].update(dataset="manifold2d_ellipse"), "not an entropic_wgan run on locally "
                                                                         "privatized manifold2d_ellipse"),
    (lambda r: r["sweeps"][SWEEP]["grid"].update(n=[1000]), "at least two sizes"),
])
def test_a_train_size_figure_with_a_wrong_sweep_is_refused_by_key(edit: Any, message: str) -> None:
    raw = _raw()
    edit(raw)
    with pytest.raises(ConfigError, match=rf"tables\.{TABLE}") as exc:
        parse_params(raw, source="fixture")
    assert message in str(exc.value)


# (that `snakemake reshetova` plans exactly the 2-D sweep's cells, and no MNIST one: test_reshetova_figures's
# test_the_reshetova_target_plans_every_panels_runs)


def test_fig11_pairs_only_runs_of_one_n_and_prints_both_floors() -> None:
    """Issue 69 items 1 and 5: a Fig. 11 run's seed fixes its initial weights, subset and batch order at its n
    (the privatization noise is secret), so a cell and the same cell at twice the steps compare paired, while
    cells of two n compare as independent (Welch). The notes print the free-exponent fit's floor beside the
    1/sqrt(n) intercept, and the runs at the largest n against what real images score on the same estimator."""
    import pandas as pd

    from dpsynth.report.claims import Estimate, compare
    from dpsynth.report.tables.train_size import fit_rate, floors_note, shares_at

    at = Estimate.of_seeded_runs([(0, 12.24), (1, 12.34), (2, 12.41)], shares_at(60000))
    twice = Estimate.of_seeded_runs([(0, 11.91), (1, 11.94), (2, 11.99)], shares_at(60000))
    small = Estimate.of_seeded_runs([(0, 13.31), (1, 13.29), (2, 13.40)], shares_at(1000))
    assert "paired by seed" in compare(twice, at, "less").rule
    assert "Welch" in compare(at, small, "less").rule and "fix different things" in compare(at, small, "less").rule

    ns = [1000, 2000, 5000, 10000, 20000, 60000]
    rows = pd.DataFrame({"n": [float(n) for n in ns for _ in range(3)],
                         "test": [12.3 + 1000.0 / n + d for n in ns for d in (-0.01, 0.0, 0.01)]})
    fit = fit_rate(rows["n"], rows["test"])
    assert fit["floor_free"].value == pytest.approx(12.3, abs=0.01)  # the floor of W2 = a + c n^-1, exponent free
    real = Estimate.of_draw_std(12.31, 0.02, 8)
    note = floors_note(fit, rows, real, "the sweep's reference row",
                       {"n": 60000.0, "value": 12.0, "se": 0.01, "runs": 3, "steps": 10000})
    assert f"the 1/sqrt(n) fit's intercept is {fit['floor'].value:.3f}" in note
    assert "puts the floor at 12.30" in note and "Real clean training images score 12.310" in note
    assert "the runs at n = 60,000 minus real images = +0.007" in note and "at 10,000 steps -0.310" in note
    assert "not measured" in floors_note(fit, rows, None, "", None)
