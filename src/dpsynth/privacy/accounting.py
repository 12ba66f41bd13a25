"""Epsilon, step budgets and noise calibration on top of ``dp-accounting``.

The papers we reproduce quote epsilons computed with TensorFlow Privacy's *classic*
RDP accountant: RDP over a fixed list of orders, converted with
``eps = min_a rdp(a) + log(1/delta) / (a - 1)`` (Mironov 2017, Prop. 3). The library
now uses a tighter conversion (Canonne et al. 2020, Prop. 12) and also offers PLD
accounting. We report all of them side by side so a table can print the paper's number
and the real (tighter) one, and so nobody confuses the two.

RDP is linear in the number of steps, so everything here computes the RDP of ONE step
(cached) and scales it: 3.46 million steps cost the same as one.
"""

from __future__ import annotations

import logging
import math
from fractions import Fraction
from functools import lru_cache
from typing import Literal

import numpy as np
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.privacy_accountant import NeighboringRelation
from dp_accounting.rdp import rdp_privacy_accountant

from dpsynth.errors import PrivacyError
from dpsynth.privacy import rdp_numeric

_log = logging.getLogger(__name__)

# TensorFlow Privacy's classic ``compute_dp_sgd_privacy`` orders (the papers' numbers).
CLASSIC_ORDERS: tuple[float, ...] = tuple([1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)))

Sampling = Literal["poisson", "without_replacement"]
Conversion = Literal["classic", "modern", "pld"]
SAMPLINGS: tuple[str, ...] = ("poisson", "without_replacement")
CONVERSIONS: tuple[str, ...] = ("classic", "modern", "pld")

_MAX_STEPS_CAP = 10**13  # beyond this a "budget" is meaningless; stops an unbounded search


# --------------------------------------------------------------------------- validation


def check_sigma(sigma: float, name: str = "sigma") -> float:
    if not _finite(sigma) or sigma <= 0:
        raise PrivacyError(f"{name} must be a finite number > 0, got {sigma!r}")
    return float(sigma)


def check_q(q: float, name: str = "q") -> float:
    if not _finite(q) or not 0 < q <= 1:
        raise PrivacyError(f"{name} (sampling rate) must be in (0, 1], got {q!r}")
    return float(q)


def check_delta(delta: float, name: str = "delta") -> float:
    if not _finite(delta) or not 0 < delta < 1:
        raise PrivacyError(f"{name} must be in (0, 1), got {delta!r}")
    return float(delta)


def check_epsilon(eps: float, name: str = "epsilon") -> float:
    if not _finite(eps) or eps <= 0:
        raise PrivacyError(f"{name} must be a finite number > 0, got {eps!r}")
    return float(eps)


def check_steps(steps: int, name: str = "steps") -> int:
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 0:
        raise PrivacyError(f"{name} must be a non-negative integer, got {steps!r}")
    return int(steps)


def check_sampling(sampling: str) -> str:
    if sampling not in SAMPLINGS:
        raise PrivacyError(f"sampling must be one of {SAMPLINGS}, got {sampling!r}")
    return sampling


def check_conversion(conversion: str) -> str:
    if conversion not in CONVERSIONS:
        raise PrivacyError(f"conversion must be one of {CONVERSIONS}, got {conversion!r}")
    return conversion


def _finite(x: object) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool) and math.isfinite(x)


# --------------------------------------------------------------------------- events


def step_event(sigma: float, q: float, sampling: str = "poisson") -> dp_event.DpEvent:
    """The DpEvent of one step: a subsampled Gaussian of noise multiplier ``sigma``.

    Without-replacement sampling needs integer sizes; the library only uses their
    ratio, so ``q`` is turned into the fraction it (almost exactly) is.
    """
    gauss = dp_event.GaussianDpEvent(sigma)
    if q == 1.0:
        return gauss
    if sampling == "poisson":
        return dp_event.PoissonSampledDpEvent(q, gauss)
    frac = Fraction(q).limit_denominator(10**9)
    return dp_event.SampledWithoutReplacementDpEvent(frac.denominator, frac.numerator, gauss)


