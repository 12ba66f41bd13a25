"""Local mechanisms: equation (5) by hand, projections, noise statistics, conventions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpsynth.errors import PrivacyError
from dpsynth.privacy import local


def test_eq5_against_hand_computed_values() -> None:
    # delta = 1e-5: sqrt(16e-5 + 1) = 1.0000799968, minus 1 = 7.99968e-5,
    # c^2 = ln(2 / 7.99968e-5) = ln(25001.0) = 10.126671; c = 3.182243.
    # eps = 1, Delta = 1: (3.182243 + sqrt(11.126671)) / sqrt 2 = 6.517910 / 1.414214 = 4.608858
    assert local.gaussian_sigma_eq5(1.0, 1e-5, 1.0) == pytest.approx(4.608858, rel=1e-6)
    # eps = 10, Delta = 40 (= 2R for R = 20, the paper's MNIST radius):
    # (3.182243 + sqrt(20.126671)) / (10 sqrt 2) * 40 = (3.182243 + 4.486276) * 2.828427 = 21.689847
    assert local.gaussian_sigma_eq5(10.0, 1e-5, 40.0) == pytest.approx(21.689847, rel=1e-6)


def test_eq5_inverse_round_trips() -> None:
    for eps, delta, d in [(0.5, 1e-3, 2.0), (10.0, 1e-5, 40.0), (3.0, 0.4, 1.0)]:
        s = local.gaussian_sigma_eq5(eps, delta, d)
        assert local.gaussian_epsilon_eq5(s, delta, d) == pytest.approx(eps, rel=1e-10)


def test_l1_projection_exact() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 50)) * rng.uniform(0.01, 10, size=(200, 1))
    r = 5.0
    p = local.project_l1_ball(x, r)
    l1 = np.abs(p).sum(1)
    inside = np.abs(x).sum(1) <= r
    assert np.allclose(p[inside], x[inside])  # inside points untouched
    assert np.allclose(l1[~inside], r, rtol=1e-10)  # outside points land ON the sphere
    # optimality (KKT): for a soft-threshold projection, |x_i - p_i| equals theta on the support
    for xi, pi in zip(x[~inside][:20], p[~inside][:20]):
        gap = np.abs(xi - pi)[pi != 0]
        assert np.allclose(gap, gap[0]) and np.all(np.abs(xi[pi == 0]) <= gap[0] + 1e-12)


def test_l1_projection_matches_brute_force_on_small_case() -> None:
    from scipy.optimize import minimize

    x = np.array([[3.0, -1.0, 0.5]])
    p = local.project_l1_ball(x, 2.0)[0]
    assert np.allclose(p, [2.0, 0.0, 0.0])  # theta = 1: (3-1, 0, 0) has l1 norm 2
    y = np.array([[0.9, -0.8, 0.1, 0.05]])
    p = local.project_l1_ball(y, 1.0)[0]
    cons = {"type": "ineq", "fun": lambda v: 1.0 - np.abs(v).sum()}
    ref = minimize(lambda v: ((v - y[0]) ** 2).sum(), np.zeros(4), constraints=[cons], method="SLSQP").x
    assert np.allclose(p, ref, atol=1e-4)


def test_l2_projection() -> None:
    x = np.random.default_rng(1).normal(size=(100, 30)) * 10
    p = local.project_l2_ball(x, 3.0)
    assert np.all(np.linalg.norm(p, axis=1) <= 3.0 + 1e-12)
    assert np.allclose(p / np.linalg.norm(p, axis=1, keepdims=True), x / np.linalg.norm(x, axis=1, keepdims=True))


def test_laplace_mechanism_statistics_and_conventions() -> None:
    x = np.zeros((400, 500))
    y, rep = local.laplace_mechanism(x, radius=2.0, epsilon=4.0, rng=0)
    b = 2 * 2.0 / 4.0  # sensitivity = diameter 2R
    assert rep.noise_scale == b and rep.sensitivity == 4.0
    assert rep.epsilon_paper_convention == pytest.approx(2.0)  # R / b: the paper would claim half
    # 200k draws: Laplace std = b sqrt 2; mean |noise| = b. 1% tolerance is > 5 standard errors.
    assert y.std() == pytest.approx(b * math.sqrt(2), rel=0.01)
    assert np.abs(y).mean() == pytest.approx(b, rel=0.01)
    assert abs(y.mean()) < 0.01


def test_gaussian_mechanism_statistics_and_conventions() -> None:
    x = np.random.default_rng(3).normal(size=(400, 500)) * 5
    y, rep = local.gaussian_mechanism(x, radius=20.0, epsilon=10.0, delta=1e-5, rng=np.random.default_rng(7))
    assert rep.noise_scale == pytest.approx(21.689847, rel=1e-6)
    noise = y - local.project_l2_ball(x, 20.0)
    # 200k draws: sample std within 1% (its relative standard error is ~0.16%)
    assert noise.std() == pytest.approx(rep.noise_scale, rel=0.01)
    # the paper's convention (Delta = R) would claim a smaller epsilon for the same noise
    assert rep.epsilon_paper_convention < rep.epsilon
    assert local.gaussian_sigma_eq5(rep.epsilon_paper_convention, 1e-5, 20.0) == pytest.approx(rep.noise_scale)


def test_dct_quantile_and_projection() -> None:
    rng = np.random.default_rng(0)
    imgs = rng.uniform(0, 1, size=(10, 28 * 28))
    coef = local.dct_records(imgs, (28, 28), quantile=0.8)
    assert np.all((coef != 0).sum(1) <= int(np.ceil(0.2 * 784)) + 1)  # ~20% kept per record
    full = local.dct_records(imgs, (28, 28), quantile=None)
    assert np.allclose(local.idct_records(full, (28, 28)), imgs)  # orthonormal, invertible
    assert np.allclose(np.linalg.norm(full, axis=1), np.linalg.norm(imgs, axis=1))
    y, rep = local.laplace_mechanism(imgs * 255, 140.0, 5.0, rng=1, dct_image_shape=(28, 28))
    assert rep.dct and rep.dct_quantile == 0.8 and y.shape == (10, 784)


def test_seeded_reproducibility() -> None:
    x = np.ones((5, 4))
    a, _ = local.gaussian_mechanism(x, 1.0, 1.0, 1e-5, rng=3)
    b, _ = local.gaussian_mechanism(x, 1.0, 1.0, 1e-5, rng=3)
    assert np.array_equal(a, b)


@pytest.mark.parametrize(
    "call",
    [
        lambda: local.gaussian_sigma_eq5(0.0, 1e-5, 1.0),
        lambda: local.gaussian_sigma_eq5(1.0, 0.5, 1.0),  # eq (5) only valid for delta < 0.5
        lambda: local.gaussian_sigma_eq5(1.0, 0.0, 1.0),
        lambda: local.laplace_mechanism(np.ones((2, 2)), 1.0, -1.0, rng=0),
        lambda: local.laplace_mechanism(np.ones((2, 2)), 0.0, 1.0, rng=0),
        lambda: local.laplace_mechanism(np.array([[np.nan, 1.0]]), 1.0, 1.0, rng=0),
        lambda: local.laplace_mechanism(np.ones((2, 2)), 1.0, 1.0, rng=None),
        lambda: local.gaussian_mechanism(np.ones(3), 1.0, 1.0, 1e-5, rng=0),
    ],
)
def test_bad_inputs(call) -> None:
    with pytest.raises(PrivacyError):
        call()
