"""Figures of the report (matplotlib, Agg): sample grids side by side per table, W2 versus
noise, the 2-D manifold figures (``dpsynth.report.manifolds``), privacy-utility curves when the
configuration holds several epsilons, heat maps of two-key grids (p x m, optimizer x lr, batch x
sigma), ours above the paper's, and each run's training curves (epsilon spent, speed, and the loss
where it may be released).

The curves' data are also written as CSV next to the PNGs so DVC ``plots:`` can draw them,
one quantity per file (DVC draws one y per series: W2 per loss, accuracy and FID apart); those CSVs
are always written. A figure with nothing of ours to draw (its runs missing, or a table without a
run of ours) is not written: :func:`make_figures` returns it as not drawn, with the reason, and the
report page lists it with the tables not run (``dpsynth.report.page``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dpsynth.config import Params
from dpsynth.io import atomic_open
from dpsynth.paths import samples_png, w2_noise_csv
from dpsynth.report.plotting import NotDrawn, not_drawn
from dpsynth.report.plotting import plt as _plt
from dpsynth.report.plotting import save as _save
from dpsynth.report.manifolds import manifold_figure
from dpsynth.report.runs import METRICS, RunStore, metric_value
from dpsynth.report.tables import BuiltTable, read_w2_csv, w2_skipped_reason
from dpsynth.report.train_size import train_size_figure
from dpsynth.report.w2_samples import w2_sample_grid
from dpsynth.report.wavelet_figure import wavelet_figure

W2_CSV = "w2_noise.csv"
PRIVACY_UTILITY_CSV = "privacy_utility.csv"
#: The same data, wide, for DVC plots: one column per loss / per classifier.
W2_BY_LOSS_CSV = "w2_noise_by_loss.csv"
ACCURACY_VS_EPSILON_CSV = "accuracy_vs_epsilon.csv"
FID_VS_EPSILON_CSV = "fid_vs_epsilon.csv"
#: What a run's training-curve figure shows (``training_curves``); the report page gives those figures a
#: category of their own (``dpsynth.report.page``).
TRAINING = "training curves"


#: Sample grids side by side: this many per figure, each panel about a run's own ``samples.png``
#: (``evaluate.sampling.sample_grid``, ~570 px wide): a figure ~1,100 px wide and ~560 px high, legible
#: at the report page's width and never taller than its window (the page centres a figure vertically,
#: so a taller one would lose its top). A table with more runs gets more figures: ``_samples_2`` ...
GRIDS_PER_FIGURE = 2
PANEL_INCHES = (5.6, 5.4)


def sample_grids(built: BuiltTable, results: Path, out_dir: Path) -> list[Path] | NotDrawn:
    """The rows' ``results/runs/{experiment}/samples.png`` side by side, labelled by table row:
    ``{table}_samples.png``, then ``{table}_samples_2.png`` ... for every further ``GRIDS_PER_FIGURE``."""
    path = Path(out_dir) / f"{built.name}_samples.png"
    found = [(label, samples_png(results, exp)) for label, exp in built.runs]
    found = [(label, p) for label, p in found if p.is_file()]
    if not found:
        return not_drawn(path, f"{built.title}: sample grids", "no run of the table has a sample grid")
    plt = _plt()
    parts = [found[i:i + GRIDS_PER_FIGURE] for i in range(0, len(found), GRIDS_PER_FIGURE)]
    out = []
    for k, part in enumerate(parts, 1):
        fig, axes = plt.subplots(1, GRIDS_PER_FIGURE, figsize=(PANEL_INCHES[0] * GRIDS_PER_FIGURE, PANEL_INCHES[1]),
                                 squeeze=False, layout="constrained")
        for ax in axes.flat:
            ax.axis("off")
        for ax, (label, p) in zip(axes.flat, part):
            ax.imshow(plt.imread(p))
            ax.set_title(label, fontsize=11)
        of = f" ({k} of {len(parts)})" if len(parts) > 1 else ""
        fig.suptitle(f"{built.title}{of}", fontsize=11)
        out.append(_save(fig, path if k == 1 else path.with_name(f"{built.name}_samples_{k}.png")))
    return out


def w2_noise(params: Params, results: Path, out_dir: Path) -> list[Path | NotDrawn]:
    """W2 to the clean data versus noise, one curve per loss and dataset (Reshetova et al. (arXiv:2306.09547) Fig. 5).

    Reads ``results/w2_noise/{dataset}.csv`` for every w2_noise table's dataset and writes
    the long-format curve data ``w2_noise.csv`` (dataset, loss, noise, w2, w2_std, n)."""
    datasets = [t.dataset for t in params.tables.values() if t.kind == "w2_noise" and t.dataset]
    rows: list[dict[str, Any]] = []
    out: list[Path | NotDrawn] = []
    plt = _plt()
    for ds in dict.fromkeys(datasets):
        src = w2_noise_csv(results, ds)
        png = Path(out_dir) / f"w2_noise_{ds}.png"
        if not src.is_file():
            out.append(not_drawn(png, f"W2 vs noise ({ds})", f"{src}: not run"))
            continue
        df = read_w2_csv(src)
        if df.empty:
            out.append(not_drawn(png, f"W2 vs noise ({ds})", w2_skipped_reason(src) or f"{src}: no rows"))
            continue
        right = "entropic_w2_privatized" in df and df["entropic_w2_privatized"].notna().any()
        kid = "kid" in df and df["kid"].notna().any()
        panels = 1 + right + kid
        fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 3.5), squeeze=False)
        ax = axes[0][0]
        for loss, g in df.groupby("loss", sort=False):
            agg = g.groupby("noise")["w2"].agg(["mean", "std", "count"]).reset_index().fillna(0.0)
            runs = int(agg["count"].max())
            counted = f"{loss} ({runs} runs per σ, ± std)" if runs > 1 else f"{loss} (1 run per σ)"
            ax.errorbar(agg["noise"], agg["mean"], yerr=agg["std"], marker="o", label=counted, capsize=2)
            rows += [{"dataset": ds, "loss": str(loss), "noise": float(r.noise), "w2": float(r.mean),
                      "w2_std": float(r.std), "n": int(r.count)} for r in agg.itertuples()]
        if "w2_privatized_data" in df:
            base = df.groupby("noise")["w2_privatized_data"].mean()
            ax.plot(base.index, base.values, "k--", label="privatized data itself")
        refs = read_w2_csv(src, role="reference")
        for r, style in zip(refs.itertuples(), (":", "-.", (0, (1, 3)), (0, (5, 5)))):
            if str(r.loss) != "the mean image":  # off the scale of the rest; the table has it
                ax.axhline(float(r.w2), color="grey", ls=style, lw=0.9, label=f"reference: {r.loss}")
        out.append(w2_sample_grid(src, ds, Path(out_dir)))
        ax.set_xlabel("noise std σ")
        ax.set_ylabel("W2 to the clean data")
        ax.set_title(f"W2 vs noise ({ds}); Reshetova et al. Fig. 5 gives this only as a plot\nseeded noise on the "
                     "clean training records: not private, outside the guarantee", fontsize=8)
        ax.legend(fontsize=8)
        if right:
            # Fig. 5 right: the entropic W2 at 2σ² to held-out privatized records (the paper's
            # "validation error"), the clean records' own value as the floor a perfect generator hits.
            ax2 = axes[0][1]
            for loss, g in df.groupby("loss", sort=False):
                agg = g.groupby("noise")["entropic_w2_privatized"].agg(["mean", "std"]).reset_index().fillna(0.0)
                ax2.errorbar(agg["noise"], agg["mean"], yerr=agg["std"], marker="o", label=str(loss), capsize=2)
            if "entropic_w2_privatized_clean" in df:
                base = df.groupby("noise")["entropic_w2_privatized_clean"].mean()
                ax2.plot(base.index, base.values, "k--", label="clean data itself")
            ax2.set_xlabel("noise std σ")
            ax2.set_ylabel("entropic W2 (λ = 2σ²), squared units")
            ax2.set_title("to held-out privatized data (Fig. 5 right)", fontsize=9)
            ax2.legend(fontsize=8)
        if kid:
            _kid_panel(axes[0][panels - 1], df, refs)
        out.append(_save(fig, png))
    csv_path = Path(out_dir) / W2_CSV
    long = pd.DataFrame(rows, columns=["dataset", "loss", "noise", "w2", "w2_std", "n"])
    with atomic_open(csv_path) as fh:
        long.to_csv(fh, index=False, lineterminator="\n")
    wide_path = Path(out_dir) / W2_BY_LOSS_CSV
    losses = ["entropic", "exact", "sinkhorn_divergence"]
    wide = long.pivot_table(index=["dataset", "noise"], columns="loss", values="w2").reindex(columns=losses) \
        if len(long) else pd.DataFrame(columns=losses)
    with atomic_open(wide_path) as fh:
        wide.reset_index().reindex(columns=["dataset", "noise", *losses]).to_csv(fh, index=False, lineterminator="\n")
    return out + [csv_path, wide_path]


def _kid_panel(ax: Any, df: pd.DataFrame, refs: pd.DataFrame) -> None:
    """The second measure beside W2 (``evaluate.closeness``): KID x 10^3 of the same samples per loss against σ,
    mean ± std over the runs, and the reference sets' values, where blur does not score better than real images."""
    for loss, g in df[df["kid"].notna()].groupby("loss", sort=False):
        agg = (1e3 * g.set_index("noise")["kid"]).groupby(level=0).agg(["mean", "std", "count"]).reset_index()
        ax.errorbar(agg["noise"], agg["mean"], yerr=agg["std"].fillna(0.0), marker="o", capsize=2,
                    label=f"{loss} ({int(agg['count'].max())} runs per σ)")
    if "kid" in refs:
        for r, style in zip(refs.itertuples(), (":", "-.", (0, (1, 3)), (0, (5, 5)))):
            if pd.notna(r.kid):
                ax.axhline(1e3 * float(r.kid), color="grey", ls=style, lw=0.9, label=f"reference: {r.loss}")
    ax.set_xlabel("noise std σ")
    ax.set_ylabel("KID ×10³ (CNN features; lower is closer)")
    ax.set_title("second measure: KID to the clean test half (ours, not in the paper)", fontsize=9)
    ax.legend(fontsize=7)