def neighboring_relation(sampling: str) -> NeighboringRelation:
    """Poisson sampling is analysed add/remove-one; fixed-size sampling replace-one."""
    return NeighboringRelation.REPLACE_ONE if sampling == "without_replacement" else NeighboringRelation.ADD_OR_REMOVE_ONE


class _NonConvergence(logging.Filter):
    """Catches dp-accounting's "failed to converge ... Excluding this order" warning (and only it)
    while one step's RDP is computed: the caller then recomputes that order numerically instead of
    letting it drop out silently. Every other log record passes through untouched."""

    def __init__(self) -> None:
        super().__init__()
        self.hits = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if "failed to converge" in str(record.msg) and "Excluding this order" in str(record.msg):
            self.hits += 1
            return False
        return True


@lru_cache(maxsize=4096)
def _one_step_rdp_cached(sigma: float, q: float, sampling: str, orders: tuple[float, ...]) -> np.ndarray:
    acc = rdp_privacy_accountant.RdpAccountant(list(orders), neighboring_relation(sampling))
    catcher = _NonConvergence()
    absl_logger = logging.getLogger("absl")
    absl_logger.addFilter(catcher)
    try:
        acc.compose(step_event(sigma, q, sampling))
    finally:
        absl_logger.removeFilter(catcher)
    out = np.array(acc.rdp, dtype=np.float64)
    lost = [i for i, v in enumerate(out) if not math.isfinite(v)]
    if lost and sampling == "poisson" and q < 1.0:
        # The library's series did not converge at these orders (small sigma, alpha near 1) and it
        # would drop them; integrate the same quantity numerically instead (rdp_numeric).
        for i in lost:
            out[i] = rdp_numeric.rdp_poisson_gaussian(q, sigma, float(orders[i]))
    still = [float(orders[i]) for i, v in enumerate(out) if not math.isfinite(v)]
    if still or (catcher.hits and not lost):
        _log.warning("RDP at sigma=%g, q=%g (%s): orders %s could not be computed and are excluded "
                     "(epsilon stays an upper bound, possibly a loose one)", sigma, q, sampling, still)
    out.setflags(write=False)
    return out


def one_step_rdp(
    sigma: float, q: float, sampling: str = "poisson", orders: tuple[float, ...] = CLASSIC_ORDERS
) -> np.ndarray:
    """RDP of one step at each order (read-only array; cached)."""
    return _one_step_rdp_cached(check_sigma(sigma), check_q(q), check_sampling(sampling), tuple(orders))


# --------------------------------------------------------------------------- conversions


