"""dpsynth.ot.online (the blockwise Sinkhorn for Reshetova et al.'s full batches of 400,000 points) gives the
dense solver's potentials, values and x-gradients, and never asks for more than block x max(N, M)
cost entries.

Tolerances: in float64 the blockwise and dense paths do the same arithmetic in a different
reduction order (logsumexp over a block instead of a row, sums of block partials), measured
differences ~1e-15; the tests allow 1e-10 (potentials) / 1e-12 (values, gradients), far below any
real discrepancy (a wrong plan, a missing gradient term, an off-by-one schedule are all >1e-4 here).
"""

from __future__ import annotations

import math

import pytest
import torch

import dpsynth.ot.online as online
from dpsynth.errors import ConfigError, DataError
from dpsynth.methods.entropic_wgan import LossSpec, ewgan_loss
from dpsynth.ot.costs import GroundCost, lp_power_cost, squared_distances
from dpsynth.ot.online import online_entropic_loss, online_potentials, online_sinkhorn_divergence
from dpsynth.ot.sinkhorn import entropic_ot, sinkhorn_potentials

N, M, EPS, ITERS = 37, 53, 0.3, 40
F64 = torch.float64


def _clouds(d: int = 2, dtype: torch.dtype = F64, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(N, d, generator=g, dtype=dtype), torch.randn(M, d, generator=g, dtype=dtype) + 0.5)