def privacy_utility(params: Params, results: Path, out_dir: Path,
                    store: RunStore | None = None) -> list[Path | NotDrawn]:
    """Accuracy and FID versus epsilon for every (method, dataset) configured at several
    target epsilons; the x value is the run's headline epsilon (what its accountant says).
    ``store``: the report's validated runs (default: read from ``results``)."""
    store = store if store is not None else RunStore(results)
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for name, exp in params.all_experiments().items():
        if exp.privacy.enabled and exp.privacy.epsilon is not None:
            groups[(exp.method, exp.dataset)].append(name)
    rows: list[dict[str, Any]] = []
    out: list[Path | NotDrawn] = []
    plt = _plt()
    for (method, dataset), names in sorted(groups.items()):
        targets = {params.all_experiments()[n].privacy.epsilon for n in names}
        if len(targets) < 2:
            continue
        pts = []
        for n in names:
            run = store.experiment(n)
            if run is None:
                continue
            priv = run.privacy or {}
            eps = run.epsilons().get(str(priv.get("headline")))
            if eps is None or not math.isfinite(eps):
                continue
            for metric in METRICS:
                v = metric_value(run, metric)
                if v is not None:
                    pts.append({"method": method, "dataset": dataset, "experiment": n, "epsilon": eps,
                                "metric": metric, "value": v,
                                "target": params.all_experiments()[n].privacy.epsilon})
        rows += pts
        png = Path(out_dir) / f"privacy_utility_{method}_{dataset}.png"
        if not pts:
            out.append(not_drawn(png, f"privacy-utility: {method} on {dataset}",
                                 f"none of its runs ({', '.join(names)}) has metrics"))
            continue
        # runs at one target epsilon (e.g. a seed sweep's cells) are one point: mean ± std
        df = pd.DataFrame(pts).groupby(["metric", "target"]).agg(
            epsilon=("epsilon", "mean"), value=("value", "mean"), std=("value", "std"), n=("value", "size"))
        df = df.reset_index().fillna({"std": 0.0})
        fig, (ax_acc, ax_fid) = plt.subplots(1, 2, figsize=(9, 3.5))
        for metric, g in df.groupby("metric"):
            g = g.sort_values("epsilon")
            ax = ax_fid if metric == "fid" else ax_acc
            runs = f", {int(g['n'].max())} runs per ε" if g["n"].max() > 1 else ""
            ax.errorbar(g["epsilon"], g["value"], yerr=g["std"], marker="o", capsize=2,
                        label=f"{METRICS[str(metric)]}{runs}")
        ax_acc.set(xlabel="ε (headline convention)", ylabel="accuracy (%)", xscale="log")
        ax_fid.set(xlabel="ε (headline convention)", ylabel="FID", xscale="log")
        ax_acc.legend(fontsize=8)
        fig.suptitle(f"privacy-utility: {method} on {dataset}", fontsize=10)
        out.append(_save(fig, png))
    csv_path = Path(out_dir) / PRIVACY_UTILITY_CSV
    long = pd.DataFrame(rows, columns=["method", "dataset", "experiment", "epsilon", "metric", "value"])  # per run
    with atomic_open(csv_path) as fh:
        long.to_csv(fh, index=False, lineterminator="\n")
    split = []
    for name, metrics in ((ACCURACY_VS_EPSILON_CSV, [m for m in METRICS if m != "fid"]), (FID_VS_EPSILON_CSV, ["fid"])):
        part = long[long["metric"].isin(metrics)]
        keys = ["method", "dataset", "experiment", "epsilon"]
        wide = part.pivot_table(index=keys, columns="metric", values="value").reindex(columns=metrics) \
            if len(part) else pd.DataFrame(columns=metrics)
        with atomic_open(Path(out_dir) / name) as fh:
            wide.reset_index().reindex(columns=[*keys, *metrics]).sort_values(keys).to_csv(
                fh, index=False, lineterminator="\n")
        split.append(Path(out_dir) / name)
    return out + [csv_path, *split]


