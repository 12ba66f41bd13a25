"""Entropic OT for point clouds too large for a cost matrix: the log-domain Sinkhorn of
``dpsynth.ot.sinkhorn`` with the cost recomputed block by block ("online", as KeOps does, in
plain torch).

Why: Reshetova et al. (arXiv:2306.09547) trains its 2-D generators on the full privatized dataset in every step (batch
b = n = 400,000, §4.2). A dense 400,000 x 400,000 cost matrix holds 1.6e11 entries (640 GB in
float32). Here the matrix never exists: the row update walks x in blocks of ``block`` rows,
each against all of y, and the column update walks y in blocks of ``block`` rows, each against
all of x, so at most ``block x max(N, M)`` cost entries (plus a few same-sized temporaries)
are alive at once -- peak memory O(block * max(N, M)) instead of O(N * M). The arithmetic is
the dense solver's: an iteration evaluates the cost and 2 N M exponentials (N M per half
step); memory, not work, is what changes, and on a GPU the same code runs the paper's setting
(KeOps, the library behind geomloss's "online" backend, is not a dependency). Uniform weights
only, as the entropic WGAN uses.

The loop itself is ``dpsynth.ot.sinkhorn.sinkhorn_loop``, the one every backend runs; only the
softmins differ. Equality with the dense solver (tests/test_ot_online.py): the iterates are those of
``sinkhorn_potentials(cost(x, y), a, b, eps, n_iter=..., scaling=...)`` with the same
eps-scaling schedule ``eps_k = max(eps, maxC * scaling**k)`` (``maxC`` found blockwise); the
losses reproduce ``ewgan_loss``'s "entropic" (``<P, C>`` with the plan held constant) and
"sinkhorn_divergence" (``OT_eps(x, y) - OT_eps(x, x) / 2`` with envelope-theorem gradients),
values and x-gradients, up to the order of floating-point reductions.

Gradients never keep an autograd graph over the cost: each row block's gradient is taken at
once (autograd on that block only, so any ``GroundCost`` works) and the assembled ``dL/dx`` is
handed back through the surrogate ``value + <x - x.detach(), grad>``, whose forward value is
exactly the loss (the inner product is exactly 0) and whose gradient w.r.t. ``x`` is ``grad``
(so it flows on into a generator). Gradients flow into ``x`` only: ``y`` is data (a ``y``
that requires grad is refused) and parameters inside the cost get none.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from torch import Tensor

from dpsynth.errors import ConfigError, DataError
from dpsynth.ot.costs import GroundCost, SquaredEuclideanCost
from dpsynth.ot.sinkhorn import (DEFAULT_N_ITER, DEFAULT_SCALING, check_solver_args, eps_schedule, exp_floored,
                                 logsumexp_floored, sinkhorn_loop)

__all__ = [
    "DEFAULT_BLOCK_ENTRIES",
    "online_potentials",
    "online_entropic_loss",
    "online_sinkhorn_divergence",
]

DEFAULT_BLOCK_ENTRIES = 1 << 24  # block=None: blocks of at most this many cost entries (64 MiB in float32)


# --------------------------------------------------------------------------- checks and blocks


def _check(x: Tensor, y: Tensor, eps: float, n_iter: int, scaling: float | None, block: int | None) -> int:
    """Validate the arguments (no host sync) and return the block size to use."""
    check_solver_args(eps, n_iter, scaling, None)
    if block is not None and not (isinstance(block, int) and not isinstance(block, bool) and block >= 1):
        raise ConfigError(f"online Sinkhorn: block must be an integer >= 1 or None, got block={block!r}")
    if x.ndim != 2 or y.ndim != 2:
        raise DataError(f"online Sinkhorn: point clouds must be 2-D (N, D), got x {tuple(x.shape)}, y {tuple(y.shape)}")
    if x.shape[0] == 0 or y.shape[0] == 0:
        raise DataError(f"online Sinkhorn: empty point cloud (x has {x.shape[0]} points, y has {y.shape[0]} points)")
    if x.shape[1] != y.shape[1]:
        raise DataError(f"online Sinkhorn: point dimensions differ, x has D={x.shape[1]}, y has D={y.shape[1]}")
    if x.dtype != y.dtype or x.device != y.device:
        raise DataError(f"online Sinkhorn: x ({x.dtype}, {x.device}) and y ({y.dtype}, {y.device}) must share "
                        "dtype and device")
    if y.requires_grad and torch.is_grad_enabled():
        raise ValueError("online Sinkhorn: y requires grad, but gradients flow into x only; pass y.detach()")
    if block is None:
        return max(1, DEFAULT_BLOCK_ENTRIES // max(x.shape[0], y.shape[0]))
    return block


def _blocks(n: int, block: int) -> Iterator[slice]:
    return (slice(i, min(i + block, n)) for i in range(0, n, block))


def _surrogate(x: Tensor, value: Tensor, grad: Tensor) -> Tensor:
    """Forward value exactly ``value``; gradient w.r.t. ``x`` exactly ``grad``."""
    return value + ((x - x.detach()) * grad).sum()


def _needs_grad(x: Tensor) -> bool:
    return x.requires_grad and torch.is_grad_enabled()


# --------------------------------------------------------------------------- the Sinkhorn loop


@torch.no_grad()
def _max_cost(x: Tensor, y: Tensor, cost: GroundCost, block: int) -> Tensor:
    return torch.stack([cost(x[s], y).amax() for s in _blocks(x.shape[0], block)]).amax()


@torch.no_grad()
def _softmin_rows(x: Tensor, y: Tensor, h: Tensor, e: Tensor | float, cost: GroundCost, block: int) -> Tensor:
    """``-e log sum_j exp(h_j - C(x_i, y_j) / e)`` for every i, x in row blocks."""
    return torch.cat([-e * logsumexp_floored(h[None, :] - cost(x[s], y) / e, dim=1)
                      for s in _blocks(x.shape[0], block)])


@torch.no_grad()
def _softmin_cols(x: Tensor, y: Tensor, h: Tensor, e: Tensor | float, cost: GroundCost, block: int) -> Tensor:
    """``-e log sum_i exp(h_i - C(x_i, y_j) / e)`` for every j, y in blocks (``cost(x, y)``, not
    ``cost(y, x)``: no symmetry is assumed)."""
    return torch.cat([-e * logsumexp_floored(h[:, None] - cost(x, y[s]) / e, dim=0)
                      for s in _blocks(y.shape[0], block)])


def _potentials(x: Tensor, y: Tensor, eps: float, cost: GroundCost, n_iter: int, scaling: float | None,
                block: int) -> tuple[Tensor, Tensor]:
    """``sinkhorn_loop`` (uniform weights) with the blockwise softmins; arguments already checked."""
    with torch.no_grad():
        x, y = x.detach(), y.detach()
        log_a = torch.full((x.shape[0],), -math.log(x.shape[0]), dtype=x.dtype, device=x.device)
        log_b = torch.full((y.shape[0],), -math.log(y.shape[0]), dtype=x.dtype, device=x.device)
        c_max = _max_cost(x, y, cost, block) if scaling is not None else None
        schedule = eps_schedule(c_max, eps, n_iter, scaling, like=x)
        return sinkhorn_loop(lambda e, h: _softmin_rows(x, y, h, e, cost, block),
                             lambda e, h: _softmin_cols(x, y, h, e, cost, block), log_a, log_b, schedule)


def online_potentials(x: Tensor, y: Tensor, eps: float, *, cost: GroundCost | None = None,
                      n_iter: int = DEFAULT_N_ITER, scaling: float | None = DEFAULT_SCALING,
                      block: int | None = None) -> tuple[Tensor, Tensor]:
    """Dual potentials ``(f, g)`` of OT_eps between uniform clouds ``x`` (N, D) and ``y`` (M, D):
    the iterates of ``sinkhorn_potentials(cost(x, y), 1/N, 1/M, eps, n_iter, scaling)`` without
    the cost matrix; no autograd. ``cost`` defaults to ``||x - y||_2^2``; ``block`` (rows per
    block) defaults to ``DEFAULT_BLOCK_ENTRIES // max(N, M)``."""
    block = _check(x, y.detach(), eps, n_iter, scaling, block)
    cost = SquaredEuclideanCost() if cost is None else cost
    return _potentials(x, y, eps, cost, n_iter, scaling, block)


