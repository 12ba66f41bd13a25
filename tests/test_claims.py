"""The one claim checker (``dpsynth.report.claims``): a difference inside its noise is undecided, never
"holds"; outside it, holds or does not hold by its side; the interval is Welch's, checked against scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpsynth.report.claims import (
    DOES_NOT_HOLD,
    HOLDS,
    UNDECIDED,
    Estimate,
    all_of,
    claim_note,
    compare,
    estimate_of_records,
    exact,
    fit_line,
    lowest,
)


def test_a_gap_inside_the_noise_is_undecided_and_outside_it_decided() -> None:
    noisy_a, noisy_b = Estimate.of_runs([12.20, 12.26, 12.23]), Estimate.of_runs([12.21, 12.25, 12.24])
    assert compare(noisy_a, noisy_b, "less").verdict == UNDECIDED  # 0.003 apart, spread 0.03
    far_a, far_b = Estimate.of_runs([11.0, 11.1, 10.9]), Estimate.of_runs([12.0, 12.1, 11.9])
    assert compare(far_a, far_b, "less").verdict == HOLDS
    assert compare(far_b, far_a, "less").verdict == DOES_NOT_HOLD
    assert compare(far_a, far_b, "greater").verdict == DOES_NOT_HOLD


def test_one_value_without_a_noise_estimate_decides_nothing() -> None:
    # the case: 12.226 vs 12.227, one run each, no spread known -> undecided, however large the gap
    v = compare(Estimate.single(12.226), Estimate.single(12.227), "less")
    assert v.verdict == UNDECIDED and "no noise estimate" in v.rule
    assert compare(Estimate.single(1.0), Estimate.single(100.0), "less").verdict == UNDECIDED
    assert compare(Estimate.of_runs([3.0]), Estimate.of_runs([9.0]), "less").verdict == UNDECIDED


def test_the_interval_is_welchs() -> None:
    from scipy import stats

    a, b = [1.0, 1.4, 0.9, 1.2], [1.6, 2.1, 1.8]
    v = compare(Estimate.of_runs(a), Estimate.of_runs(b), "less")
    ci = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert v.interval[0] == pytest.approx(ci.low, rel=1e-9) and v.interval[1] == pytest.approx(ci.high, rel=1e-9)
    assert v.difference == pytest.approx(np.mean(a) - np.mean(b))


def test_draws_of_one_run_give_an_interval_and_say_so() -> None:
    one = Estimate.of_draws([12.30, 12.35, 12.28, 12.33])
    assert one.se is not None and "sample draws only" in one.source
    assert estimate_of_records([{"mean": 1.0, "values": [0.9, 1.1]}]).source.startswith("1 training run; spread")
    assert estimate_of_records([{"mean": 1.0}, {"mean": 2.0}]).source == "2 training runs"
    assert estimate_of_records([{"mean": 1.0, "n": 1}]).se is None


def test_equivalence_rule_for_a_margin() -> None:
    at, twice = Estimate.of_runs([10.0, 10.1, 9.9]), Estimate.of_runs([9.9, 10.0, 9.95])
    assert compare(twice, at, "within", margin=0.05, relative=True).verdict == HOLDS
    moved = Estimate.of_runs([8.0, 8.1, 7.9])  # -20 %, tight
    assert compare(moved, at, "within", margin=0.05, relative=True).verdict == DOES_NOT_HOLD
    wide = Estimate.of_runs([9.0, 11.0, 10.5])
    assert compare(wide, at, "within", margin=0.05, relative=True).verdict == UNDECIDED


def test_combining_parts_and_the_note() -> None:
    ests = {"entropic": Estimate.of_runs([1.0, 1.1, 0.9]), "exact": Estimate.of_runs([2.0, 2.1, 1.9]),
            "sinkhorn_divergence": Estimate.of_runs([1.0, 1.2, 0.95])}
    v = lowest("entropic", ests)
    assert v.verdict == UNDECIDED and [p.verdict for p in v.parts] == [HOLDS, UNDECIDED]
    assert all_of([v, compare(ests["exact"], ests["entropic"], "less")]).verdict == DOES_NOT_HOLD
    note = claim_note("Someone et al., Fig. 1", "entropic lowest", v)
    assert note.startswith("Claim (Someone et al., Fig. 1): entropic lowest. Ours: undecided -- ")
    assert "entropic - exact = -1.000, 95% interval [" in note and "Rule: holds if the 95% interval excludes 0" in note


def test_a_fitted_slope_has_the_regressions_error_and_an_exact_reference() -> None:
    x = np.array([0.5, 1.0, 1.5, 2.0] * 3)
    rng = np.random.default_rng(0)
    y = 12.0 + 0.2 * x + rng.normal(0, 0.01, x.size)
    icpt, slope = fit_line(x, y, "slope")
    assert slope.value == pytest.approx(0.2, abs=0.02) and slope.dof == x.size - 2 and slope.se is not None
    assert compare(slope, exact(0.0), "greater").verdict == HOLDS
    flat = fit_line(x, 12.0 + rng.normal(0, 0.05, x.size), "slope")[1]
    assert compare(flat, exact(0.0), "greater").verdict == UNDECIDED
    assert math.isnan(fit_line([1.0, 1.0], [2.0, 3.0], "slope")[1].value)
