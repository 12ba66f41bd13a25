"""The report's matplotlib plumbing, shared by every figure module: a headless backend, atomic PNG
writes, and the record of a figure not drawn (its runs are missing). Its own module so the figure
modules (``figures``, ``manifolds``, ``train_size``, ``wavelet_figure``) import it, not each other.

A figure with nothing of ours to draw is not written: a picture saying "not run" is no result, and
the report page lists every such figure in one place (``dpsynth.report.page``) with the scale or
target that draws it, instead of showing each as a figure."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpsynth.io import atomic_path

__all__ = ["NotDrawn", "not_drawn", "plt", "save"]


def plt() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (no display; imported on first use: it costs ~0.5 s)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    return pyplot


def save(fig: Any, path: Path) -> Path:
    """Write ``fig`` as a PNG at ``path`` atomically and close it."""
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, format="png", dpi=100, bbox_inches="tight")
    plt().close(fig)
    return path


@dataclass(frozen=True)
class NotDrawn:
    """A figure the report did not draw: where it would be, its title, and why (its runs are missing)."""

    path: Path
    title: str
    reason: str


def not_drawn(path: Path, title: str, reason: str) -> NotDrawn:
    """The record of a figure not drawn (nothing is written: the report builds into a fresh folder)."""
    return NotDrawn(Path(path), title, reason)