# --------------------------------------------------------------------------- the two losses


def online_entropic_loss(x: Tensor, y: Tensor, eps: float, *, cost: GroundCost | None = None,
                         n_iter: int = DEFAULT_N_ITER, scaling: float | None = DEFAULT_SCALING,
                         block: int | None = None) -> Tensor:
    """``<P, C(x, y)>`` with the entropic plan ``P = exp((f_i + g_j - C_ij) / eps) / (N M)`` held
    constant (Algorithm 1 of Reshetova et al.; ``ewgan_loss`` "entropic"): scalar whose gradient w.r.t.
    ``x`` is ``sum_j P_ij grad_x C(x_i, y_j)``."""
    block = _check(x, y, eps, n_iter, scaling, block)
    cost = SquaredEuclideanCost() if cost is None else cost
    f, g = _potentials(x, y, eps, cost, n_iter, scaling, block)
    xd, yd = x.detach(), y.detach()
    log_ab = -math.log(xd.shape[0]) - math.log(yd.shape[0])
    need = _needs_grad(x)
    grad = torch.zeros_like(xd) if need else None
    value = torch.zeros((), dtype=xd.dtype, device=xd.device)
    for s in _blocks(xd.shape[0], block):
        with torch.enable_grad() if need else torch.no_grad():
            xb = xd[s].clone().requires_grad_(True) if need else xd[s]
            cb = cost(xb, yd)
            plan = exp_floored(log_ab + (f[s, None] + g[None, :] - cb.detach()) / eps)
            v = (plan * cb).sum()
            if grad is not None:
                (grad[s],) = torch.autograd.grad(v, xb)
        value = value + v.detach()
    return value if grad is None else _surrogate(x, value, grad)


