"""Local (per-record) privacy mechanisms of Reshetova et al. (arXiv:2306.09547): the privatize stage's core.

Each record is projected onto a ball of radius R (bounding what one record can say),
then noised once. The identity on a ball of radius R has sensitivity equal to the
ball's DIAMETER 2R (two records can sit at opposite ends); the paper uses R. We
calibrate the noise with 2R (sound) and report, beside it, the epsilon the paper's
convention would claim for the very same noise.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import scipy.fft

from dpsynth.errors import PrivacyError
from dpsynth.privacy.accounting import check_epsilon


@dataclass(frozen=True)
class LocalReport:
    """What was done to the records and what it guarantees, under both conventions."""

    mechanism: str  # "laplace" | "gaussian"
    radius: float
    epsilon: float  # sound: sensitivity = 2R
    delta: float  # 0 for Laplace
    noise_scale: float  # Laplace b, or Gaussian std
    sensitivity: float  # 2R
    epsilon_paper_convention: float  # what sensitivity = R would claim for this noise
    dct: bool
    dct_quantile: float | None
    num_records: int
    dim: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- projections


def _as_2d(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise PrivacyError(f"records must be a 2-D array (N, d), got shape {x.shape}")
    if not np.isfinite(x).all():
        raise PrivacyError("records contain NaN or Inf; refusing to privatize them")
    return x


def _check_radius(radius: float) -> float:
    if not isinstance(radius, (int, float)) or isinstance(radius, bool) or not math.isfinite(radius) or radius <= 0:
        raise PrivacyError(f"ball radius must be a finite number > 0, got {radius!r}")
    return float(radius)


def project_l2_ball(x: np.ndarray, radius: float) -> np.ndarray:
    """Euclidean projection of each row onto the l2 ball of the given radius."""
    x, radius = _as_2d(x), _check_radius(radius)
    norms = np.linalg.norm(x, axis=1)
    scale = np.where(norms > radius, radius / np.maximum(norms, 1e-300), 1.0)
    return x * scale[:, None]


def project_l1_ball(x: np.ndarray, radius: float) -> np.ndarray:
    """Exact Euclidean projection of each row onto the l1 ball (Duchi et al. 2008, sort-based).

    For a row outside the ball: soft-threshold at theta, where theta is found from the
    sorted magnitudes so that the result has l1 norm exactly ``radius``.
    """
    x, radius = _as_2d(x), _check_radius(radius)
    a = np.abs(x)
    outside = a.sum(axis=1) > radius
    out = x.copy()
    if not outside.any():
        return out
    u = -np.sort(-a[outside], axis=1)  # descending
    css = np.cumsum(u, axis=1)
    j = np.arange(1, u.shape[1] + 1)
    cond = u - (css - radius) / j > 0
    rho = cond.shape[1] - 1 - np.argmax(cond[:, ::-1], axis=1)  # last index where cond holds
    theta = (css[np.arange(len(rho)), rho] - radius) / (rho + 1)
    out[outside] = np.sign(x[outside]) * np.maximum(a[outside] - theta[:, None], 0.0)
    return out


# --------------------------------------------------------------------------- noise scales


def _check_local_delta(delta: float) -> float:
    if not isinstance(delta, (int, float)) or isinstance(delta, bool) or not (0 < delta < 0.5):
        raise PrivacyError(f"delta for the Gaussian mechanism (equation 5) must be in (0, 0.5), got {delta!r}")
    return float(delta)


def _eq5_c(delta: float) -> float:
    return math.sqrt(math.log(2.0 / (math.sqrt(16.0 * delta + 1.0) - 1.0)))


def gaussian_sigma_eq5(epsilon: float, delta: float, sensitivity: float) -> float:
    """Reshetova et al. equation (5): ``sigma = (c + sqrt(c^2 + eps)) / (eps sqrt 2) * Delta``.

    ``c^2 = ln(2 / (sqrt(16 delta + 1) - 1))``; valid for delta in (0, 0.5).
    """
    epsilon, delta = check_epsilon(epsilon), _check_local_delta(delta)
    sensitivity = _check_radius(sensitivity)
    c = _eq5_c(delta)
    return (c + math.sqrt(c * c + epsilon)) / (epsilon * math.sqrt(2.0)) * sensitivity


def gaussian_epsilon_eq5(sigma: float, delta: float, sensitivity: float) -> float:
    """Inverse of equation (5): the epsilon it certifies for noise ``sigma``.

    With k = sigma sqrt(2) / Delta, (5) becomes k eps - c = sqrt(c^2 + eps), whose
    positive root is eps = (2 k c + 1) / k^2.
    """
    sigma, delta = _check_radius(sigma), _check_local_delta(delta)
    sensitivity = _check_radius(sensitivity)
    c = _eq5_c(delta)
    k = sigma * math.sqrt(2.0) / sensitivity
    return (2.0 * k * c + 1.0) / (k * k)


# --------------------------------------------------------------------------- DCT


def dct_records(x: np.ndarray, image_shape: tuple[int, ...], quantile: float | None = 0.8) -> np.ndarray:
    """Orthonormal DCT of each record viewed as an image; optionally zero small coefficients.

    Per record, coefficients whose magnitude is below that record's ``quantile`` of
    magnitudes are zeroed (Reshetova et al. keep the largest 20% on MNIST). The generator's
    output must go through the same transform before the loss.
    """
    x = _as_2d(x)
    if math.prod(image_shape) != x.shape[1]:
        raise PrivacyError(f"image_shape {image_shape} does not match record length {x.shape[1]}")
    axes = tuple(range(1, len(image_shape) + 1))
    coef = scipy.fft.dctn(x.reshape((x.shape[0], *image_shape)), axes=axes, norm="ortho").reshape(x.shape)
    if quantile is not None:
        if not 0.0 <= quantile < 1.0:
            raise PrivacyError(f"dct quantile must be in [0, 1), got {quantile!r}")
        mag = np.abs(coef)
        thr = np.quantile(mag, quantile, axis=1, keepdims=True)
        coef = np.where(mag < thr, 0.0, coef)
    return coef


def idct_records(coef: np.ndarray, image_shape: tuple[int, ...]) -> np.ndarray:
    """Inverse of :func:`dct_records` (without the zeroing, which is not invertible)."""
    coef = _as_2d(coef)
    axes = tuple(range(1, len(image_shape) + 1))
    return scipy.fft.idctn(coef.reshape((coef.shape[0], *image_shape)), axes=axes, norm="ortho").reshape(coef.shape)


# --------------------------------------------------------------------------- mechanisms


def _rng(seed: int | np.random.Generator) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        return np.random.default_rng(int(seed))
    raise PrivacyError(f"an explicit integer seed or numpy Generator is required, got {seed!r}")


def laplace_mechanism(
    x: np.ndarray,
    radius: float,
    epsilon: float,
    rng: int | np.random.Generator,
    *,
    dct_image_shape: tuple[int, ...] | None = None,
    dct_quantile: float | None = 0.8,
) -> tuple[np.ndarray, LocalReport]:
    """epsilon-LDP: (optional DCT) -> l1-ball projection -> Laplace noise of scale 2R/epsilon.

    Returns privatized records in the transformed domain (DCT coefficients if asked).
    """
    epsilon, radius = check_epsilon(epsilon), _check_radius(radius)
    x = _as_2d(x)
    if dct_image_shape is not None:
        x = dct_records(x, dct_image_shape, dct_quantile)
    proj = project_l1_ball(x, radius)
    b = 2.0 * radius / epsilon
    y = proj + _rng(rng).laplace(0.0, b, size=proj.shape)
    report = LocalReport(
        mechanism="laplace",
        radius=radius,
        epsilon=epsilon,
        delta=0.0,
        noise_scale=b,
        sensitivity=2.0 * radius,
        epsilon_paper_convention=radius / b,
        dct=dct_image_shape is not None,
        dct_quantile=dct_quantile if dct_image_shape is not None else None,
        num_records=x.shape[0],
        dim=x.shape[1],
    )
    return y, report


def gaussian_mechanism(
    x: np.ndarray, radius: float, epsilon: float, delta: float, rng: int | np.random.Generator
) -> tuple[np.ndarray, LocalReport]:
    """(epsilon, delta)-LDP: l2-ball projection -> N(0, s^2), s from equation (5) with Delta = 2R."""
    epsilon, radius, delta = check_epsilon(epsilon), _check_radius(radius), _check_local_delta(delta)
    x = _as_2d(x)
    proj = project_l2_ball(x, radius)
    s = gaussian_sigma_eq5(epsilon, delta, 2.0 * radius)
    y = proj + _rng(rng).normal(0.0, s, size=proj.shape)
    report = LocalReport(
        mechanism="gaussian",
        radius=radius,
        epsilon=epsilon,
        delta=delta,
        noise_scale=s,
        sensitivity=2.0 * radius,
        epsilon_paper_convention=gaussian_epsilon_eq5(s, delta, radius),
        dct=False,
        dct_quantile=None,
        num_records=x.shape[0],
        dim=x.shape[1],
    )
    return y, report