def classic_epsilon(orders: np.ndarray | tuple[float, ...], rdp: np.ndarray, delta: float) -> tuple[float, float]:
    """TF Privacy's classic RDP->DP: ``min_a rdp(a) + log(1/delta)/(a-1)``; returns (eps, order)."""
    a = np.asarray(orders, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        eps = np.asarray(rdp, dtype=np.float64) + math.log(1.0 / delta) / (a - 1.0)
    eps = np.where(np.isnan(eps), np.inf, eps)
    i = int(np.argmin(eps))
    return max(0.0, float(eps[i])), float(a[i])


def modern_epsilon(orders: np.ndarray | tuple[float, ...], rdp: np.ndarray, delta: float) -> tuple[float, float]:
    """The library's tighter conversion (what ``RdpAccountant.get_epsilon`` returns)."""
    eps, order = rdp_privacy_accountant.compute_epsilon(list(orders), list(rdp), delta)
    return float(eps), float(order)


def pld_epsilon(sigma: float, q: float, steps: int, delta: float, sampling: str = "poisson") -> float:
    """Privacy-loss-distribution accounting (numerically tight up to discretisation)."""
    if steps == 0:
        return 0.0
    acc = pld_privacy_accountant.PLDAccountant(neighboring_relation(sampling))
    acc.compose(dp_event.SelfComposedDpEvent(step_event(sigma, q, sampling), steps))
    return float(acc.get_epsilon(delta))


def _epsilon_for(conversion: str, sigma: float, q: float, steps: int, delta: float, sampling: str) -> float:
    if conversion == "pld":
        return pld_epsilon(sigma, q, steps, delta, sampling)
    rdp = one_step_rdp(sigma, q, sampling) * steps
    conv = classic_epsilon if conversion == "classic" else modern_epsilon
    return conv(CLASSIC_ORDERS, rdp, delta)[0]


# --------------------------------------------------------------------------- public API


def epsilon(
    sigma: float, q: float, steps: int, delta: float, *, sampling: str = "poisson", pld: bool = False
) -> dict[str, float]:
    """Epsilon after ``steps`` subsampled-Gaussian steps, under every convention.

    Keys: ``rdp_classic`` (the papers'), ``rdp_modern`` (library), their optimal
    orders, and ``pld`` when asked for.
    """
    sigma, q, delta = check_sigma(sigma), check_q(q), check_delta(delta)
    steps, sampling = check_steps(steps), check_sampling(sampling)
    rdp = one_step_rdp(sigma, q, sampling) * steps
    c_eps, c_order = classic_epsilon(CLASSIC_ORDERS, rdp, delta)
    m_eps, m_order = modern_epsilon(CLASSIC_ORDERS, rdp, delta)
    out = {"rdp_classic": c_eps, "rdp_classic_order": c_order, "rdp_modern": m_eps, "rdp_modern_order": m_order}
    if pld:
        out["pld"] = pld_epsilon(sigma, q, steps, delta, sampling)
    return out


def max_steps(
    sigma: float,
    q: float,
    delta: float,
    target_eps: float,
    *,
    conversion: str = "classic",
    sampling: str = "poisson",
) -> int:
    """Largest number of steps whose epsilon stays <= ``target_eps`` (0 if even one step exceeds it).

    Epsilon is non-decreasing in the number of steps, so a doubling search followed by
    bisection finds the exact integer boundary.
    """
    sigma, q, delta = check_sigma(sigma), check_q(q), check_delta(delta)
    target_eps, conversion, sampling = check_epsilon(target_eps, "target epsilon"), check_conversion(conversion), check_sampling(sampling)

    def ok(t: int) -> bool:
        return _epsilon_for(conversion, sigma, q, t, delta, sampling) <= target_eps

    if not ok(1):
        return 0
    lo, hi = 1, 2
    while ok(hi):
        lo, hi = hi, hi * 2
        if hi > _MAX_STEPS_CAP:
            return _MAX_STEPS_CAP
    while hi - lo > 1:  # invariant: ok(lo), not ok(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def calibrate_sigma(
    q: float,
    steps: int,
    delta: float,
    target_eps: float,
    *,
    conversion: str = "classic",
    sampling: str = "poisson",
    rel_tol: float = 1e-4,
) -> float:
    """Smallest noise multiplier (to ``rel_tol``) whose epsilon after ``steps`` is <= target.

    A bracket [lo, hi] on sigma with ``not ok(lo)`` and ``ok(hi)`` is narrowed until
    hi / lo <= 1 + rel_tol; the returned value is its upper end, so it always meets the target
    and rounding never makes a run exceed its budget. Why not plain bisection: each epsilon is an
    RDP evaluation at 151 orders (up to ~0.2 s at small sigma), bisection needs 17 to 20 of them,
    and every private train job calibrates. log(epsilon) is smooth and decreasing in log(sigma),
    so the next guess is the secant through the two evaluated points nearest the target; once a
    point is within 1 % of it, the round probes just above and just below the guess, which closes
    the bracket when the guess is within rel_tol / 4 (6 to 14 evaluations on the cases of
    tests/test_privacy_accounting.py). A guess outside the bracket, and every round after the
    twelfth, bisects, so the search ends like bisection would; only the bracket decides the result.
    """
    q, delta = check_q(q), check_delta(delta)
    steps, target_eps = check_steps(steps), check_epsilon(target_eps, "target epsilon")
    conversion, sampling = check_conversion(conversion), check_sampling(sampling)
    if steps == 0:
        raise PrivacyError("steps must be >= 1 to calibrate sigma")

    def eps_at(s: float) -> float:
        return _epsilon_for(conversion, s, q, steps, delta, sampling)

    lo, hi = 1e-2, 1.0
    e_hi = eps_at(hi)
    while not e_hi <= target_eps:
        lo, hi = hi, hi * 2
        if hi > 1e6:
            raise PrivacyError(f"no sigma <= 1e6 reaches epsilon {target_eps} in {steps} steps at q={q}")
        e_hi = eps_at(hi)
    e_lo = eps_at(lo)
    while e_lo <= target_eps:
        hi, e_hi, lo = lo, e_lo, lo / 2
        if lo < 1e-4:
            return hi
        e_lo = eps_at(lo)
    seen = [(lo, e_lo), (hi, e_hi)]  # every (sigma, epsilon) evaluated; the guesses come from them
    step = math.log1p(rel_tol) / 4  # probes at guess * exp(+-step): a closed bracket is (1 + rel_tol)^(1/2) wide
    rounds = 0
    while hi / lo > 1 + rel_tol:  # invariant: eps_at(hi) <= target < eps_at(lo)
        rounds += 1
        (a, e_a), (b, e_b) = sorted(seen, key=lambda p: _log_miss(p[1], target_eps))[:2]
        guess = _secant_log(a, e_a, b, e_b, target_eps)
        if rounds > _SECANT_ROUNDS or not lo < guess < hi:
            probes = (math.sqrt(lo * hi),)  # bisection: the search is never worse than it
        elif _log_miss(e_a, target_eps) < 0.01:  # close: the guess is too; probe both sides of it
            probes = (guess * math.exp(step), guess * math.exp(-step))
        else:
            probes = (guess,)
        for s in probes:
            if lo < s < hi:
                e = eps_at(s)
                seen.append((s, e))
                if e <= target_eps:
                    hi = s
                else:
                    lo = s
    return hi