def _ot_eps(x: Tensor, y: Tensor, eps: float, cost: GroundCost, n_iter: int, scaling: float | None, block: int,
            self_transport: bool) -> tuple[Tensor, Tensor | None]:
    """``OT_eps(x, y)`` as the dense ``entropic_ot`` -- value ``<a, f> + <b, g>`` with ``f`` the
    soft-c-transform of the final ``g`` -- and its gradient w.r.t. ``x`` (None without autograd).
    With ``self_transport`` (``y`` is ``x``) the gradient is the sum through both arguments."""
    _, g = _potentials(x, y, eps, cost, n_iter, scaling, block)
    xd, yd = x.detach(), y.detach()
    n, m = xd.shape[0], yd.shape[0]
    log_b = -math.log(m)
    h = log_b + g / eps
    need = _needs_grad(x)
    grad = torch.zeros_like(xd) if need else None
    both = need and self_transport
    yl = yd.clone().requires_grad_(True) if both else yd  # one leaf for every block: grads add up
    grad_y = torch.zeros_like(yd) if both else None
    f_sum = torch.zeros((), dtype=xd.dtype, device=xd.device)
    for s in _blocks(n, block):
        with torch.enable_grad() if need else torch.no_grad():
            xb = xd[s].clone().requires_grad_(True) if need else xd[s]
            cb = cost(xb, yl)
            fb = -eps * logsumexp_floored(h[None, :] - cb.detach() / eps, dim=1)
            if grad is not None:
                # d<a, f>/dC_ij = a_i b_j exp((f_i + g_j - C_ij) / eps) = P_ij (f from this g)
                plan = exp_floored(-math.log(n) + log_b + (fb[:, None] + g[None, :] - cb.detach()) / eps)
                v = (plan * cb).sum()
                if grad_y is not None:
                    grad[s], gy = torch.autograd.grad(v, (xb, yl))
                    grad_y += gy
                else:
                    (grad[s],) = torch.autograd.grad(v, xb)
        f_sum = f_sum + fb.sum()
    value = f_sum / n + g.sum() / m
    if grad is not None and grad_y is not None:
        grad += grad_y
    return value, grad


def online_sinkhorn_divergence(x: Tensor, y: Tensor, eps: float, *, cost: GroundCost | None = None,
                               n_iter: int = DEFAULT_N_ITER, scaling: float | None = DEFAULT_SCALING,
                               block: int | None = None) -> Tensor:
    """``OT_eps(x, y) - OT_eps(x, x) / 2`` (``ewgan_loss`` "sinkhorn_divergence": the data-data
    term has no x-gradient and is left out) with the envelope-theorem gradient of the dense
    ``entropic_ot``. Two blockwise Sinkhorn solves (x-y and x-x), as the dense path."""
    block = _check(x, y, eps, n_iter, scaling, block)
    cost = SquaredEuclideanCost() if cost is None else cost
    v_xy, g_xy = _ot_eps(x, y, eps, cost, n_iter, scaling, block, self_transport=False)
    v_xx, g_xx = _ot_eps(x, x, eps, cost, n_iter, scaling, block, self_transport=True)
    value = v_xy - 0.5 * v_xx
    if g_xy is None or g_xx is None:
        return value
    return _surrogate(x, value, g_xy - 0.5 * g_xx)
