"""Entropic OT for point clouds too large for a cost matrix: the log-domain Sinkhorn of
``dpsynth.ot.sinkhorn`` with the cost recomputed block by block.

Seed 003 trains its 2-D generators on the full privatized dataset in every step (b = n =
400,000, §4.2): a dense cost matrix would hold 1.6e11 entries. Here no more than
``block x max(N, M)`` cost entries exist at once: the row update walks x in blocks (each
against all of y), the column update walks y in blocks (each against all of x). An iteration
costs 2 N M exponentials, as the dense solver -- memory, not arithmetic, is what changes; on a
GPU the same code runs the paper's setting (KeOps, the library behind geomloss's "online"
backend, is not a dependency). Uniform weights only, as the entropic WGAN uses.

The iterates, values and gradients are the dense solver's (tests/test_ot_online.py): the same
eps-scaling schedule ``max(eps, maxC * scaling**k)`` with ``maxC`` found blockwise. Gradients
never keep an autograd graph over the cost: each block's gradient is taken at once and the
result is handed back through a surrogate ``value + <x, grad> - <x.detach(), grad>``, whose
value is the loss and whose gradient w.r.t. ``x`` is ``grad`` (so it flows into a generator).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from dpsynth.errors import ConfigError, DataError
from dpsynth.ot.costs import GroundCost, SquaredEuclideanCost
from dpsynth.ot.sinkhorn import check_solver_args

__all__ = ["online_potentials", "online_entropic_loss", "online_sinkhorn_divergence"]


def _check(x: Tensor, y: Tensor, eps: float, n_iter: int, scaling: float | None, block: int) -> None:
    check_solver_args(eps, n_iter, scaling, None)
    if not (isinstance(block, int) and block >= 1):
        raise ConfigError(f"online Sinkhorn: block must be an integer >= 1, got block={block!r}")
    if x.ndim != 2 or y.ndim != 2:
        raise DataError(f"online Sinkhorn: point clouds must be (N, D), got x {tuple(x.shape)}, y {tuple(y.shape)}")
    if x.shape[0] == 0 or y.shape[0] == 0:
        raise DataError(f"online Sinkhorn: empty point cloud (x has {x.shape[0]} points, y has {y.shape[0]})")
    if x.shape[1] != y.shape[1]:
        raise DataError(f"online Sinkhorn: dimensions differ (x {x.shape[1]}, y {y.shape[1]})")


def _blocks(n: int, block: int) -> list[slice]:
    return [slice(i, min(i + block, n)) for i in range(0, n, block)]


@torch.no_grad()
def _max_cost(x: Tensor, y: Tensor, cost: GroundCost, block: int) -> Tensor:
    return torch.stack([cost(x[s], y).amax() for s in _blocks(x.shape[0], block)]).amax()


@torch.no_grad()
def _softmin_rows(x: Tensor, y: Tensor, h: Tensor, e: Tensor | float, cost: GroundCost, block: int) -> Tensor:
    """``-e log sum_j exp(h_j - C(x_i, y_j) / e)`` for every i, x in blocks."""
    return torch.cat([-e * torch.logsumexp(h[None, :] - cost(x[s], y) / e, dim=1)
                      for s in _blocks(x.shape[0], block)])


@torch.no_grad()
def _softmin_cols(x: Tensor, y: Tensor, h: Tensor, e: Tensor | float, cost: GroundCost, block: int) -> Tensor:
    """``-e log sum_i exp(h_i - C(x_i, y_j) / e)`` for every j, y in blocks."""
    return torch.cat([-e * torch.logsumexp(h[:, None] - cost(x, y[s]) / e, dim=0)
                      for s in _blocks(y.shape[0], block)])


@torch.no_grad()
def online_potentials(x: Tensor, y: Tensor, eps: float, *, cost: GroundCost | None = None, n_iter: int = 100,
                      scaling: float | None = 0.5, block: int = 4096) -> tuple[Tensor, Tensor]:
    """Dual potentials ``(f, g)``: the iterates of ``sinkhorn_potentials(cost(x, y), ...)`` with
    uniform weights, without the cost matrix."""
    _check(x, y, eps, n_iter, scaling, block)
    cost = SquaredEuclideanCost() if cost is None else cost
    x, y = x.detach(), y.detach()
    log_a = torch.full((x.shape[0],), -math.log(x.shape[0]), dtype=x.dtype, device=x.device)
    log_b = torch.full((y.shape[0],), -math.log(y.shape[0]), dtype=x.dtype, device=x.device)
    if scaling is not None:
        eps0 = _max_cost(x, y, cost, block).clamp_min(eps)
        ks = torch.arange(n_iter, device=x.device, dtype=x.dtype)
        sched = torch.maximum(eps0 * scaling ** ks, torch.tensor(eps, dtype=x.dtype, device=x.device))
    f = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
    g = torch.zeros(y.shape[0], dtype=x.dtype, device=x.device)
    for k in range(n_iter):
        e = eps if scaling is None else sched[k]
        f = _softmin_rows(x, y, log_b + g / e, e, cost, block)
        g = _softmin_cols(x, y, log_a + f / e, e, cost, block)
    return f, g


def _surrogate(x: Tensor, value: Tensor, grad: Tensor) -> Tensor:
    """Value ``value``, gradient ``grad`` w.r.t. ``x`` (the two inner products cancel exactly)."""
    return value + (x * grad).sum() - (x.detach() * grad).sum()


def online_entropic_loss(x: Tensor, y: Tensor, eps: float, *, cost: GroundCost | None = None, n_iter: int = 100,
                         scaling: float | None = 0.5, block: int = 4096) -> Tensor:
    """``<P, C(x, y)>`` with the entropic plan ``P`` held constant (Algorithm 1 of seed 003; the
    dense ``ewgan_loss`` "entropic"): gradient ``sum_j P_ij grad_x C(x_i, y_j)``."""
    cost = SquaredEuclideanCost() if cost is None else cost
    f, g = online_potentials(x, y, eps, cost=cost, n_iter=n_iter, scaling=scaling, block=block)
    xd, yd = x.detach(), y.detach()
    log_ab = -math.log(x.shape[0]) - math.log(y.shape[0])
    grad = torch.zeros_like(xd)
    value = torch.zeros((), dtype=xd.dtype, device=xd.device)
    for s in _blocks(xd.shape[0], block):
        with torch.enable_grad():
            xb = xd[s].clone().requires_grad_(True)
            cb = cost(xb, yd)
            plan = torch.exp(log_ab + (f[s, None] + g[None, :] - cb.detach()) / eps)
            v = (plan * cb).sum()
            (gb,) = torch.autograd.grad(v, xb)
        grad[s] = gb
        value = value + v.detach()
    return _surrogate(x, value, grad)


def _ot_eps(x: Tensor, y: Tensor, eps: float, cost: GroundCost, n_iter: int, scaling: float | None, block: int,
            symmetric: bool) -> tuple[Tensor, Tensor]:
    """``OT_eps(x, y)`` as the dense ``entropic_ot`` (value ``<a, f> + <b, g>``, ``f`` the soft-c
    transform of ``g``) and its gradient w.r.t. ``x`` -- through both arguments when
    ``symmetric`` (``y`` is ``x``)."""
    _, g = online_potentials(x, y, eps, cost=cost, n_iter=n_iter, scaling=scaling, block=block)
    xd, yd = x.detach(), y.detach()
    n, m = xd.shape[0], yd.shape[0]
    log_b = -math.log(m)
    h = log_b + g / eps
    grad = torch.zeros_like(xd)
    grad_y = torch.zeros_like(yd)
    f_sum = torch.zeros((), dtype=xd.dtype, device=xd.device)
    for s in _blocks(n, block):
        with torch.enable_grad():
            xb = xd[s].clone().requires_grad_(True)
            yl = yd.clone().requires_grad_(symmetric)
            cb = cost(xb, yl)
            fb = -eps * torch.logsumexp(h[None, :] - cb.detach() / eps, dim=1)
            # d<a, f>/dC_ij = a_i * (b_j exp((f_i + g_j - C_ij) / eps)) / ... = the plan P_ij
            plan = torch.exp(-math.log(n) + log_b + (fb[:, None] + g[None, :] - cb.detach()) / eps)
            v = (plan * cb).sum()
            grads = torch.autograd.grad(v, (xb, yl) if symmetric else (xb,))
        grad[s] = grads[0]
        if symmetric:
            grad_y += grads[1]
        f_sum = f_sum + fb.sum()
    value = f_sum / n + g.mean()
    return value, grad + grad_y if symmetric else grad


def online_sinkhorn_divergence(x: Tensor, y: Tensor, eps: float, *, cost: GroundCost | None = None,
                               n_iter: int = 100, scaling: float | None = 0.5, block: int = 4096) -> Tensor:
    """``OT_eps(x, y) - OT_eps(x, x) / 2`` (the dense ``ewgan_loss`` "sinkhorn_divergence"; the
    data-data term has no generator gradient) with envelope-theorem gradients."""
    cost = SquaredEuclideanCost() if cost is None else cost
    _check(x, y, eps, n_iter, scaling, block)
    v_xy, g_xy = _ot_eps(x, y, eps, cost, n_iter, scaling, block, symmetric=False)
    v_xx, g_xx = _ot_eps(x, x, eps, cost, n_iter, scaling, block, symmetric=True)
    return _surrogate(x, v_xy - 0.5 * v_xx, g_xy - 0.5 * g_xx)