_SECANT_ROUNDS = 12  # then plain bisection (a safeguard; the cases measured close in 3 to 6 rounds)


def _log_miss(eps: float, target: float) -> float:
    """How far an epsilon is from the target, on a log scale (infinite for 0 or infinity)."""
    return abs(math.log(eps / target)) if 0 < eps < math.inf else math.inf


def _secant_log(a: float, e_a: float, b: float, e_b: float, target: float) -> float:
    """Where the line through (log a, log e_a) and (log b, log e_b) reaches log target; NaN when
    that line is undefined (an epsilon of 0 or infinity, or a flat line)."""
    if not (0 < e_a < math.inf and 0 < e_b < math.inf and e_a != e_b and target > 0):
        return math.nan
    x_a, x_b = math.log(a), math.log(b)
    y_a, y_b, y = math.log(e_a), math.log(e_b), math.log(target)
    return math.exp(x_a + (y - y_a) * (x_b - x_a) / (y_b - y_a))


# --------------------------------------------------------------------------- one Gaussian release (DP-MERF)


def gaussian_release_epsilon(sigma: float, delta: float, *, pld: bool = False) -> dict[str, float]:
    """Epsilon of ONE Gaussian mechanism of multiplier ``sigma`` (noise std / L2 sensitivity) over the
    whole dataset (DP-MERF's single release): the conventions every run reports, as one
    subsampled-Gaussian step at q = 1 (which is the plain Gaussian mechanism), plus
    ``analytic_gaussian``, the exact epsilon of Balle & Wang ("Improving the Gaussian Mechanism for
    Differential Privacy", ICML 2018, arXiv:1805.06530) -- the tightest claim for one release."""
    out = epsilon(sigma, 1.0, 1, delta, pld=pld)
    out["analytic_gaussian"] = gaussian_epsilon_exact(1.0 / check_sigma(sigma), delta)
    return out


# --------------------------------------------------------------------------- one step, exact


def gaussian_epsilon_exact(mu: float, delta: float) -> float:
    """Tight epsilon of ONE Gaussian mechanism with sensitivity/std ratio ``mu`` (Balle & Wang 2018).

    delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2); solved for eps by
    bisection. Used by the audit: the strongest (smallest) claim an accountant could make.
    """
    from scipy.stats import norm

    check_delta(delta)
    if not _finite(mu) or mu <= 0:
        raise PrivacyError(f"mu must be > 0, got {mu!r}")

    def d(eps: float) -> float:
        return float(norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2))

    if d(0.0) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while d(hi) > delta:
        lo, hi = hi, hi * 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if d(mid) > delta else (lo, mid)
        if hi - lo < 1e-12:
            break
    return hi
