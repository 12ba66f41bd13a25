"""Accountants: the papers' numbers, monotone searches, GS-WGAN both ways, bad inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpsynth.errors import PrivacyError
from dpsynth.privacy import accounting as acc
from dpsynth.privacy import gswgan_accounting as gs

MNIST_Q = 50 / 60000


def test_classic_orders_are_tf_privacy_classic() -> None:
    assert acc.CLASSIC_ORDERS[0] == pytest.approx(1.1) and acc.CLASSIC_ORDERS[98] == pytest.approx(10.9)
    assert acc.CLASSIC_ORDERS[99:] == tuple(range(12, 64))


def test_dp_sinkhorn_mnist_steps_classic_about_3_46_million() -> None:
    classic = acc.max_steps(1.1, MNIST_Q, 1e-5, 10.0)
    modern = acc.max_steps(1.1, MNIST_Q, 1e-5, 10.0, conversion="modern")
    # ICLR submission App. D.4: "about 3.46 million steps with the classic conversion"; 1% tolerance.
    assert 3.42e6 <= classic <= 3.50e6
    assert modern > classic  # the modern conversion is tighter
    # the boundary is exact: one more step crosses the target
    assert acc.epsilon(1.1, MNIST_Q, classic, 1e-5)["rdp_classic"] <= 10.0
    assert acc.epsilon(1.1, MNIST_Q, classic + 1, 1e-5)["rdp_classic"] > 10.0


def test_classic_conversion_matches_formula_and_is_looser_than_modern() -> None:
    rdp = acc.one_step_rdp(1.1, MNIST_Q) * 1000
    a = np.array(acc.CLASSIC_ORDERS)
    by_hand = float(np.min(rdp + math.log(1e5) / (a - 1)))
    eps = acc.epsilon(1.1, MNIST_Q, 1000, 1e-5)
    assert eps["rdp_classic"] == pytest.approx(by_hand, rel=1e-12)
    assert eps["rdp_modern"] < eps["rdp_classic"]


def test_rdp_linear_in_steps_and_epsilon_monotone() -> None:
    e = [acc.epsilon(1.1, MNIST_Q, t, 1e-5)["rdp_classic"] for t in (10, 1000, 100000, 3_000_000)]
    assert all(x < y for x, y in zip(e, e[1:]))
    assert acc.epsilon(1.1, MNIST_Q, 0, 1e-5)["rdp_modern"] == 0.0


def test_pld_is_tightest() -> None:
    eps = acc.epsilon(1.1, MNIST_Q, 100_000, 1e-5, pld=True)
    assert 0 < eps["pld"] < eps["rdp_modern"] < eps["rdp_classic"]


def test_calibrate_sigma_inverts_max_steps() -> None:
    sigma = acc.calibrate_sigma(MNIST_Q, 3_464_000, 1e-5, 10.0)
    assert sigma == pytest.approx(1.1, rel=2e-3)
    assert acc.epsilon(sigma, MNIST_Q, 3_464_000, 1e-5)["rdp_classic"] <= 10.0  # never over budget


def test_celeba_steps_match_design() -> None:
    # ICLR submission App. D.4 (CelebA): epsilon 10 after ~0.46 M steps, 1.1 M steps is epsilon ~16 (5% tolerance).
    q = 200 / 162770
    assert acc.max_steps(0.8, q, 1e-6, 10.0) == pytest.approx(0.46e6, rel=0.05)
    assert acc.epsilon(0.8, q, 1_100_000, 1e-6)["rdp_classic"] == pytest.approx(16, rel=0.05)


def test_without_replacement_is_replace_one_and_costs_more() -> None:
    wor = acc.epsilon(1.1, MNIST_Q, 10000, 1e-5, sampling="without_replacement")["rdp_classic"]
    poi = acc.epsilon(1.1, MNIST_Q, 10000, 1e-5)["rdp_classic"]
    assert wor > poi > 0  # replace-one neighbours: sensitivity doubles in effect
    assert acc.neighboring_relation("without_replacement").name == "REPLACE_ONE"


def test_gswgan_published_settings_both_ways() -> None:
    eps = gs.gswgan_epsilon(1.07, 1000, 32, 20000, 1e-5)
    # docs/deviations.md row 8: as published ~9.2-10; sound ~366 (hundreds)
    assert 9.0 <= eps["as_published"]["rdp_modern"] <= eps["as_published"]["rdp_classic"] <= 10.5
    assert 300 <= eps["sound"]["rdp_modern"] <= 400
    assert eps["sound"]["rdp_classic"] > eps["as_published"]["rdp_classic"]


def test_gswgan_sound_sigma_meets_target() -> None:
    sigma = gs.gswgan_sound_sigma(1000, 32, 20000, 1e-5, 10.0)
    assert sigma > 1.07
    assert gs.gswgan_epsilon(sigma, 1000, 32, 20000, 1e-5)["sound"]["rdp_classic"] <= 10.0
    assert gs.gswgan_epsilon(sigma * 0.99, 1000, 32, 20000, 1e-5)["sound"]["rdp_classic"] > 10.0
    assert gs.gswgan_sound_max_steps(sigma, 1000, 32, 1e-5, 10.0) >= 20000


def test_gaussian_exact_matches_known_value() -> None:
    # mu = 1: the analytic Gaussian mechanism gives delta(eps=1) = Phi(-0.5) - e Phi(-1.5)
    from scipy.stats import norm

    d1 = norm.cdf(-0.5) - math.e * norm.cdf(-1.5)
    assert acc.gaussian_epsilon_exact(1.0, d1) == pytest.approx(1.0, abs=1e-8)


@pytest.mark.parametrize(
    "call",
    [
        lambda: acc.epsilon(0.0, 0.01, 10, 1e-5),
        lambda: acc.epsilon(-1.0, 0.01, 10, 1e-5),
        lambda: acc.epsilon(float("nan"), 0.01, 10, 1e-5),
        lambda: acc.epsilon(1.0, 0.0, 10, 1e-5),
        lambda: acc.epsilon(1.0, 1.5, 10, 1e-5),
        lambda: acc.epsilon(1.0, 0.01, 10, 0.0),
        lambda: acc.epsilon(1.0, 0.01, 10, 1.0),
        lambda: acc.epsilon(1.0, 0.01, -1, 1e-5),
        lambda: acc.max_steps(1.0, 0.01, 1e-5, 0.0),
        lambda: acc.max_steps(1.0, 0.01, 1e-5, -3.0),
        lambda: acc.max_steps(1.0, 0.01, 1e-5, 1.0, conversion="bogus"),
        lambda: acc.calibrate_sigma(0.01, 100, 1e-5, 0.0),
        lambda: acc.epsilon(1.0, 0.01, 10, 1e-5, sampling="shuffle"),
        lambda: gs.gswgan_epsilon(1.0, 0, 32, 10, 1e-5),
    ],
)
def test_bad_inputs_raise_privacy_error(call) -> None:
    with pytest.raises(PrivacyError):
        call()


# --------------------------------------------------------------------------- orders the library drops


def _independent_log_a(q: float, sigma: float, alpha: float) -> float:
    """log A_alpha by 40-digit adaptive quadrature (mpmath): shares no code with the accountant
    (dp-accounting's series, our trapezoid rule) -- the independent computation of issue #15."""
    import mpmath as mp

    mp.mp.dps = 40
    q, sigma, alpha = mp.mpf(q), mp.mpf(sigma), mp.mpf(alpha)

    def f(z):  # type: ignore[no-untyped-def]
        return mp.npdf(z, 0, sigma) * ((1 - q) + q * mp.exp((2 * z - 1) / (2 * sigma**2))) ** alpha

    return float(mp.log(mp.quad(f, [-mp.inf, 0, mp.mpf(1) / 2, alpha, mp.inf])))


LOOSE = {"sigma": 1.551, "shards": 10, "batch": 32, "steps": 3000}  # the loose GS-WGAN row of 2026-11


@pytest.mark.slow
def test_loose_gswgan_epsilon_matches_independent_computation_within_1_percent() -> None:
    # dp-accounting's fractional-order series does not converge at sigma/sqrt(B) = 0.274 for orders
    # 1.1-1.3 and dropped them: the row read 7,005 instead of ~1,876. Independent value: the same
    # classic conversion over the same orders, with every order's RDP from mpmath quadrature.
    # The minimum over every order, without evaluating every order: Renyi divergence is nondecreasing in
    # the order (van Erven and Harremoes 2014, Thm. 3), so at orders >= a the bound is at least
    # steps x RDP(a); once that exceeds the best bound so far no later order can win, and the scan stops
    # (the quadrature at all ~150 orders took 110 s).
    eff, q = LOOSE["sigma"] / math.sqrt(LOOSE["batch"]), 1.0 / LOOSE["shards"]
    orders = list(acc.CLASSIC_ORDERS)
    assert orders == sorted(orders)
    independent, scanned = math.inf, 0
    for a in orders:
        composed = _independent_log_a(q, eff, a) / (a - 1) * LOOSE["steps"]
        scanned += 1
        if composed >= independent:
            break
        independent = min(independent, composed + math.log(1e5) / (a - 1))
    assert scanned < len(orders)  # (the pruning is sound only when it actually stopped on the rule above)
    ours = gs.gswgan_epsilon(LOOSE["sigma"], LOOSE["shards"], LOOSE["batch"], LOOSE["steps"], 1e-5)["sound"]
    assert 1850 < independent < 1900
    assert ours["rdp_classic"] == pytest.approx(independent, rel=0.01)
    assert ours["rdp_classic_order"] == pytest.approx(1.1)  # the order the library had dropped


def test_numeric_rdp_agrees_with_library_and_mpmath_where_the_series_converges() -> None:
    # The library's fractional-order series is an upper bound (up to 1.5 % above the exact value at
    # tiny q, e.g. 4.018e-6 vs 3.961e-6); integer orders are exact. Our quadrature must match mpmath
    # to 1e-6 relative (or 1e-11 absolute: the values go down to ~1e-7) and never exceed the library.
    from dpsynth.privacy.rdp_numeric import rdp_poisson_gaussian

    for sigma, q in ((1.1, MNIST_Q), (0.8, 200 / 162770), (1.0, 0.1), (0.3, 0.1)):
        lib = acc.one_step_rdp(sigma, q)
        for i in (3, 9, 50, 120, 149):  # orders 1.4, 2.0, 6.1, 33, 62
            a = acc.CLASSIC_ORDERS[i]
            ours = rdp_poisson_gaussian(q, sigma, a)
            assert ours == pytest.approx(_independent_log_a(q, sigma, a) / (a - 1), rel=1e-6, abs=1e-11)
            assert ours <= lib[i] * (1 + 1e-6) + 1e-11
            assert ours == pytest.approx(lib[i], rel=0.02)


def test_no_order_is_dropped_and_other_warnings_still_pass(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    assert logging.getLogger("absl").getEffectiveLevel() <= logging.WARNING  # nothing silenced globally
    acc._one_step_rdp_cached.cache_clear()
    rdp = acc.one_step_rdp(0.2, 0.1)
    assert np.all(np.isfinite(rdp))
    # the non-convergence message was handled (orders recomputed), not shown and not lost
    assert not [r for r in caplog.records if "failed to converge" in r.getMessage()]
    with caplog.at_level(logging.WARNING, logger="absl"):
        logging.getLogger("absl").warning("some other library warning")
    assert any("some other library warning" in r.getMessage() for r in caplog.records)


CALIBRATION_CASES = [  # (q, steps, delta, target epsilon): the papers' MNIST run, the smoke and quick runs, DP-MERF
    (MNIST_Q, 3_464_988, 1e-5, 10.0), (64 / 2000, 20, 1e-5, 10.0), (1.0, 1, 1e-5, 10.0), (0.01, 100, 1e-5, 1.0),
    (0.001, 1000, 1e-6, 0.5), (64 / 1437, 3, 1e-5, 10.0), (0.5, 5, 1e-5, 50.0), (1e-3, 20000, 1e-5, 10.0),
    (1e-4, 10, 1e-5, 100.0), (0.02, 500, 1e-5, 2.0)]


@pytest.mark.parametrize("conversion,sampling,cases", [
    ("classic", "poisson", CALIBRATION_CASES), ("modern", "poisson", CALIBRATION_CASES),
    # replace-one RDP costs ~10x more per evaluation: two cases (the smoke run's, and the one that took most evaluations)
    ("modern", "without_replacement", CALIBRATION_CASES[1:2] + CALIBRATION_CASES[4:5])],
    ids=["classic", "modern", "modern-replace-one"])
def test_calibrated_sigma_meets_the_target_and_is_the_smallest_to_rel_tol(conversion: str, sampling: str,
                                                                           cases: list) -> None:
    """The secant search's contract, case by case: its sigma meets the target, and sigma / (1 + rel_tol)
    does not (so it is the smallest to rel_tol). It also evaluates epsilon at most 15 times (measured:
    6 to 11 classic, 6 to 14 modern), where bisection took 17 to 20: each is an RDP evaluation at
    151 orders, in every private train job."""
    for q, steps, delta, target in cases:
        acc._one_step_rdp_cached.cache_clear()
        sigma = acc.calibrate_sigma(q, steps, delta, target, conversion=conversion, sampling=sampling)
        evaluations = acc._one_step_rdp_cached.cache_info().misses
        assert acc._epsilon_for(conversion, sigma, q, steps, delta, sampling) <= target, (q, steps, target)
        assert acc._epsilon_for(conversion, sigma / (1 + 1e-4), q, steps, delta, sampling) > target, (q, steps, target)
        assert evaluations <= 15, (q, steps, target, evaluations)
