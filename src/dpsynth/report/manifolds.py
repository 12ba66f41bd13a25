"""Reshetova, Chen, Ozgur, "Training generative models from privatized data via entropic optimal transport"
(ISIT 2024, arXiv:2306.09547), Figs. 1, 6 and 7 as the paper draws them: one figure per 2-D manifold
(a ``kind: manifold`` table of params.yaml), the Laplace row (entropic vs unregularized 1-W) above the
Gaussian row (2-W), each panel the privatized points the generator trained on (grey, behind) under
the learned manifold's samples, the clean curve as a line, and the panel's W2 to the clean manifold in
its caption. The numbers and the claim check are the table's (``dpsynth.report.tables.manifold``);
this module only draws them.

Reads released files only: the privatized records (``{data.root}/privatized/{experiment}.npz``, the
output of the local mechanism, epsilon-LDP per record) and the first synthetic set of each run
(``{data.root}/synthetic/{experiment}/seed0.npz``). A panel whose run is missing says so.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np

from dpsynth.config import Params
from dpsynth.errors import DataError
from dpsynth.report.plotting import plt as _plt
from dpsynth.report.plotting import save as _save
from dpsynth.report.tables import BuiltTable

#: Points drawn per panel (a random subset, the same for every run): enough to see the shape.
N_PRIVATIZED, N_LEARNED = 5000, 2000


def _privatized(path: Path) -> np.ndarray | None:
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            x = np.asarray(z["x_train"], dtype=np.float64)
    except (OSError, ValueError, KeyError) as exc:
        raise DataError(f"{path}: not a readable privatized dataset ({exc}); re-run `dpsynth privatize "
                        f"{path.stem}`") from None
    if x.ndim != 2 or x.shape[1] != 2:
        raise DataError(f"{path}: privatized records of shape {x.shape}, not 2-D points")
    return x


def _learned(path: Path) -> np.ndarray | None:
    from dpsynth.evaluate.sampling import load_synthetic

    if not path.is_file():
        return None
    x, _, _ = load_synthetic(path)
    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    if x.shape[1] != 2:
        raise DataError(f"{path}: synthetic records of shape {x.shape}, not 2-D points")
    return x


def _subset(x: np.ndarray, n: int) -> np.ndarray:
    if len(x) <= n:
        return x
    return x[np.random.default_rng(0).choice(len(x), n, replace=False)]


def _curve(dataset: str) -> np.ndarray:
    """The clean manifold from its definition (public, like the sample grids' curve), not from any records."""
    from dpsynth.data.prepare import manifold_points
    from dpsynth.data.registry import get_spec

    spec = get_spec(dataset)
    return manifold_points(str(spec.options["shape"]), 3000, np.random.default_rng(0))


def manifold_figure(built: BuiltTable, params: Params, out_dir: Path, *, data_root: Path | None = None) -> Path:
    """``{table}.png``: the table's panels in the paper's layout (see the module docstring)."""
    assert built.panels is not None, f"{built.name}: not a manifold table"
    root = Path(params.data.root) if data_root is None else Path(data_root)
    table = params.tables[built.name]
    assert table.dataset is not None
    curve = _curve(table.dataset)
    lo, hi = curve.min(0) - 1.5, curve.max(0) + 1.5  # the manifold and a margin: the noise spreads wider
    nrows = 1 + max((p["row"] for p in built.panels), default=0)
    plt = _plt()
    fig, axes = plt.subplots(nrows, 2, figsize=(9.0, 4.6 * nrows), squeeze=False, layout="constrained")
    for ax in axes.flat:
        ax.axis("off")
    for p in built.panels:
        ax = axes[p["row"], p["col"]]
        ax.axis("on")
        priv = _privatized(root / "privatized" / f"{p['experiment']}.npz")
        gen = _learned(root / "synthetic" / p["experiment"] / "seed0.npz")
        if priv is not None:
            shown = _subset(priv, N_PRIVATIZED)
            outside = float(np.mean(np.any((priv < lo) | (priv > hi), axis=1)))
            ax.scatter(shown[:, 0], shown[:, 1], s=2, c="0.75", lw=0, label=f"privatized ({outside:.0%} off the axes)",
                       zorder=1)
        ax.plot(curve[:, 0], curve[:, 1], ".", ms=0.8, color="k", label="clean manifold", zorder=2)
        if gen is not None:
            shown = _subset(gen, N_LEARNED)
            ax.scatter(shown[:, 0], shown[:, 1], s=3, c="tab:red", lw=0, label="learned", zorder=3)
        else:
            ax.text(0.5, 0.5, "not run", transform=ax.transAxes, ha="center", va="center", fontsize=12, zorder=4)
        ax.set_xlim(lo[0], hi[0])
        ax.set_ylim(lo[1], hi[1])
        ax.set_aspect("equal")
        ax.set_title(f"{p['mechanism']}, {p['loss']}\n{p['experiment']}", fontsize=8)
        ax.set_xlabel(f"W2 to the clean manifold: {p['w2']}", fontsize=9)
        ax.legend(fontsize=6, loc="best", markerscale=3, framealpha=0.8)
    trained = sorted({p["trained_on"] for p in built.panels if p["ran"]})
    caption = f"{params.scale} scale; trained on: {'; '.join(trained)}" if trained else f"{params.scale} scale: not run"
    caption += " (the paper: n = b = 400,000, every privatized point in every step)."
    fig.suptitle(textwrap.fill(f"{built.title} -- {built.paper}", 110) + "\n" + textwrap.fill(caption, 120),
                 fontsize=9)
    return _save(fig, Path(out_dir) / f"{built.name}.png")
