"""Reshetova, Chen, Ozgur, "Training generative models from privatized data via entropic optimal transport"
(ISIT 2024, arXiv:2306.09547), Fig. 11 as a report figure: W2 of the generator's samples to the clean held-out
records against the training-set size n, log-log, with its fitted slope (dashed) and a 1/sqrt(n) reference line
(dotted, slope -0.5) through the curve's geometric mean. The paper's "train" curve (W2 to each cell's own clean
training records) is not drawn: it is computed on the private records without noise, so it lies under the
private root, and the caption names where. One figure per ``kind: train_size`` table
(``results/figures/<table>.png``); the numbers, the slopes and the claim check are the table's
(``dpsynth.report.tables.train_size``), this module only draws them."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np

from dpsynth.config import Params
from dpsynth.report.plotting import NotDrawn, not_drawn
from dpsynth.report.plotting import plt as _plt
from dpsynth.report.plotting import save as _save
from dpsynth.report.tables import BuiltTable


def train_size_figure(built: BuiltTable, params: Params, out_dir: Path) -> Path | NotDrawn:
    """One log-log figure of W2 vs n; not drawn (and saying why) when fewer than two sizes have a W2."""
    assert built.curves is not None
    path = Path(out_dir) / f"{built.name}.png"
    pts = [p for p in built.curves["points"] if not math.isnan(p["test"])]
    if len({p["n"] for p in pts}) < 2:
        return not_drawn(path, built.title, f"fewer than two training-set sizes evaluated ({params.scale} scale)")
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.6, 4.0))
    slopes = built.curves["slopes"]
    for key, label, color, marker in (("test", "held-out (clean test split)", "tab:orange", "s"),):
        xy = np.array([(p["n"], p[key]) for p in pts if not math.isnan(p[key])], dtype=np.float64)
        if not len(xy):
            continue
        slope = slopes.get(key)
        ax.loglog(xy[:, 0], xy[:, 1], marker=marker, color=color, ls="-",
                  label=f"{label}: slope {slope:+.3f}" if slope is not None else label)
        if slope is not None:  # the least-squares line through the curve's centre in log-log
            lx, ly = np.log(xy[:, 0]), np.log(xy[:, 1])
            xs = np.array([xy[:, 0].min(), xy[:, 0].max()])
            ax.loglog(xs, np.exp(ly.mean() + slope * (np.log(xs) - lx.mean())), ls="--", color=color, lw=1)
    ref = np.array([(p["n"], p["test"]) for p in pts if not math.isnan(p["test"])], dtype=np.float64)
    if len(ref):
        xs = np.array([ref[:, 0].min(), ref[:, 0].max()])
        c = np.exp(np.log(ref[:, 1]).mean() - built.curves["paper_slope"] * np.log(ref[:, 0]).mean())
        ax.loglog(xs, c * xs ** built.curves["paper_slope"], ls=":", color="k", label="1/sqrt(n) (the paper's rate)")
    ax.set_xlabel("training-set size n")
    ax.set_ylabel("W2 to the clean data")
    ax.legend(fontsize=7)
    ax.grid(True, which="both", lw=0.3)
    caption = (f"{params.scale} scale; {built.curves['dataset']}. Each point: one run trained on the first n "
               "privatized records; W2 on 1,000 points per side. The paper prints no numbers (a plot only). "
               "The paper's train curve (W2 to each cell's own clean training records) is computed on the private "
               f"records without noise, outside the guarantee: not drawn; it lies in {built.curves['private_train']}.")
    fig.suptitle(textwrap.fill(f"{built.title} -- {built.paper}", 90) + "\n" + textwrap.fill(caption, 110),
                 fontsize=7)
    return _save(fig, path)