@pytest.fixture(autouse=True)
def _one_thread():  # type: ignore[no-untyped-def]
    """The blocks are small tensors: with 2 intra-op threads on a shared 2-core machine the
    thread pool's waits cost 10-30x (measured 0.5 s vs 12-19 s for the 4,000-point test)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


class ShiftedCost(GroundCost):
    """``||x - y - s||^2``: NOT symmetric, so the x-x term must really sum both arguments' gradients."""

    def matrix(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return squared_distances(x, y + torch.linspace(0.3, -0.2, x.shape[-1], dtype=x.dtype))


class Spy(GroundCost):
    """Records the shape of every cost matrix it is asked for."""

    def __init__(self, base: GroundCost) -> None:
        self.base = base
        self.shapes: list[tuple[int, int]] = []

    def matrix(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.shapes.append((x.shape[0], y.shape[0]))
        return self.base(x, y)


# --------------------------------------------------------------------------- 1. potentials


@pytest.mark.parametrize("scaling", [None, 0.5])
@pytest.mark.parametrize("block", [1, 8, 64])  # 64 > N and > M: a single block
@pytest.mark.parametrize("d", [2, 5])
def test_potentials_equal_the_dense_solver(d: int, block: int, scaling: float | None) -> None:
    x, y = _clouds(d)
    cost = lp_power_cost(2)
    a, b = torch.full((N,), 1 / N, dtype=F64), torch.full((M,), 1 / M, dtype=F64)
    f, g = sinkhorn_potentials(cost(x, y), a, b, EPS, n_iter=ITERS, scaling=scaling)
    fo, go = online_potentials(x, y, EPS, cost=cost, n_iter=ITERS, scaling=scaling, block=block)
    torch.testing.assert_close(fo, f, rtol=0, atol=1e-10)
    torch.testing.assert_close(go, g, rtol=0, atol=1e-10)


def test_the_schedule_matters_so_the_potentials_test_can_fail() -> None:
    """Guards test 1 against vacuity: with eps-scaling after few iterations the potentials differ
    from the plain loop by far more than the tolerance (so an ignored or shifted schedule fails)."""
    x, y = _clouds(5)
    f_s, _ = online_potentials(x, y, EPS, n_iter=5, scaling=0.5, block=8)
    f_n, _ = online_potentials(x, y, EPS, n_iter=5, scaling=None, block=8)
    assert float((f_s - f_n).abs().max()) > 1e-3


# --------------------------------------------------------------------------- 2-3. losses and x-gradients


def _dense_and_online(loss: str, p: int, scaling: float | None, block: int = 8, d: int = 2):
    x0, y = _clouds(d)
    x = x0.clone().requires_grad_(True)
    dense = ewgan_loss(x, y, LossSpec(loss=loss, p=p, temperature=EPS, n_iter=ITERS, scaling=scaling))
    dense.backward()
    xo = x0.clone().requires_grad_(True)
    fn = online_entropic_loss if loss == "entropic" else online_sinkhorn_divergence
    ours = fn(xo, y, EPS, cost=lp_power_cost(p), n_iter=ITERS, scaling=scaling, block=block)
    ours.backward()
    return dense, x.grad, ours, xo.grad


@pytest.mark.parametrize(("p", "scaling", "block"), [(2, 0.5, 8), (2, None, 5), (2, 0.5, 1), (1, 0.5, 8), (1, None, 7)])
def test_entropic_loss_and_gradient_equal_the_dense_ewgan_loss(p: int, scaling: float | None, block: int) -> None:
    """``<P, C>`` with the plan constant; blocks smaller than N (37 = 4 x 8 + 5: a ragged last block).
    The p=1 cost's gradient is sign(x - y): the clouds are continuous, so no coordinate ties (checked)."""
    x, y = _clouds()
    assert float((x[:, None, :] - y[None, :, :]).abs().min()) > 1e-6  # away from the kinks of |.|
    dense, g_dense, ours, g_ours = _dense_and_online("entropic", p, scaling, block)
    assert float(ours.detach()) == pytest.approx(float(dense.detach()), rel=1e-12)
    torch.testing.assert_close(g_ours, g_dense, rtol=0, atol=1e-12)
    assert float(g_dense.abs().max()) > 1e-3  # a non-trivial gradient to compare


@pytest.mark.parametrize(("p", "scaling", "d"), [(2, 0.5, 2), (2, None, 5), (1, 0.5, 2)])
def test_sinkhorn_divergence_equals_the_dense_one(p: int, scaling: float | None, d: int) -> None:
    """Against ``entropic_ot(x, y) - entropic_ot(x, x) / 2`` itself (not only via ``ewgan_loss``)."""
    x0, y = _clouds(d)
    cost = lp_power_cost(p)
    kw = {"eps": EPS, "cost": cost, "n_iter": ITERS, "scaling": scaling, "validate": False}
    x = x0.clone().requires_grad_(True)
    dense = entropic_ot(x, y, **kw) - 0.5 * entropic_ot(x, x, **kw)
    dense.backward()
    xo = x0.clone().requires_grad_(True)
    ours = online_sinkhorn_divergence(xo, y, EPS, cost=cost, n_iter=ITERS, scaling=scaling, block=8)
    ours.backward()
    assert float(ours.detach()) == pytest.approx(float(dense.detach()), rel=1e-12)
    torch.testing.assert_close(xo.grad, x.grad, rtol=0, atol=1e-12)
    # and ewgan_loss's dense "sinkhorn_divergence" is that same expression
    d2, g_d2, o2, g_o2 = _dense_and_online("sinkhorn_divergence", p, scaling, d=d)
    assert float(o2.detach()) == pytest.approx(float(d2.detach()), rel=1e-12)
    torch.testing.assert_close(g_o2, g_d2, rtol=0, atol=1e-12)


def test_the_self_transport_term_sums_both_arguments_gradients() -> None:
    """With a non-symmetric cost ``grad_x OT(x, x)`` is NOT 2 x (first-argument gradient): the
    blockwise path must add the second argument's gradient as autograd does on the dense matrix."""
    x0, y = _clouds(3)
    cost = ShiftedCost()
    kw = {"eps": EPS, "cost": cost, "n_iter": ITERS, "scaling": 0.5, "validate": False}
    x = x0.clone().requires_grad_(True)
    (entropic_ot(x, y, **kw) - 0.5 * entropic_ot(x, x, **kw)).backward()
    xo = x0.clone().requires_grad_(True)
    online_sinkhorn_divergence(xo, y, EPS, cost=cost, n_iter=ITERS, scaling=0.5, block=6).backward()
    torch.testing.assert_close(xo.grad, x.grad, rtol=0, atol=1e-12)


@pytest.mark.parametrize("loss", ["entropic", "sinkhorn_divergence"])
def test_without_autograd_the_value_is_the_same_and_no_graph_is_built(loss: str) -> None:
    """Under no_grad / inference_mode (evaluation) the loss is just its value, equal to the training one."""
    x, y = _clouds()
    fn = online_entropic_loss if loss == "entropic" else online_sinkhorn_divergence
    kw = {"cost": lp_power_cost(2), "n_iter": ITERS, "scaling": 0.5, "block": 8}
    train = fn(x.clone().requires_grad_(True), y, EPS, **kw)
    with torch.no_grad():
        v_ng = fn(x.clone().requires_grad_(True), y, EPS, **kw)
    with torch.inference_mode():
        v_im = fn(x, y, EPS, **kw)
    assert not v_ng.requires_grad and not v_im.requires_grad
    assert float(v_ng) == float(train.detach()) == float(v_im)


@pytest.mark.parametrize("loss", ["entropic", "sinkhorn_divergence"])
def test_the_surrogate_returns_the_loss_value_exactly_in_float32(loss: str) -> None:
    """The gradient is handed back as ``value + <x - x.detach(), grad>``: its forward value must be the
    loss bit for bit, also in float32 with clouds far from the origin, where ``<x, grad>`` is large
    (``value + <x, grad> - <x.detach(), grad>`` would round)."""
    x, y = _clouds(dtype=torch.float32)
    x, y = x + 300.0, y + 300.0
    fn = online_entropic_loss if loss == "entropic" else online_sinkhorn_divergence
    kw = {"cost": lp_power_cost(2), "n_iter": 10, "scaling": 0.5, "block": 8}
    xr = x.clone().requires_grad_(True)
    with_grad = fn(xr, y, EPS, **kw)
    with torch.no_grad():
        value = fn(x, y, EPS, **kw)
    assert with_grad.requires_grad
    assert float(with_grad.detach()) == float(value)


# --------------------------------------------------------------------------- 4. into a generator


@pytest.mark.parametrize("loss", ["entropic", "sinkhorn_divergence"])
def test_gradients_reach_a_generators_parameters(loss: str) -> None:
    """A Linear layer produces x; backward of the blockwise loss gives the dense parameter gradients."""
    z, y = _clouds()
    spec = LossSpec(loss=loss, p=2, temperature=EPS, n_iter=30, scaling=0.5)
    fn = online_entropic_loss if loss == "entropic" else online_sinkhorn_divergence
    grads = []
    for use_online in (False, True):
        torch.manual_seed(0)
        net = torch.nn.Linear(2, 2).double()
        x = net(z)
        out = fn(x, y, EPS, cost=spec.cost, n_iter=30, scaling=0.5, block=5) if use_online else ewgan_loss(x, y, spec)
        out.backward()
        grads.append([prm.grad.clone() for prm in net.parameters()])
    for ours, dense in zip(grads[1], grads[0]):
        assert float(dense.abs().max()) > 1e-4
        torch.testing.assert_close(ours, dense, rtol=0, atol=1e-12)


# --------------------------------------------------------------------------- 5. memory bound


def test_the_cost_matrix_is_never_built() -> None:
    """4,000 x 4,000 float32 points in blocks of 64: forward and backward of the entropic loss only
    ever ask for 64 x 4,000 (row blocks) or 4,000 x 64 (column blocks) entries, 1/62 of the matrix."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4000, 2, generator=g).requires_grad_(True)
    y = torch.randn(4000, 2, generator=g)
    spy = Spy(lp_power_cost(2))
    online_entropic_loss(x, y, 0.5, cost=spy, n_iter=2, scaling=0.5, block=64).backward()
    assert max(r * c for r, c in spy.shapes) <= 64 * 4000
    assert {(64, 4000), (4000, 64)} <= set(spy.shapes)  # both the row and the column sweeps ran
    assert x.grad is not None and bool(torch.isfinite(x.grad).all()) and float(x.grad.abs().max()) > 0


def test_the_divergence_and_the_default_block_respect_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """N != M: the x-y and x-x solves stay under block x max(N, M); ``block=None`` derives the block
    from DEFAULT_BLOCK_ENTRIES (lowered here to 200 entries: 200 // 53 = 3 rows)."""
    x, y = _clouds()
    spy = Spy(lp_power_cost(2))
    online_sinkhorn_divergence(x.clone().requires_grad_(True), y, EPS, cost=spy, n_iter=3, block=4).backward()
    assert max(r * c for r, c in spy.shapes) <= 4 * max(N, M)
    monkeypatch.setattr(online, "DEFAULT_BLOCK_ENTRIES", 200)
    spy.shapes.clear()
    online_potentials(x, y, EPS, cost=spy, n_iter=2)
    assert max(r * c for r, c in spy.shapes) == 3 * M


# --------------------------------------------------------------------------- 6. bad input


FNS = [online_potentials, online_entropic_loss, online_sinkhorn_divergence]


@pytest.mark.parametrize("fn", FNS, ids=lambda f: f.__name__)
@pytest.mark.parametrize(("kw", "match"), [
    ({"eps": 0.0}, "eps=0.0"), ({"eps": -1.0}, "eps=-1.0"), ({"eps": math.nan}, "eps=nan"),
    ({"eps": math.inf}, "eps=inf"), ({"n_iter": 0}, "n_iter=0"), ({"n_iter": 2.5}, "n_iter=2.5"),
    ({"scaling": 1.0}, "scaling=1.0"), ({"scaling": 0.0}, "scaling=0.0"), ({"block": 0}, "block=0"),
    ({"block": 2.0}, "block=2.0"), ({"block": True}, "block=True"),
])
def test_bad_solver_arguments_are_named(fn, kw: dict, match: str) -> None:  # type: ignore[no-untyped-def]
    x, y = _clouds()
    args = {"eps": EPS, "n_iter": 3, "scaling": 0.5, "block": 8, **kw}
    eps = args.pop("eps")
    with pytest.raises(ConfigError, match=match):
        fn(x, y, eps, **args)


@pytest.mark.parametrize("fn", FNS, ids=lambda f: f.__name__)
def test_bad_clouds_are_named(fn) -> None:  # type: ignore[no-untyped-def]
    x, y = _clouds(3)
    with pytest.raises(DataError, match=r"x \(1, 37, 3\)"):
        fn(x[None], y, EPS, n_iter=2)
    with pytest.raises(DataError, match=r"y \(53,\)"):
        fn(x, y[:, 0], EPS, n_iter=2)
    with pytest.raises(DataError, match="x has 0 points"):
        fn(x[:0], y, EPS, n_iter=2)
    with pytest.raises(DataError, match="y has 0 points"):
        fn(x, y[:0], EPS, n_iter=2)
    with pytest.raises(DataError, match="x has D=3, y has D=2"):
        fn(x, y[:, :2], EPS, n_iter=2)
    with pytest.raises(DataError, match="torch.float32"):
        fn(x, y.float(), EPS, n_iter=2)


@pytest.mark.parametrize("fn", [online_entropic_loss, online_sinkhorn_divergence], ids=lambda f: f.__name__)
def test_a_y_that_wants_a_gradient_is_refused(fn) -> None:  # type: ignore[no-untyped-def]
    """Gradients flow into x only; a y requiring grad would silently get none, so it is an error."""
    x, y = _clouds()
    with pytest.raises(ValueError, match="y requires grad"):
        fn(x, y.clone().requires_grad_(True), EPS, n_iter=2)
