"""The blockwise ("online") Sinkhorn of dpsynth.ot.online equals the dense solver and never builds
the cost matrix (seed 003's full batches of 400,000 points)."""

from __future__ import annotations

import pytest
import torch

from dpsynth.errors import ConfigError, DataError
from dpsynth.methods.entropic_wgan import LossSpec, ewgan_loss
from dpsynth.ot import lp_power_cost
from dpsynth.ot.online import online_entropic_loss, online_potentials, online_sinkhorn_divergence
from dpsynth.ot.sinkhorn import sinkhorn_potentials

CASES = [(p, scaling, block) for p in (1, 2) for scaling in (None, 0.7) for block in (1, 8, 64)]


def _clouds(d: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return (torch.randn(37, d, generator=g, dtype=torch.float64),
            torch.randn(53, d, generator=g, dtype=torch.float64) + 0.5)


@pytest.mark.parametrize(("p", "scaling", "block"), CASES)
def test_potentials_equal_the_dense_solver(p: int, scaling: float | None, block: int) -> None:
    """Same iterates in float64 (tolerance 1e-12: the blocks only change the order of logsumexp's
    reductions, ~1e-15 measured); block 64 exceeds both clouds (one block)."""
    x, y = _clouds()
    cost = lp_power_cost(p)
    a, b = torch.full((37,), 1 / 37, dtype=torch.float64), torch.full((53,), 1 / 53, dtype=torch.float64)
    f, g = sinkhorn_potentials(cost(x, y), a, b, 0.3, n_iter=40, scaling=scaling)
    fo, go = online_potentials(x, y, 0.3, cost=cost, n_iter=40, scaling=scaling, block=block)
    torch.testing.assert_close(fo, f, rtol=0, atol=1e-12)
    torch.testing.assert_close(go, g, rtol=0, atol=1e-12)


@pytest.mark.parametrize("loss", ["entropic", "sinkhorn_divergence"])
@pytest.mark.parametrize(("p", "scaling"), [(1, None), (2, None), (2, 0.7)])
def test_losses_and_gradients_equal_the_dense_ewgan_loss(loss: str, p: int, scaling: float | None) -> None:
    """Value and x-gradient of both entropic losses, blocks of 8 rows (tolerance 1e-12, float64)."""
    x0, y = _clouds()
    spec = LossSpec(loss=loss, p=p, temperature=0.3, n_iter=40, scaling=scaling)
    x = x0.clone().requires_grad_(True)
    dense = ewgan_loss(x, y, spec)
    dense.backward()
    fn = online_entropic_loss if loss == "entropic" else online_sinkhorn_divergence
    xo = x0.clone().requires_grad_(True)
    ours = fn(xo, y, 0.3, cost=lp_power_cost(p), n_iter=40, scaling=scaling, block=8)
    ours.backward()
    assert float(ours.detach()) == pytest.approx(float(dense.detach()), rel=1e-12)
    torch.testing.assert_close(xo.grad, x.grad, rtol=0, atol=1e-12)


def test_gradients_reach_a_generators_parameters() -> None:
    x0, y = _clouds(2)
    grads = []
    for online in (False, True):
        torch.manual_seed(0)
        net = torch.nn.Linear(2, 2).double()
        x = net(x0[:, :2])
        yy = y[:, :2]
        spec = LossSpec(loss="sinkhorn_divergence", p=2, temperature=0.3, n_iter=30, scaling=0.5)
        loss = online_sinkhorn_divergence(x, yy, 0.3, n_iter=30, scaling=0.5, block=5) if online \
            else ewgan_loss(x, yy, spec)
        loss.backward()
        grads.append([p.grad.clone() for p in net.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_the_cost_matrix_is_never_built() -> None:
    """4,000 x 4,000 points in blocks of 64: the cost is only ever asked for 64 x 4,000 (or
    4,000 x 64) entries, 1/62 of the full matrix."""
    base = lp_power_cost(2)
    largest = []

    class Spy:
        def __call__(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            largest.append(a.shape[0] * b.shape[0])
            return base(a, b)

    g = torch.Generator().manual_seed(1)
    x = torch.randn(4000, 2, generator=g).requires_grad_(True)
    y = torch.randn(4000, 2, generator=g)
    online_entropic_loss(x, y, 0.5, cost=Spy(), n_iter=3, scaling=0.5, block=64).backward()
    assert max(largest) == 64 * 4000
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_bad_input_is_named() -> None:
    x, y = _clouds()
    with pytest.raises(ConfigError, match="block"):
        online_potentials(x, y, 0.3, block=0)
    with pytest.raises(ConfigError, match="eps"):
        online_potentials(x, y, -1.0)
    with pytest.raises(ConfigError, match="scaling"):
        online_entropic_loss(x, y, 0.3, scaling=1.5)
    with pytest.raises(DataError, match="dimensions differ"):
        online_sinkhorn_divergence(x, y[:, :2], 0.3)
    with pytest.raises(DataError, match="empty"):
        online_potentials(x[:0], y, 0.3)
