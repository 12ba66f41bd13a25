"""The figures a researcher reads: labelled sample grids, the 2-D scatter over the true curve,
training curves per run, and the one-quantity-per-file CSVs DVC plots draw."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest

from dpsynth.config import parse_params
from dpsynth.data.registry import get_spec
from dpsynth.evaluate.sampling import privacy_caption, sample_grid
from tests.test_report import DPS_PRIVACY, _dps_privacy, fixture_raw, two_epsilons, write_metrics

matplotlib.use("Agg")


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list:
    """Every figure saved, kept open for inspection (savefig still writes the file)."""
    from matplotlib.figure import Figure

    figures: list = []
    real = Figure.savefig

    def spy(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        figures.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", spy)
    return figures


def test_sample_grid_rows_are_labelled_with_class_names(tmp_path: Path, drawn: list) -> None:
    x = np.random.default_rng(0).integers(0, 255, (40, 1, 28, 28), dtype=np.uint8)
    y = np.repeat(np.arange(10), 4)
    names = get_spec("fashion_mnist").class_names
    sample_grid(x, y, 10, tmp_path / "g.png", per_class=4, class_names=names, title="t: eps")
    ax = drawn[-1].axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == list(names)
    assert names[0] == "T-shirt/top" and names[9] == "Ankle boot"
    assert ax.get_title() == "t: eps" and (tmp_path / "g.png").stat().st_size > 1000
    sample_grid(x, y, 10, tmp_path / "n.png", per_class=4)  # no names: the label numbers
    assert [t.get_text() for t in drawn[-1].axes[0].get_yticklabels()] == [str(k) for k in range(10)]


def test_point_clouds_are_drawn_over_the_true_curve(tmp_path: Path, drawn: list) -> None:
    from dpsynth.data.prepare import manifold_points

    curve = manifold_points("half_circle", 500, np.random.default_rng(0))
    pts = np.random.default_rng(1).normal(size=(300, 2)).astype(np.float32)
    sample_grid(pts, np.zeros(300), 1, tmp_path / "s.png", manifold=curve)
    ax = drawn[-1].axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["true manifold", "generated (300)"]
    assert np.allclose(ax.lines[0].get_xydata(), curve)  # the curve itself, not the samples


def test_privacy_caption_names_the_headline() -> None:
    assert privacy_caption(DPS_PRIVACY).startswith("epsilon 10.00, delta 1e-05 (")
    assert privacy_caption({"mechanism": "none"}) == "none"
    replayable = {**DPS_PRIVACY, "noise": {"mode": "reproducible", "private": False}}
    assert privacy_caption(replayable).endswith(": reproducible noise - not private")


def _log(path: Path, columns: dict[str, list[float]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(columns).to_csv(path, index=False)


def test_training_curves_show_epsilon_for_dp_runs_and_loss_only_where_released(tmp_path: Path, drawn: list) -> None:
    from dpsynth.report.figures import training_curves

    raw = fixture_raw()
    raw["pipeline"] = {"experiments": ["dps_mnist", "sinkhorn_mnist_nonprivate"], "sweeps": []}
    params = parse_params(raw, source="fixture")
    targets = list(params.pipeline_targets())
    assert "dps_mnist" in targets
    models = tmp_path / "models"
    _log(models / "dps_mnist/train_log.csv", {"step": [25, 50], "epsilon": [6.0, 6.3], "steps_per_s": [3.9, 3.8]})
    _log(models / "sinkhorn_mnist_nonprivate/train_log.csv",
         {"step": [25, 50], "epsilon": [np.inf, np.inf], "loss": [0.9, 0.5], "steps_per_s": [9.0, 9.1]})
    out = training_curves(params, models, tmp_path / "figs")
    assert [p.name for p in out] == [f"training_{t}.png" for t in targets] and len(drawn) == 2
    dp, nonpriv = drawn
    assert [ax.get_ylabel() for ax in dp.axes] == ["ε spent (headline accountant)", "steps/s"]
    target_line = [ln for ln in dp.axes[0].lines if ln.get_label() == "target ε"]
    assert target_line and target_line[0].get_ydata()[0] == 10.0
    assert [ax.get_ylabel() for ax in nonpriv.axes] == ["loss", "steps/s"]  # no finite epsilon: no panel
    # a run not trained yet: no picture saying so, but the record of a figure not drawn, with the reason
    from dpsynth.report.plotting import NotDrawn

    (models / "dps_mnist/train_log.csv").unlink()
    (tmp_path / "figs" / "training_dps_mnist.png").unlink()
    drawn.clear()
    out = training_curves(params, models, tmp_path / "figs")
    assert out[0] == NotDrawn(tmp_path / "figs" / "training_dps_mnist.png", "training: dps_mnist",
                              f"{models / 'dps_mnist/train_log.csv'}: not run")
    assert len(drawn) == 1 and not (tmp_path / "figs" / "training_dps_mnist.png").exists()


def test_dvc_plot_files_hold_one_quantity_each(tmp_path: Path) -> None:
    from dpsynth.report.figures import ACCURACY_VS_EPSILON_CSV, FID_VS_EPSILON_CSV, privacy_utility

    params = two_epsilons(tmp_path)
    privacy_utility(params, tmp_path, tmp_path / "figs")
    acc = pd.read_csv(tmp_path / "figs" / ACCURACY_VS_EPSILON_CSV)
    fid = pd.read_csv(tmp_path / "figs" / FID_VS_EPSILON_CSV)
    assert list(acc.columns) == ["method", "dataset", "experiment", "epsilon", "logreg", "mlp", "cnn"]
    assert list(fid.columns) == ["method", "dataset", "experiment", "epsilon", "fid"]
    one = acc[acc["experiment"] == "dps_mnist_eps1"].iloc[0]
    assert one["logreg"] == 50.0 and one["epsilon"] == pytest.approx(1.0, rel=1e-3)
    assert fid[fid["experiment"] == "dps_mnist_eps1"].iloc[0]["fid"] == 200.0


def test_privacy_utility_averages_the_seeds_of_one_target(tmp_path: Path, drawn: list) -> None:
    """A sweep over epsilon x seed: one point per target epsilon, mean ± std over its seeds."""
    from dpsynth.report.figures import privacy_utility

    raw = fixture_raw()
    raw["sweeps"]["eps_mnist"] = {"base": "dps_mnist", "grid": {"epsilon": [1.0, 10.0], "seed": [0, 1]}}
    params = parse_params(raw, source="fixture")
    cells = [n for n in params.all_experiments() if n.startswith("eps_mnist-")]
    assert sorted(cells) == ["eps_mnist-epsilon1.0-seed0", "eps_mnist-epsilon1.0-seed1",
                             "eps_mnist-epsilon10.0-seed0", "eps_mnist-epsilon10.0-seed1"]
    assert params.all_experiments()["eps_mnist-epsilon1.0-seed1"].seed == 1
    accs = {"eps_mnist-epsilon1.0-seed0": 0.40, "eps_mnist-epsilon1.0-seed1": 0.60,
            "eps_mnist-epsilon10.0-seed0": 0.80, "eps_mnist-epsilon10.0-seed1": 0.80}
    for name, acc in accs.items():
        eps = 1.0 if "epsilon1.0" in name else 10.0
        write_metrics(tmp_path, name, privacy=_dps_privacy(eps), acc={"logreg": (acc, 0.0)}, fid=(100.0, 0.0))
    privacy_utility(params, tmp_path, tmp_path / "figs")
    fig = next(f for f in drawn if "dp_sinkhorn on mnist" in f._suptitle.get_text())
    ax_acc = fig.axes[0]
    (bars,) = [c for c in ax_acc.containers if c.get_label().startswith("LogReg")]
    assert list(bars.lines[0].get_ydata()) == pytest.approx([50.0, 80.0])  # the two seeds' mean per target
    assert "2 runs per ε" in bars.get_label()
    spread = bars.lines[2][0].get_segments()  # the error bars: ± the sample std of 40 % and 60 %
    assert spread[0][1][1] - spread[0][0][1] == pytest.approx(2 * np.std([40.0, 60.0], ddof=1))


def test_heat_map_text_reads_on_its_colour(tmp_path: Path, drawn: list) -> None:
    """Issue 70: the NeurIPS heat map printed black on viridis' dark purple. Each cell's text is white on a dark
    cell, black on a light one (relative luminance), and black on the grey of a cell not run."""
    from dpsynth.report.figures import heat_maps, text_colour
    from dpsynth.report.tables import BuiltTable

    assert text_colour((0.267, 0.005, 0.329, 1.0)) == "white"  # viridis' darkest purple
    assert text_colour((0.993, 0.906, 0.144, 1.0)) == "black"  # its yellow
    cells = [({"p": p, "m": m}, None, {"fid": str(fid), "logreg": "50", "mlp": "60", "cnn": "70"})
             for (p, m), fid in zip([("0.2", "1"), ("0.2", "2"), ("1", "1"), ("1", "2")], (10, 20, 30, 40))]
    built = BuiltTable("g", "G", "P", pd.DataFrame({"a": ["x"]}), grid={"keys": ["p", "m"], "cells": cells})
    assert heat_maps(built, tmp_path) == tmp_path / "g_heatmap.png"
    ours, paper = drawn[-1].axes[0], drawn[-1].axes[len(drawn[-1].axes) // 2]  # FID: ours on top, the paper's below
    colours = {t.get_text(): t.get_color() for t in paper.texts}
    # FID uses viridis reversed: the lowest (10) is yellow, the highest (40) dark purple
    assert colours["10.0"] == "black" and colours["40.0"] == "white"
    assert {t.get_color() for t in ours.texts} == {"black"}  # "not run" on light grey
