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
    # constrained: the two-paragraph title gets its own room instead of covering the legend and the axes
    fig, ax = plt.subplots(figsize=(7.0, 5.4), layout="constrained")
    runs = [p for p in built.curves.get("runs", []) if not math.isnan(p["test"])]
    if runs:  # every training run's point, then the mean per n with its standard error
        ax.scatter([p["n"] for p in runs], [p["test"] for p in runs], s=8, color="tab:orange", alpha=0.5,
                   label="held-out (clean test split): each training run")
    xy = np.array([(p["n"], p["test"], p.get("se", math.nan), p.get("runs", 1)) for p in pts], dtype=np.float64)
    err = np.where(np.isfinite(xy[:, 2]), xy[:, 2], 0.0)
    ax.errorbar(xy[:, 0], xy[:, 1], yerr=err, marker="s", color="tab:orange", ls="-", capsize=2,
                label=(f"mean over {int(xy[:, 3].max())} runs per n (± s.e.)" if xy[:, 3].min() == xy[:, 3].max()
                       else f"mean over {int(xy[:, 3].min())}-{int(xy[:, 3].max())} runs per n (± s.e.)")
                if xy[:, 3].max() > 1 else "held-out (clean test split): one run per n")
    check = built.curves.get("step_check")
    if check:  # the same n at twice the steps: how far that n still was from convergence
        ax.errorbar([check["n"]], [check["value"]], yerr=[check["se"] or 0.0], marker="v", color="tab:red", ls="none",
                    capsize=2, label=f"n = {check['n']:,.0f} at twice the steps ({check['steps']:,}; "
                                     f"{check['runs']} runs): the step check")
    fit = built.curves.get("fit") or {}
    xs = np.geomspace(xy[:, 0].min(), xy[:, 0].max(), 50)
    if "floor" in fit and "c" in fit:  # the rate fitted on the excess over the estimator's floor
        a, c = fit["floor"]["value"], fit["c"]["value"]
        ax.plot(xs, a + c * xs ** -0.5, ls="--", color="tab:blue", lw=1,
                label=f"fit W2 = {a:.2f} + {c:.1f} n^-1/2 (floor + the paper's rate)")
        ax.axhline(a, ls=":", color="tab:blue", lw=0.8)
    if "exponent" in fit:
        b = fit["exponent"]
        se = f" ± {b['se']:.2f}" if b.get("se") else ""
        ax.plot([], [], " ", label=f"free exponent b = {b['value']:.2f}{se}")
    if "floor_free" in fit:  # the free-exponent fit's own floor: the 1/sqrt(n) intercept is the rejected model's
        ax.axhline(fit["floor_free"]["value"], ls="-.", color="tab:green", lw=0.9,
                   label=f"free-exponent fit's floor {fit['floor_free']['value']:.2f}")
    real = built.curves.get("real_floor")
    if real:  # what real training images score on the same estimator (the W2 sweep's reference row)
        ax.axhspan(real["value"] - (real["se"] or 0.0), real["value"] + (real["se"] or 0.0), color="grey", alpha=0.2,
                   label=f"real training images {real['value']:.2f} (± sd over draws)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    from matplotlib.ticker import FormatStrFormatter

    for axis in (ax.yaxis,):  # plain numbers on the log axis (12.4, not 1.24 x 10^1)
        axis.set_major_formatter(FormatStrFormatter("%.2f"))
        axis.set_minor_formatter(FormatStrFormatter("%.2f"))
    ax.set_xlabel("training-set size n")
    ax.set_ylabel("W2 to the clean data")
    ax.legend(fontsize=7)
    ax.grid(True, which="both", lw=0.3)
    caption = (f"{params.scale} scale; {built.curves['dataset']}. Each small point: one training run on the first n "
               "privatized records; W2 on 1,000 points per side has a two-sample floor a perfect generator also meets, "
               "so the rate is fitted on the excess over a fitted floor (dashed; its intercept dotted), beside the "
               "free-exponent fit's floor (dash-dot) and what real images score (grey, where measured). The paper "
               "prints no numbers (a plot only). "
               "The paper's train curve (W2 to each cell's own clean training records) is computed on the private "
               f"records without noise, outside the guarantee: not drawn; it lies in {built.curves['private_train']}.")
    fig.suptitle(textwrap.fill(f"{built.title} -- {built.paper}", 90) + "\n" + textwrap.fill(caption, 110),
                 fontsize=7)
    return _save(fig, path)
