"""The two CPU speed-ups of the Sinkhorn solver hold the loss and its gradient to the plain
log-domain solve (``torch.logsumexp`` every iteration).

1. ``logsumexp_floored`` / ``exp_floored``: arguments more than 80 below a row's largest are
   floored (the CPU's ``exp`` takes a slow path where its result would be subnormal).
2. ``CachedKernelSoftmin`` (``cache_kernel=True``): the kernel is exponentiated once and reused
   while the temperature is fixed (Reshetova et al.'s L = 200 iterations at lambda = 2 s^2).

Tolerances: both solvers run in float32, whose solve of a 200 x 784 MNIST-sized problem is itself
~3e-5 (relative) from the float64 solution (measured: plan L1 error 2.6e-5 plain, 3.7e-5 cached);
so the two are held to each other within 1e-4 on the loss (relative) and 1e-3 on the gradient
(relative L2 norm of the difference), and each to the float64 plan within 2e-4 (L1).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dpsynth.ot import SquaredEuclideanCost, sinkhorn_potentials, transport_plan
from dpsynth.ot.sinkhorn import EXP_FLOOR, CachedKernelSoftmin, exp_floored, logsumexp_floored


def _mnist_like(n: int = 200, noise: float = 1.0, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Generated-like points and privatized-like points in [-1, 1]^784 (+ Gaussian noise)."""
    g = torch.Generator().manual_seed(seed)
    base = torch.rand(10, 784, generator=g) * 2 - 1
    x = (base[torch.randint(0, 10, (n,), generator=g)] + 0.3 * torch.randn(n, 784, generator=g)).clamp(-1, 1)
    y = (base[torch.randint(0, 10, (n,), generator=g)] + 0.3 * torch.randn(n, 784, generator=g)).clamp(-1, 1)
    return x, y + noise * torch.randn(n, 784, generator=g)


def test_floored_logsumexp_equals_torch_logsumexp_and_keeps_its_special_cases() -> None:
    g = torch.Generator().manual_seed(1)
    a = torch.randn(50, 300, generator=g) * 200  # rows spanning hundreds: most terms floored
    a[3, :] = -math.inf  # a row without mass
    a[:, :7] = -math.inf  # zero-weight columns
    ref = torch.logsumexp(a, -1)
    got = logsumexp_floored(a, -1)
    assert torch.isneginf(got[3]) and torch.isneginf(ref[3])
    live = torch.arange(50) != 3
    torch.testing.assert_close(got[live], ref[live], rtol=0, atol=1e-4)  # float32 ulp at |value| ~ 600: 6e-5
    b = a.double()
    torch.testing.assert_close(logsumexp_floored(b, -1)[live], torch.logsumexp(b, -1)[live], rtol=1e-15, atol=0)
    # the input is not modified (callers keep using it)
    assert torch.equal(torch.isneginf(a).sum(), torch.tensor(7 * 50 + 300 - 7))


def test_floored_logsumexp_gradient_is_the_softmax() -> None:
    g = torch.Generator().manual_seed(2)
    a = (torch.randn(20, 40, generator=g, dtype=torch.float64) * 50).requires_grad_(True)
    w = torch.randn(20, generator=g, dtype=torch.float64)
    (logsumexp_floored(a, -1) * w).sum().backward()
    expected = torch.softmax(a.detach(), -1) * w[:, None]
    torch.testing.assert_close(a.grad, expected, rtol=1e-12, atol=1e-30)


def test_exp_floored_is_exactly_zero_at_or_below_the_floor() -> None:
    x = torch.tensor([0.0, -1.0, EXP_FLOOR + 1e-3, EXP_FLOOR, EXP_FLOOR - 5, -1e4, -math.inf])
    out = exp_floored(x)
    torch.testing.assert_close(out[:3], torch.exp(x[:3]))
    assert torch.all(out[3:] == 0)


