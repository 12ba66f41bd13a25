"""Synthetic datasets: balanced labelled samples from a released generator (docs/architecture.md, evaluation).

Every synthetic ``.npz`` carries the generator's privacy report (as JSON text) and the
SHA-256 of the generator file, so a dataset found on disk says what guarantee it has.
A generator that emits NaN/Inf fails loudly and nothing is written.
"""

from __future__ import annotations

import json
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dpsynth.errors import DataError, DpsynthError
from dpsynth.io import write_npz  # sha256_file: re-exported for cli.sample
from dpsynth.privacy.randomness import privacy_label

#: Samples are drawn in batches of this size (eval mode: batch norm uses running statistics,
#: so the batch size does not change the samples' distribution; fixed for reproducibility).
SAMPLE_BATCH = 500
SAMPLE_SEED_BASE = 10_000


def balanced_labels(n: int, num_classes: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` labels, class counts differing by at most one, in random order."""
    labels = np.arange(n, dtype=np.int64) % num_classes
    rng.shuffle(labels)
    return labels


def to_storage(x: torch.Tensor, output_range: str) -> np.ndarray:
    """Generator output -> uint8 images (tanh / sigmoid ranges) or float32 points (identity)."""
    if output_range == "identity":
        return x.numpy().astype(np.float32)
    unit = (x + 1.0) / 2.0 if output_range == "tanh" else x
    return (unit.clamp(0.0, 1.0) * 255.0).round().to(torch.uint8).numpy()


@torch.no_grad()
def generate(G: torch.nn.Module, meta: dict[str, Any], n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Balanced labelled samples; an unconditional generator ignores the labels, which then only
    keep the file's format (every synthetic set has ``y``): its samples carry no class."""
    gen = torch.Generator().manual_seed(SAMPLE_SEED_BASE + seed)
    num_classes = int(meta["num_classes"])
    labels = balanced_labels(n, num_classes, np.random.default_rng(SAMPLE_SEED_BASE + seed))
    conditional = getattr(G, "num_classes", None) is not None
    out = []
    for start in range(0, n, SAMPLE_BATCH):
        lab = torch.from_numpy(labels[start:start + SAMPLE_BATCH])
        z = G.sample_latent(len(lab), gen)
        x = G(z, lab) if conditional else G(z)
        if not bool(torch.isfinite(x).all()):
            raise DpsynthError(f"generator emitted NaN/Inf values (batch starting at sample {start}); "
                               f"no synthetic data written")
        if "record_shape" in meta:  # a flat generator (Reshetova et al.'s MLP on MNIST) stored as images
            x = x.reshape(len(lab), *(int(s) for s in meta["record_shape"]))
        out.append(to_storage(x.cpu(), meta["output_range"]))
    return np.concatenate(out), labels


def write_synthetic(path: Path, x: np.ndarray, y: np.ndarray, num_classes: int, privacy: dict[str, Any],
                    provenance: dict[str, Any]) -> None:
    write_npz(path, x=x, y=y, num_classes=np.int64(num_classes),
              privacy_report=np.array(json.dumps(privacy, sort_keys=True)),
              provenance=np.array(json.dumps(provenance, sort_keys=True)))


def _rerun(path: Path) -> str:
    """The command that re-creates a synthetic set: its folder is named after the experiment."""
    return f"re-run `dpsynth sample {path.parent.name}`"


def load_synthetic(path: Path, expect_shape: tuple[int, ...] | None = None,
                   num_classes: int | None = None) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Load and validate a synthetic dataset; returns (x, y, privacy report).

    Every way a file can be damaged (a killed copy, a truncated download, a hand-made archive) is a
    ``DataError`` naming the file and what to re-run, never numpy's or zipfile's traceback."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: synthetic dataset not found (run `dpsynth sample`)")
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise DataError(f"{path}: a single .npy array, not an .npz archive of x, y, num_classes and "
                            f"privacy_report; {_rerun(path)}")
        with loaded as npz:
            files = set(npz.files)
            if "privacy_report" not in files:
                raise DataError(f"{path}: no privacy report inside; refusing to use synthetic data of unknown privacy")
            missing = {"x", "y", "num_classes"} - files
            if missing:
                raise DataError(f"{path}: missing array(s) {sorted(missing)}; {_rerun(path)}")
            x, y, nc_arr, rep_arr = npz["x"], npz["y"], npz["num_classes"], npz["privacy_report"]
    except (zipfile.BadZipFile, EOFError, zlib.error) as exc:
        raise DataError(f"{path}: truncated or not an .npz ({type(exc).__name__}: {exc}); {_rerun(path)}") from None
    except (OSError, ValueError, KeyError) as exc:
        raise DataError(f"{path}: unreadable synthetic dataset ({type(exc).__name__}: {exc}); {_rerun(path)}") from None
    if nc_arr.shape != () or not np.issubdtype(nc_arr.dtype, np.integer):
        raise DataError(f"{path}: num_classes must be one integer, got {nc_arr.dtype} {nc_arr.shape}; {_rerun(path)}")
    nc = int(nc_arr)
    if rep_arr.shape != () or rep_arr.dtype.kind != "U":
        raise DataError(f"{path}: privacy_report must be one JSON string, got {rep_arr.dtype} {rep_arr.shape}; "
                        f"{_rerun(path)}")
    try:
        report = json.loads(str(rep_arr))
    except ValueError as exc:
        raise DataError(f"{path}: privacy_report is not valid JSON ({exc}); {_rerun(path)}") from None
    if not isinstance(report, dict):
        raise DataError(f"{path}: privacy_report must be a JSON object, got {type(report).__name__}")
    if num_classes is not None and nc != num_classes:
        raise DataError(f"{path}: {nc} classes, the real data has {num_classes}")
    if nc < 1:
        raise DataError(f"{path}: num_classes must be at least 1, got {nc}")
    if x.ndim == 4:
        if x.dtype != np.uint8:
            raise DataError(f"{path}: images must be uint8, got {x.dtype}")
    elif x.ndim == 2:
        if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
            raise DataError(f"{path}: points must be numbers, got {x.dtype}")
    else:
        raise DataError(f"{path}: x has shape {x.shape}; expected (N, C, H, W) images or (N, D) points")
    if expect_shape is not None and tuple(x.shape[1:]) != tuple(expect_shape):
        raise DataError(f"{path}: records have shape {tuple(x.shape[1:])}, the real data has {tuple(expect_shape)}")
    if y.shape != (x.shape[0],) or not np.issubdtype(y.dtype, np.integer):
        raise DataError(f"{path}: y must be {x.shape[0]} integer labels, got {y.dtype} {y.shape}")
    if y.size and (y.min() < 0 or y.max() >= nc):
        raise DataError(f"{path}: labels outside [0, {nc}): min {y.min()}, max {y.max()}")
    if x.shape[0] == 0:
        raise DataError(f"{path}: empty synthetic dataset")
    return x, y, report


def privacy_caption(privacy: dict[str, Any]) -> str:
    """One line for a figure: the headline (epsilon, delta), or that the run is not central DP."""
    eps = privacy.get("epsilon") or {}
    head = privacy.get("headline")
    text = f"epsilon {eps[head]:.2f}, delta {privacy.get('delta'):g} ({head})" \
        if isinstance(eps, dict) and head in eps else str(privacy.get("mechanism") or "non-private")
    if (label := privacy_label(privacy)) is not None:  # as every output of such a run says
        text += f": {label}"
    return text


#: A run's sample grid: this many images across, each drawn this many inches wide at 100 dpi (1.5 x a
#: 28-pixel image), and the labels' font size -- ~570 px wide in all, legible at the report page's width
#: and in the table figures that set two grids side by side (``report.figures.sample_grids``).
GRID_CELL_INCHES = 0.42
GRID_FONT = 9


def sample_grid(x: np.ndarray, y: np.ndarray, num_classes: int, path: Path, per_class: int = 10, *,
                class_names: Sequence[str] = (), title: str | None = None,
                manifold: np.ndarray | None = None, conditional: bool = True) -> None:
    """PNG grid, one row per class (``per_class`` samples each), each row labelled with its class
    name; for 2-D points a scatter over ``manifold`` (points of the true curve, drawn from its
    public definition, never the private training records). ``conditional`` False: the generator
    draws no labels (``y`` is only the balanced placeholder ``generate`` attaches), so the grid is
    the first ``num_classes * per_class`` samples, its rows unlabelled, and its caption says so."""
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dpsynth.io import atomic_path

    if x.ndim == 2:  # point clouds: a scatter plot of the first two coordinates
        fig = plt.figure(figsize=(4.5, 4.5), dpi=100)
        ax = fig.add_subplot(1, 1, 1)
        if manifold is not None:
            ax.plot(manifold[:, 0], manifold[:, 1], ".", ms=1, color="0.6", label="true manifold")
        ax.scatter(x[:2000, 0], x[:2000, 1], s=2, alpha=0.5, color="C0", label=f"generated ({min(len(x), 2000)})")
        ax.set_aspect("equal")
        ax.legend(loc="upper right", fontsize=7, markerscale=4)
        if title:
            ax.set_title(title, fontsize=8)
        with atomic_path(path, suffix=".png") as tmp:
            fig.savefig(tmp, format="png", bbox_inches="tight")
        plt.close(fig)
        return
    c, h, w = x.shape[1:]
    canvas = np.zeros((num_classes * h, per_class * w, c), np.uint8)
    for k in range(num_classes):
        idx = np.flatnonzero(y == k)[:per_class] if conditional else np.arange(k * per_class, (k + 1) * per_class)
        for j, i in enumerate(idx[idx < len(x)]):
            canvas[k * h:(k + 1) * h, j * w:(j + 1) * w] = x[i].transpose(1, 2, 0)
    cell = GRID_CELL_INCHES
    fig = plt.figure(figsize=(per_class * cell + (1.2 if conditional else 0.2), num_classes * cell + 0.6), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    ax.imshow(canvas[..., 0] if c == 1 else canvas, cmap="gray" if c == 1 else None, vmin=0, vmax=255)
    ax.set_xticks([])
    if conditional:
        ax.set_yticks([(k + 0.5) * h - 0.5 for k in range(num_classes)],
                      [class_names[k] if k < len(class_names) else str(k) for k in range(num_classes)],
                      fontsize=GRID_FONT)
    else:
        ax.set_yticks([])
        ax.set_xlabel(f"unconditional generator: its first {num_classes * per_class} samples (no labels)",
                      fontsize=GRID_FONT)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    if title:
        ax.set_title(textwrap.fill(title, 60), fontsize=GRID_FONT)
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, format="png", bbox_inches="tight")
    plt.close(fig)
