"""RDP of the Poisson-subsampled Gaussian by direct numerical integration.

dp-accounting computes fractional orders with a series (Mironov, Talwar, Zhang 2019, Sec. 3.3)
that stops after 1,000 terms; at a small noise multiplier (GS-WGAN's per-step sigma / sqrt(B)
is ~0.27 for the loose row) it does not converge for orders just above 1, and the library then
*drops* those orders. Dropping is conservative but can be wildly wrong: the loose GS-WGAN row
read epsilon 7,005 where the orders it lost give 1,876. This module computes the same quantity
another way, so the accountant can fill the orders the library lost instead of ignoring them.

For the add/remove-one relation the RDP of order ``alpha`` of one step is
``log(A_alpha) / (alpha - 1)`` with

    A_alpha = E_{z ~ N(0, s^2)} [ ((1 - q) + q exp((2z - 1) / (2 s^2)))^alpha ]

(Mironov et al. 2019, Theorem 4: this direction dominates). The integrand is smooth and
decays like a Gaussian on both sides, so the trapezoid rule on a uniform grid converges
exponentially fast; we integrate in log space (no overflow at large alpha / small s).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import logsumexp

from dpsynth.errors import PrivacyError

#: Grid points and half-width (in units of s) of the integration window. With these the
#: result matches a 40-digit adaptive quadrature (mpmath) to ~1e-11 relative on the orders
#: the accountant uses (tests/test_privacy_accounting.py).
GRID_POINTS = 40_001
WINDOW_SIGMAS = 40.0


def log_a_poisson_gaussian(q: float, sigma: float, alpha: float) -> float:
    """``log A_alpha`` of the Poisson-subsampled Gaussian (sensitivity 1, noise ``sigma``)."""
    if not (0.0 < q < 1.0) or not (sigma > 0.0) or not (alpha > 1.0):
        raise PrivacyError(f"log_a_poisson_gaussian needs 0 < q < 1, sigma > 0, alpha > 1; got {q}, {sigma}, {alpha}")
    # The integrand has its mass near z = 0 (the (1 - q) part) and near z = alpha (the q^alpha part).
    lo = min(0.0, alpha) - WINDOW_SIGMAS * sigma - 1.0
    hi = max(1.0, alpha) + WINDOW_SIGMAS * sigma + 1.0
    z = np.linspace(lo, hi, GRID_POINTS)
    log_density = -z * z / (2.0 * sigma * sigma) - math.log(math.sqrt(2.0 * math.pi) * sigma)
    log_ratio = np.logaddexp(math.log1p(-q), math.log(q) + (2.0 * z - 1.0) / (2.0 * sigma * sigma))
    return float(logsumexp(log_density + alpha * log_ratio) + math.log(z[1] - z[0]))


def rdp_poisson_gaussian(q: float, sigma: float, alpha: float) -> float:
    """RDP of order ``alpha`` of one Poisson-subsampled Gaussian step (add/remove-one)."""
    value = log_a_poisson_gaussian(q, sigma, alpha) / (alpha - 1.0)
    if not math.isfinite(value):
        raise PrivacyError(f"numerical RDP is not finite at q={q}, sigma={sigma}, alpha={alpha}")
    return max(0.0, value)