def training_curves(params: Params, models: Path, out_dir: Path) -> list[Path | NotDrawn]:
    """``training_{experiment}.png`` per pipeline target from its released ``train_log.csv``:
    epsilon spent vs step (a private run), the loss vs step where the log may hold it (non-private
    runs and local-DP runs, whose loss is post-processing of privatized data), and steps/s.
    A DP run's loss is computed on private records without noise and is never in that log."""
    plt = _plt()
    out: list[Path | NotDrawn] = []
    for name in params.pipeline_targets():
        png = Path(out_dir) / f"training_{name}.png"
        log = Path(models) / name / "train_log.csv"
        if not log.is_file():
            out.append(not_drawn(png, f"training: {name}", f"{log}: not run"))
            continue
        df = pd.read_csv(log)
        panels = [c for c in ("epsilon", "loss", "steps_per_s") if c in df and df[c].notna().any()
                  and np.isfinite(df[c].to_numpy(dtype=float)).any()]
        if "step" not in df or not panels:
            out.append(not_drawn(png, f"training: {name}", f"{log}: no curves (columns {list(df)})"))
            continue
        labels = {"epsilon": "ε spent (headline accountant)", "loss": "loss", "steps_per_s": "steps/s"}
        if "epsilon_label" in df and df["epsilon_label"].notna().any():  # the run's privacy label (loop.labelled_log)
            labels["epsilon"] += f"\n[{df['epsilon_label'].dropna().iloc[0]}]"
        fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 2.8), squeeze=False)
        fig.subplots_adjust(wspace=0.4)
        for ax, col in zip(axes[0], panels):
            ax.plot(df["step"], df[col], lw=1.2, marker="o" if len(df) < 40 else None, ms=3)  # a short log: points
            ax.set(xlabel="step", ylabel=labels[col])
            ax.grid(alpha=0.3)
        exp = params.all_experiments()[name]
        if "epsilon" in panels and exp.privacy.enabled and exp.privacy.epsilon is not None:
            axes[0][0].axhline(exp.privacy.epsilon, color="r", ls="--", lw=1, label="target ε")
            axes[0][0].legend(fontsize=7)
        fig.suptitle(f"{name} ({exp.method}, {exp.dataset}, {params.scale} scale)", fontsize=9)
        out.append(_save(fig, png))
    return out


