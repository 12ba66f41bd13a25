"""The W2-vs-noise sweep's sample grid (Reshetova et al., arXiv:2306.09547, Fig. 5): what each (noise level,
loss) generator draws, so a reader sees what a W2 number stands for (the issue that W2 rewards blur is visible
here: a generator of blurry digits can score lower than real images).

One panel per (loss, noise level) of the sweep's first seed, each a 6 x 6 grid of the records the stage kept
(``results/w2_noise/<dataset>_samples.npz``, keys ``role|loss|noise|seed``). The entropic WGAN draws no labels,
so the panels carry none. Records that are not images (the 2-D manifolds) are drawn as point clouds."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dpsynth.paths import w2_noise_samples
from dpsynth.report.plotting import NotDrawn, not_drawn
from dpsynth.report.plotting import plt as _plt
from dpsynth.report.plotting import save as _save


def _tile(x: np.ndarray, side: int = 6) -> np.ndarray | None:
    """``side`` x ``side`` square images (flattened, in [-1, 1]) tiled into one array; None if not images."""
    d = x.shape[1]
    w = int(round(d ** 0.5))
    if w * w != d or w < 4:
        return None
    x = x[: side * side]
    pad = np.full((side * side - len(x), d), -1.0, dtype=x.dtype)
    imgs = np.concatenate([x, pad]).reshape(side, side, w, w)
    return imgs.transpose(0, 2, 1, 3).reshape(side * w, side * w)


def w2_sample_grid(csv_path: Path, dataset: str, out_dir: Path) -> Path | NotDrawn:
    """``w2_noise_<dataset>_samples.png``: a panel per (loss, noise level); not drawn (the page's list says why)
    when the sweep kept no samples."""
    png = Path(out_dir) / f"w2_noise_{dataset}_samples.png"
    src = w2_noise_samples(csv_path)
    try:
        with np.load(src) as z:
            kept = {k: z[k] for k in z.files}
    except (OSError, ValueError):
        kept = {}
    keys = [k.split("|") for k in kept if k.startswith("figure|")]
    if not keys:
        return not_drawn(png, f"W2 vs noise ({dataset}): samples", f"{src}: no samples kept")
    first = min(int(k[3]) for k in keys)
    losses = list(dict.fromkeys(k[1] for k in keys))
    noises = sorted({float(k[2]) for k in keys})
    plt = _plt()
    fig, axes = plt.subplots(len(losses), len(noises), figsize=(2.0 * len(noises), 2.1 * len(losses)),
                             squeeze=False)
    for i, loss in enumerate(losses):
        for j, noise in enumerate(noises):
            ax = axes[i][j]
            ax.set_xticks([])
            ax.set_yticks([])
            x = kept.get(f"figure|{loss}|{noise:g}|{first}")
            if x is None:
                ax.set_title(f"{loss}, σ={noise:g}: not run", fontsize=7)
                continue
            tile = _tile(x)
            if tile is not None:
                ax.imshow(tile, cmap="gray", vmin=-1, vmax=1)
            else:
                ax.scatter(x[:, 0], x[:, 1], s=3)
            ax.set_title(f"{loss}, σ={noise:g}", fontsize=7)
    fig.suptitle(f"W2 vs noise ({dataset}): 36 samples per generator (seed {first}; unconditional, no labels)",
                 fontsize=8)
    return _save(fig, png)
