"""The report's matplotlib plumbing, shared by every figure module: a headless backend, atomic PNG
writes, and the placeholder figure written where runs are missing (so the report's outputs do not
depend on which runs finished). Its own module so the figure modules (``figures``, ``manifolds``,
``train_size``, ``wavelet_figure``) import it, not each other."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from dpsynth.io import atomic_path

__all__ = ["placeholder", "plt", "save"]


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


def placeholder(path: Path, title: str, message: str) -> Path:
    """A small figure that says why the real one is missing."""
    fig = plt().figure(figsize=(5, 1.5))
    fig.text(0.5, 0.6, title, ha="center", va="center", fontsize=10, weight="bold")
    fig.text(0.5, 0.3, textwrap.fill(message, 90), ha="center", va="center", fontsize=8)
    return save(fig, path)