def _float(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:
        return None


def _axis(values: list[str]) -> list[str]:
    """Axis ticks in numeric order when every value is a number, else alphabetical."""
    uniq = list(dict.fromkeys(values))
    if all(_float(v) is not None for v in uniq):
        return sorted(uniq, key=lambda v: _float(v) or 0.0)
    return sorted(uniq, key=str.lower)


def text_colour(rgba: tuple[float, ...]) -> str:
    """Black or white, whichever reads on a cell of colour ``rgba`` (issue 70: the NeurIPS heat map printed
    black on viridis' dark purple): white where the cell's relative luminance (WCAG 2, sRGB) is below 0.179,
    the level at which white and black have the same contrast against it."""
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgba[:3]]
    luminance = 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
    return "white" if luminance < 0.179 else "black"


def heat_maps(built: BuiltTable, out_dir: Path) -> Path | None:
    """Two-key grids: ours (top) and the paper's (bottom) for FID and each classifier; a blank
    (grey) square is a cell not run / not reported, annotated as such."""
    if built.grid is None or len(built.grid["keys"]) != 2:
        return None
    k0, k1 = built.grid["keys"]
    cells = built.grid["cells"]
    rows_ax = _axis([c[0].get(k0, "n/a") for c in cells])
    cols_ax = _axis([c[0].get(k1, "n/a") for c in cells])
    plt = _plt()
    fig, axes = plt.subplots(2, len(METRICS), figsize=(3.2 * len(METRICS), 2 * (1 + 0.35 * len(rows_ax))),
                             squeeze=False)
    for j, (metric, label) in enumerate(METRICS.items()):
        grids = {}
        for who in ("ours", "paper"):
            grid = np.full((len(rows_ax), len(cols_ax)), np.nan)
            for key_vals, run, paper_vals in cells:
                r, c = rows_ax.index(key_vals.get(k0, "n/a")), cols_ax.index(key_vals.get(k1, "n/a"))
                v = metric_value(run, metric) if who == "ours" else _float(paper_vals[metric])
                if v is not None:
                    grid[r, c] = v
            grids[who] = grid
        both = np.concatenate([g.ravel() for g in grids.values()])
        lo, hi = (np.nanmin(both), np.nanmax(both)) if np.isfinite(both).any() else (0.0, 1.0)
        cmap = plt.get_cmap("viridis_r" if metric == "fid" else "viridis").with_extremes(bad="#dddddd")
        for i, (who, grid) in enumerate(grids.items()):
            ax = axes[i, j]  # one colour scale for ours and the paper's, so the colours compare
            image = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=lo, vmax=hi, aspect="auto")
            rgba = image.cmap(image.norm(np.ma.masked_invalid(grid)))  # each cell's colour, grey where masked
            for r in range(len(rows_ax)):
                for c in range(len(cols_ax)):
                    txt = f"{grid[r, c]:.1f}" if np.isfinite(grid[r, c]) else ("not run" if who == "ours" else "n/r")
                    ax.text(c, r, txt, ha="center", va="center", fontsize=6,
                            color=text_colour(tuple(rgba[r, c])))
            ax.set_xticks(range(len(cols_ax)), cols_ax, fontsize=7)
            ax.set_yticks(range(len(rows_ax)), rows_ax, fontsize=7)
            ax.set_xlabel(k1, fontsize=8)
            ax.set_ylabel(k0, fontsize=8)
            ax.set_title(f"{label} ({who})", fontsize=8)
    fig.subplots_adjust(hspace=0.5, wspace=0.35)
    fig.suptitle(f"{built.title} — top: ours, bottom: {built.paper} (n/r: not reported)", fontsize=9)
    return _save(fig, Path(out_dir) / f"{built.name}_heatmap.png")


