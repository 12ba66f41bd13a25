"""Wavelet denoising of privatized images with PyWavelets, and the paper's tuning of its parameters on
the CLEAN images (Reshetova, Chen, Ozgur, "Training generative models from privatized data via entropic
optimal transport", ISIT 2024, arXiv:2306.09547, Sec. 4.3, Figs. 2 and 8).

Denoising (Mallat, "A wavelet tour of signal processing", 1999): a 2-D discrete wavelet decomposition of
each image (``pywt.wavedec2``, ``level`` levels of ``wavelet``, periodization boundary so the
transform is orthogonal for orthogonal wavelets and the output keeps the 28x28 shape), every DETAIL
coefficient thresholded (``pywt.threshold``, soft or hard) at ``multiplier * noise_std``, the
approximation kept, the inverse transform, then clipped to the pixel range [-1, 1].
``noise_std`` is the per-pixel standard deviation of the local mechanism's noise -- public: it follows
from (epsilon, delta, radius) -- so the threshold is the universal-threshold family ``t = k sigma``.

Tuning, as the paper does it: "the wavelet transform parameters for denoising (the wavelet basis, the
level and reconstruction thresholds) were optimized to minimize the average distance between the
reconstructed and original image under the particular noise instance". :func:`tune` scores every
cell of a grid by the mean squared error between the denoised privatized records and the SAME records
before privatization, and keeps the best. That reads the private records without noise: the chosen
parameters are a non-private function of the clean data, so the baseline is only APPROXIMATELY
private (the paper's words) -- its local epsilon holds for the privatized records alone, not for the
released parameters and what is trained from them. The method's privacy report says so.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from dpsynth.errors import ConfigError, DataError

#: pywt's boundary handling: periodization keeps every level's coefficient count at ceil(n / 2) and the
#: reconstruction at the input's size (28x28 images stay 28x28).
MODE = "periodization"
THRESHOLD_RULES = ("soft", "hard")


def discrete_wavelets() -> list[str]:
    """Every wavelet name pywt can decompose with (``pywt.wavelist(kind="discrete")``)."""
    import pywt

    return list(pywt.wavelist(kind="discrete"))


def unknown_wavelets(names: Sequence[str]) -> list[str]:
    """The names of ``names`` pywt does not know (for the configuration's one-line refusal)."""
    known = set(discrete_wavelets())
    return [n for n in names if n not in known]


def max_level(wavelet: str, size: int) -> int:
    """The deepest useful decomposition of a ``size`` x ``size`` image (``pywt.dwt_max_level``)."""
    import pywt

    return int(pywt.dwt_max_level(size, pywt.Wavelet(wavelet).dec_len))


@dataclass(frozen=True)
class WaveletParams:
    """One denoiser: basis, decomposition level, threshold rule and threshold = ``multiplier * noise_std``."""

    wavelet: str
    level: int
    rule: str
    multiplier: float

    def threshold(self, noise_std: float) -> float:
        return float(self.multiplier) * float(noise_std)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def denoise(records: np.ndarray, image_shape: tuple[int, ...], params: WaveletParams, noise_std: float,
            batch: int = 4096) -> np.ndarray:
    """Denoise flattened records ``(N, C*H*W)`` in [-1, 1] (each channel a 2-D image); float32 out, clipped
    to [-1, 1]. Deterministic: the same inputs give the same bytes."""
    import pywt

    shape = tuple(int(s) for s in image_shape)
    x = np.asarray(records, dtype=np.float64)
    if len(shape) != 3 or x.ndim != 2 or x.shape[1] != int(np.prod(shape)):
        raise DataError(f"wavelet denoising needs image records (N, C*H*W) of shape {shape}, got {x.shape}")
    if params.rule not in THRESHOLD_RULES:
        raise ConfigError(f"threshold rule {params.rule!r}: choose one of {', '.join(THRESHOLD_RULES)}")
    if params.level < 1 or params.level > max_level(params.wavelet, min(shape[1:])):
        raise ConfigError(f"wavelet level {params.level} for {params.wavelet!r} on {shape[1]}x{shape[2]} images: "
                          f"choose 1..{max_level(params.wavelet, min(shape[1:]))}")
    t = params.threshold(noise_std)
    out = np.empty(x.shape, dtype=np.float32)
    for start in range(0, len(x), batch):
        imgs = x[start:start + batch].reshape(-1, *shape)
        coeffs = pywt.wavedec2(imgs, params.wavelet, mode=MODE, level=params.level, axes=(-2, -1))
        # t = 0 keeps every coefficient (pywt's soft rule would divide 0 by 0 on an exactly-zero one)
        kept = coeffs if t == 0 else [coeffs[0]] + [tuple(pywt.threshold(d, t, mode=params.rule) for d in detail)
                                                   for detail in coeffs[1:]]
        rec = pywt.waverec2(kept, params.wavelet, mode=MODE, axes=(-2, -1))[..., :shape[1], :shape[2]]
        out[start:start + batch] = np.clip(rec, -1.0, 1.0).reshape(len(imgs), -1)
    return out


def grid_cells(wavelets: Sequence[str], levels: Sequence[int], rules: Sequence[str], multipliers: Sequence[float],
               image_size: int) -> list[WaveletParams]:
    """The tuning grid in a fixed order (wavelet, level, rule, multiplier as listed); levels deeper than a
    wavelet allows on ``image_size`` images are left out (pywt would warn of boundary effects)."""
    cells = [WaveletParams(w, int(lv), r, float(k)) for w, lv, r, k in itertools.product(wavelets, levels, rules, multipliers)
             if int(lv) <= max_level(w, image_size)]
    if not cells:
        raise ConfigError(f"the wavelet grid is empty on {image_size}x{image_size} images: every level listed is "
                          "deeper than its wavelet allows (lower hparams.levels)")
    return cells


def mse(a: np.ndarray, b: np.ndarray) -> float:
    """Mean squared error per pixel."""
    return float(np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2))


def tune(clean: np.ndarray, noisy: np.ndarray, image_shape: tuple[int, ...], cells: Sequence[WaveletParams],
         noise_std: float) -> tuple[WaveletParams, list[dict[str, Any]]]:
    """The cell whose denoising of ``noisy`` is closest (mean squared error) to ``clean``, row for row, and
    every cell's score. Ties go to the earlier cell; no randomness. ``clean`` are private records: the
    scores are private diagnostics, and the choice is what the paper releases by design (see the module
    docstring)."""
    clean = np.asarray(clean, dtype=np.float64)
    noisy = np.asarray(noisy, dtype=np.float64)
    if clean.shape != noisy.shape or clean.ndim != 2 or len(clean) == 0:
        raise DataError(f"tuning needs paired clean and privatized records of one shape, got {clean.shape} "
                        f"and {noisy.shape}")
    scores: list[dict[str, Any]] = []
    best: tuple[float, WaveletParams] | None = None
    for cell in cells:
        err = mse(denoise(noisy, image_shape, cell, noise_std), clean)
        scores.append({**cell.to_dict(), "mse": err})
        if math.isfinite(err) and (best is None or err < best[0]):
            best = (err, cell)
    if best is None:
        raise DataError("wavelet tuning: no grid cell gave a finite error")
    return best[1], scores