@pytest.mark.parametrize("eps", [0.5, 2.0, 8.0])
@pytest.mark.parametrize("scaling", [None, 0.5])
def test_cached_kernel_solve_matches_the_log_domain_solve(eps: float, scaling: float | None) -> None:
    """Fig. 5's temperatures (lambda = 2 s^2 for s = 0.5, 1, 2), with and without eps-scaling
    (which changes the temperature every early iteration: the kernel must be recomputed)."""
    x, y = _mnist_like()
    c = SquaredEuclideanCost()(x, y)
    a = torch.full((200,), 1 / 200)
    plans = {}
    for cached in (False, True):
        f, g = sinkhorn_potentials(c, a, a, eps, n_iter=200, scaling=scaling, cache_kernel=cached)
        plans[cached] = transport_plan(c, a, a, f, g, eps).double()
    c64, a64 = c.double(), a.double()
    f, g = sinkhorn_potentials(c64, a64, a64, eps, n_iter=200, scaling=scaling)
    truth = transport_plan(c64, a64, a64, f, g, eps)
    for cached, plan in plans.items():
        assert float((plan - truth).abs().sum()) < 2e-4, (cached, float((plan - truth).abs().sum()))
    value = {k: float((p * c64).sum()) for k, p in plans.items()}
    assert abs(value[True] - value[False]) <= 1e-4 * abs(value[False])


def test_cached_kernel_with_zero_weights_equals_dropping_them() -> None:
    """Padding (a zero-weight point, ``-inf`` in the softmin's argument) stays exactly absent."""
    x, y = _mnist_like(60)
    c = SquaredEuclideanCost()(x, y)
    a = torch.full((60,), 1 / 60)
    b = torch.zeros(60)
    b[:45] = 1 / 45
    f, g = sinkhorn_potentials(c, a, b, 2.0, n_iter=200, scaling=None, cache_kernel=True)
    plan = transport_plan(c, a, b, f, g, 2.0)
    assert torch.all(plan[:, 45:] == 0)
    f2, g2 = sinkhorn_potentials(c[:, :45], a, b[:45], 2.0, n_iter=200, scaling=None, cache_kernel=True)
    torch.testing.assert_close(plan[:, :45], transport_plan(c[:, :45], a, b[:45], f2, g2, 2.0), rtol=1e-4, atol=1e-9)


def test_cached_kernel_is_recomputed_when_h_drifts() -> None:
    """Past DRIFT the cached kernel would lose mass to underflow: it must be recomputed there."""
    g = torch.Generator().manual_seed(3)
    c = torch.rand(30, 40, generator=g) * 300
    h0 = torch.randn(40, generator=g)
    soft = CachedKernelSoftmin(c)
    e = torch.tensor([2.0])
    soft(e, h0)
    k0 = soft.k
    near = h0 + torch.linspace(-5, 5, 40)
    far = h0 + torch.linspace(-100, 100, 40)
    exact = lambda h: -e * torch.logsumexp(h[None, :] - c / e, -1)  # noqa: E731
    torch.testing.assert_close(soft(e, near), exact(near), rtol=1e-5, atol=1e-3)
    assert soft.k is k0  # reused
    torch.testing.assert_close(soft(e, far), exact(far), rtol=1e-5, atol=1e-3)
    assert soft.k is not k0  # recomputed
    k1 = soft.k
    soft(torch.tensor([3.0]), far)
    assert soft.k is not k1  # a new temperature is a new kernel


@pytest.mark.parametrize("loss", ["entropic", "sinkhorn_divergence"])
@pytest.mark.parametrize("noise", [0.5, 2.0])
def test_ewgan_loss_and_gradient_held_to_the_log_domain_solve(loss: str, noise: float, monkeypatch) -> None:
    """The Fig. 5 loss (b = 200, L = 200, lambda = 2 s^2, no eps-scaling) with the cached kernel
    (the CPU default) against the same loss solved without it."""
    import dpsynth.methods.entropic_wgan.loss as L

    x, y = _mnist_like(noise=noise)
    spec = L.LossSpec(loss=loss, p=2, temperature=2 * noise**2, n_iter=200, scaling=None)
    results = {}
    for cached in (True, False):
        if not cached:
            # both losses solve through the module's sinkhorn_potentials (the divergence too: one solve for a
            # pack's per-member temperatures, packed.py)
            plain_sp = L.sinkhorn_potentials
            monkeypatch.setattr(L, "sinkhorn_potentials", lambda *a, cache_kernel=False, **k: plain_sp(*a, **k))
        xg = x.clone().requires_grad_(True)
        value = L.ewgan_loss(xg, y, spec)
        value.backward()
        results[cached] = (float(value), xg.grad.double())
    (v1, g1), (v0, g0) = results[True], results[False]
    assert np.isfinite(v1) and abs(v1 - v0) <= 1e-4 * abs(v0)
    assert float((g1 - g0).norm() / g0.norm()) < 1e-3