@dataclass(frozen=True)
class Figure:
    """One output of :func:`make_figures`: the file written (a PNG, or a CSV for ``dvc plots``) or the
    record of a figure not drawn, the table it belongs to (None: a run's or the privacy figures) and
    what it shows, in the words the report page labels it with."""

    out: Path | NotDrawn
    table: str | None
    shows: str

    @property
    def drawn(self) -> bool:
        return isinstance(self.out, Path) and self.out.suffix == ".png"


def _table_figures(params: Params, b: BuiltTable, results: Path, out_dir: Path,
                   models: Path | None) -> list[Figure]:
    """The figures of one table with a run of ours (a table with none gets none: the page lists it)."""
    kind = params.tables[b.name].kind
    out: list[Figure] = []
    if kind in ("methods", "grid", "train_size"):  # train_size: one run per n (Reshetova et al. Fig. 11)
        grids = sample_grids(b, results, out_dir)
        parts = [grids] if isinstance(grids, NotDrawn) else grids
        out += [Figure(g, b.name, "sample grids" + (f" {k:02d} of {len(parts)}" if len(parts) > 1 else ""))
                for k, g in enumerate(parts, 1)]
    hm = heat_maps(b, out_dir)
    if hm is not None:
        out.append(Figure(hm, b.name, "heat maps"))
    if kind == "manifold":  # Reshetova et al. Figs. 1, 6, 7
        out.append(Figure(manifold_figure(b, params, out_dir), b.name, "manifolds"))
    if kind == "train_size":  # Reshetova et al. Fig. 11
        out.append(Figure(train_size_figure(b, params, out_dir), b.name, "W2 against n"))
    if kind == "wavelet":  # Reshetova et al. Figs. 2, 8
        out.append(Figure(wavelet_figure(b, params, out_dir, models=models), b.name, "images"))
    return out


def make_figures(params: Params, built: dict[str, BuiltTable], results: Path, out_dir: Path,
                 store: RunStore | None = None, models: Path | None = None) -> list[Figure]:
    """Every figure into ``out_dir`` (the report passes a staging folder it swaps in when all succeeded),
    and every one not drawn, each with its table."""
    out: list[Figure] = []
    for b in built.values():
        if b.ours:
            out += _table_figures(params, b, results, out_dir, models)
    w2_tables = {params.tables[b.name].dataset: b.name for b in built.values()
                 if params.tables[b.name].kind == "w2_noise"}
    for f in w2_noise(params, results, out_dir):
        stem = (f.path if isinstance(f, NotDrawn) else f).stem.removeprefix("w2_noise_")
        ds = stem.removesuffix("_samples")
        out.append(Figure(f, w2_tables.get(ds), "samples per noise level and loss" if stem != ds else
                          "W2 against noise"))
    out += [Figure(f, None, "utility against ε") for f in privacy_utility(params, results, out_dir, store)]
    if models is not None:
        out += [Figure(f, None, TRAINING) for f in training_curves(params, models, out_dir)]
    return out
