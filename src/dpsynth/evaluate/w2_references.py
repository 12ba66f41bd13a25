"""Reference rows for the W2-vs-noise sweep (Reshetova et al., arXiv:2306.09547, Fig. 5): what the W2 to the
clean data rewards, measured with the same estimator on sets that are not generators.

The exact W2 between 1,000 and 1,000 points of MNIST is far from 0 even for real images (the two-sample
floor), and it falls for sets that are blurrier than the data: a blurred or averaged image is closer in L2 to
every digit than a sharp one. So a generator with a lower W2 is not necessarily closer to the clean data; these
rows show a reader the scale (the clean training records: a perfect generator's value), what blur and shrinkage
towards the mean score, and the worst a constant can do (the mean image):

- ``clean training records``: real images the generators' training noise was added to;
- ``blurred (Gaussian, 1 px)``: the same images through a Gaussian filter of standard deviation 1 pixel;
- ``shrunk 30 % to the mean``: each image moved 30 % of the way to the mean image;
- ``Gaussian fit to the clean records``: samples of a Gaussian with the training records' mean and covariance,
  clipped to [-1, 1] -- smooth blobs with the data's first two moments, what a measure that reads only those
  (KID in a small feature space comes close) rewards although no sample is a digit;
- ``the mean image``: one image (the training records' mean) repeated.

Each is scored like a generator's sample: W2 to ``n_eval`` clean held-out records, over ``draws`` independent
draws of both sides (the row's ``w2`` is the first; ``w2_draw_std`` their spread). The image rows exist only for
records that are images (``record_shape`` of two or more dimensions). The training records are a public
benchmark's here (MNIST); like the rest of the sweep, these rows are a statistic of clean training records,
outside the privacy guarantee, and the sweep's file is never pushed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from dpsynth.evaluate.w2 import W2_DRAWS, w2_distance

REFERENCE = "reference"
CLEAN = "clean training records"
BLURRED = "blurred (Gaussian, 1 px)"
SHRUNK = "shrunk 30 % to the mean"
MEAN = "the mean image"
GAUSSIAN = "Gaussian fit to the clean records"
#: The order the report lists them in: the data itself first, then what W2 rewards, the data's first two moments,
#: then the constant.
REFERENCES = (CLEAN, BLURRED, SHRUNK, GAUSSIAN, MEAN)


def _blur(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    from scipy.ndimage import gaussian_filter

    imgs = x.reshape(len(x), *shape)
    sigma = (0,) * (imgs.ndim - 2) + (1.0, 1.0)
    return gaussian_filter(imgs, sigma=sigma, mode="constant", cval=-1.0).reshape(len(x), -1)


def gaussian_fit(train: np.ndarray) -> Any:
    """The clean records' Gaussian (mean and covariance; ``local_baselines.fit_denoised_gaussian`` with no noise to
    remove), its samples clipped to the images' [-1, 1]."""
    from dpsynth.methods.local_baselines import fit_denoised_gaussian

    return fit_denoised_gaussian(train, 0.0, domain=(-1.0, 1.0))


def reference_sets(train: np.ndarray, shape: tuple[int, ...], rng: np.random.Generator, n: int,
                   gaussian: Any = None) -> dict[str, np.ndarray]:
    """The reference sets of ``n`` records each, in record space (``train``: (N, D) clean training records).
    ``gaussian`` (``gaussian_fit(train)``, fitted once by the caller): adds its samples, drawn after the clean
    subset so the other sets do not depend on it."""
    take = train[rng.choice(len(train), min(n, len(train)), replace=False)]
    mean = train.mean(axis=0, keepdims=True)
    sets: dict[str, np.ndarray] = {CLEAN: take}
    if len(shape) >= 2:
        sets[BLURRED] = _blur(take, shape)
        sets[SHRUNK] = take + 0.3 * (mean - take)
        if gaussian is not None:
            sets[GAUSSIAN] = gaussian.sample(len(take), rng)
        sets[MEAN] = np.repeat(mean, len(take), axis=0)
    return sets


def reference_rows(clean_train: np.ndarray, clean_ref: np.ndarray, *, seed: int, n_eval: int,
                   draws: int = W2_DRAWS, extra: Callable[[np.ndarray, int], dict[str, Any]] | None = None
                   ) -> list[dict[str, Any]]:
    """One row per reference set (role ``reference``, its name in ``loss``): W2 to ``n_eval`` clean held-out
    records over ``draws`` draws. ``extra(records, seed)`` adds further measures of the first draw's set (the
    second measure beside W2)."""
    from dpsynth.methods.entropic_wgan import to_records

    shape = tuple(np.asarray(clean_train).shape[1:])
    train, ref = to_records(clean_train), to_records(clean_ref)
    values: dict[str, list[float]] = {}
    first: dict[str, np.ndarray] = {}
    gaussian = gaussian_fit(train) if len(shape) >= 2 else None
    for k in range(max(1, draws)):
        sets = reference_sets(train, shape, np.random.default_rng([seed, 0x5EF, k]), n_eval, gaussian)
        for name, x in sets.items():
            values.setdefault(name, []).append(w2_distance(x, ref, n=n_eval, seed=seed + 7919 * k))
            first.setdefault(name, x)
    rows = []
    for name in (r for r in REFERENCES if r in values):
        v = values[name]
        row: dict[str, Any] = {"loss": name, "noise_std": float("nan"), "role": REFERENCE, "seed": seed,
                               "w2": v[0], "w2_draw_std": float(np.std(v, ddof=1)) if len(v) > 1 else float("nan"),
                               "w2_draws": len(v), "n_eval": n_eval}
        if extra is not None:
            row.update(extra(first[name], seed))
        rows.append(row)
    return rows
