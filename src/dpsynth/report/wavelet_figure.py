"""Reshetova, Chen, Ozgur, "Training generative models from privatized data via entropic optimal transport"
(ISIT 2024, arXiv:2306.09547), Figs. 2 and 8 as one six-column figure per ``kind: wavelet`` table, a row per
(mechanism, epsilon):

(a) clean -- images of the public TEST split (``{data.root}/processed/{dataset}.npz``, ``x_test``), never the
    training records; so (a) is not the originals of (b), as it is in the paper;
(b) privatized -- training records after the local mechanism (``{data.root}/privatized/{wavelet run}.npz``),
    clipped to [-1, 1] for display;
(c) wavelet-denoised -- the same records after the run's tuned denoiser (``{models}/{wavelet run}/denoised.npz``);
(d) unregularized p-WGAN, (e) wavelet + WGAN-GP, (f) entropic p-WGAN -- each run's first synthetic set
    (``{data.root}/synthetic/{run}/seed0.npz``).

Reads released files only (plus the public test split). A missing file leaves its cell saying "not run".
The paper's Fig. 8 shows columns (d)-(f) only; the same six columns are drawn for it here.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from dpsynth.config import Params
from dpsynth.errors import DataError
from dpsynth.report.plotting import plt as _plt
from dpsynth.report.plotting import save as _save
from dpsynth.report.tables import BuiltTable

#: Images per cell (a TILE x TILE mosaic); the paper shows one per cell in Fig. 2, 200 in Fig. 8.
TILE = 3
COLUMNS = ("clean", "privatized", "denoised", "exact", "wavelet", "entropic")
TITLES = {"clean": "(a) clean (test split)", "privatized": "(b) privatized", "denoised": "(c) wavelet denoising",
          "exact": "(d) p-WGAN (unregularized)", "wavelet": "(e) denoising + WGAN-GP\n(approx. private)",
          "entropic": "(f) entropic p-WGAN"}


def _unit(x: np.ndarray) -> np.ndarray:
    """Images for display in [0, 1]: uint8 / 255, or records in [-1, 1] mapped and clipped."""
    x = np.asarray(x)
    if x.dtype == np.uint8:
        return x.astype(np.float64) / 255.0
    return np.clip((x.astype(np.float64) + 1.0) / 2.0, 0.0, 1.0)


def _read(path: Path, key: str, k: int) -> np.ndarray | None:
    """The first ``k`` rows of ``key`` in ``path`` as (k, 28, 28) in [0, 1]; None when the file is absent."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            x = np.asarray(z[key][:k])
    except (OSError, ValueError, KeyError) as exc:
        raise DataError(f"{path}: not readable as a released image set ({exc})") from None
    if x.size == 0 or x[0].size != 28 * 28:
        raise DataError(f"{path}: {key} holds records of shape {x.shape[1:]}, not 28x28 images")
    return _unit(x.reshape(len(x), 28, 28))


def _synthetic(path: Path, k: int) -> np.ndarray | None:
    from dpsynth.evaluate.sampling import load_synthetic

    if not path.is_file():
        return None
    x, _, _ = load_synthetic(path)
    x = np.asarray(x[:k])
    return _unit(x.reshape(len(x), 28, 28))


def mosaic(images: np.ndarray, tile: int = TILE) -> np.ndarray:
    """Up to ``tile * tile`` images as one (28 tile, 28 tile) picture, row by row; blank where fewer."""
    out = np.ones((28 * tile, 28 * tile))
    for i, img in enumerate(images[: tile * tile]):
        r, c = divmod(i, tile)
        out[28 * r:28 * (r + 1), 28 * c:28 * (c + 1)] = img
    return out


def cell_images(row: dict[str, Any], root: Path, models: Path, dataset: str, k: int) -> dict[str, np.ndarray | None]:
    """Each column's images for one row (None: not run / not released)."""
    from dpsynth.methods.wavelet_wgan.run import DENOISED_FILE

    runs = row["runs"]
    wavelet = runs.get("wavelet")
    return {
        "clean": _read(root / "processed" / f"{dataset}.npz", "x_test", k),
        "privatized": _read(root / "privatized" / f"{wavelet}.npz", "x_train", k) if wavelet else None,
        "denoised": _read(models / wavelet / DENOISED_FILE, "x_train", k) if wavelet else None,
        **{c: _synthetic(root / "synthetic" / runs[c] / "seed0.npz", k) if c in runs else None
           for c in ("exact", "wavelet", "entropic")},
    }


def wavelet_figure(built: BuiltTable, params: Params, out_dir: Path, *, data_root: Path | None = None,
                   models: Path | None = None) -> Path:
    """``{table}.png``: the table's rows in the six columns of the module docstring."""
    assert built.wavelet_panels is not None, f"{built.name}: not a wavelet table"
    root = Path(params.data.root) if data_root is None else Path(data_root)
    models = Path("models") if models is None else Path(models)
    dataset = params.tables[built.name].dataset or "mnist"
    rows = built.wavelet_panels
    plt = _plt()
    fig, axes = plt.subplots(max(1, len(rows)), len(COLUMNS), figsize=(2.2 * len(COLUMNS), 2.5 * max(1, len(rows))),
                             squeeze=False, layout="constrained")
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    for r, row in enumerate(rows):
        cells = cell_images(row, root, models, dataset, TILE * TILE)
        for c, col in enumerate(COLUMNS):
            ax = axes[r, c]
            if cells[col] is None:
                ax.text(0.5, 0.5, "not run", transform=ax.transAxes, ha="center", va="center", fontsize=10)
                ax.set_aspect("equal")
            else:
                ax.imshow(mosaic(cells[col]), cmap="gray", vmin=0.0, vmax=1.0)
            if r == 0:
                ax.set_title(TITLES[col], fontsize=8)
            if col in row["w2"]:
                ax.set_xlabel(f"W2 {row['w2'][col]}", fontsize=7)
        axes[r, 0].set_ylabel(textwrap.fill(row["mechanism"], 22), fontsize=8)
    caption = (f"{params.scale} scale. (a) clean test images (no noise: outside the guarantee; this figure is pushed "
               "only when every dataset is declared public), not the originals of (b); (b), (c) the wavelet run's "
               "privatized training records and their denoised versions; (d)-(f) samples. Wavelet rows: ONLY "
               "APPROXIMATELY PRIVATE (denoiser tuned on the clean images, as in the paper).")
    fig.suptitle(textwrap.fill(f"{built.title} -- {built.paper}", 110) + "\n" + textwrap.fill(caption, 130), fontsize=8)
    return _save(fig, Path(out_dir) / f"{built.name}.png")


def wavelet_figures(params: Params, built: dict[str, BuiltTable], out_dir: Path, *, data_root: Path | None = None,
                    models: Path | None = None) -> list[Path]:
    """One figure per ``kind: wavelet`` table."""
    return [wavelet_figure(b, params, out_dir, data_root=data_root, models=models)
            for b in built.values() if b.wavelet_panels is not None]
