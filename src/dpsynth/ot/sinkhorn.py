"""Entropic OT between weighted point clouds: a log-domain Sinkhorn in plain torch.

    OT_eps(a, X; b, Y) = min_P <P, C> + eps * KL(P | a x b),   C[i, j] = c(x_i, y_j)

``eps`` is in the COST's units (for ``||x-y||^2`` on MNIST, eps = 0.05). Weights may be
zero: a zero-weight point is exactly absent (its log-weight is -inf), which is how a
variable-size Poisson batch is padded to a fixed shape.

Gradients use the envelope theorem, as geomloss does: the Sinkhorn loop runs without
autograd on a detached cost; one last half-step ``f = softmin_eps(C, log b + g / eps)``
is taken on the differentiable cost with ``g`` (and the log-weights) detached, and the
value is ``<a, f> + <b, g>``. Its gradient w.r.t. C is the plan P (rows exactly a), w.r.t.
``a`` is ``f`` and w.r.t. ``b`` is ``g`` -- the derivatives of OT_eps at convergence --
without back-propagating through the loop. The value is the dual objective at a pair
whose soft-c-transform term vanishes, so it is a lower bound on OT_eps at any iterate.

With a fixed ``n_iter`` and ``tol=None`` the loop never reads a tensor on the host: the
eps-annealing schedule is built on the device from ``max(C)``.

The softmin every iteration takes -- where its exponentials are floored (the CPU) and how the
fixed-length loop is fused (``fused=True``) -- lives in :mod:`dpsynth.ot.softmin`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from dpsynth.compiling import compile_failed, compiled
from dpsynth.errors import ConfigError, DataError
from dpsynth.ot.costs import GroundCost, SquaredEuclideanCost
from dpsynth.ot.softmin import (EXP_FLOOR, CachedKernelSoftmin, _softmin, exp_floor, exp_floored, floors_exp,
                                logsumexp_floored, softmin_logsumexp)

__all__ = [
    "eps_schedule",
    "sinkhorn_loop",
    "sinkhorn_iteration",
    "live_max_cost",
    "sinkhorn_potentials",
    "ot_value_from_potentials",
    "transport_plan",
    "entropic_ot",
    "uniform_weights",
    "check_solver_args",
    "logsumexp_floored",
    "exp_floored",
    "EXP_FLOOR",
    "floors_exp",
    "exp_floor",
    "softmin_logsumexp",
    "fused_solve",
]

DEFAULT_N_ITER = 100
DEFAULT_SCALING = 0.5


def uniform_weights(n: int, like: Tensor, lead: tuple[int, ...] = ()) -> Tensor:
    """``1/n`` weights with the dtype/device of ``like`` (and optional leading batch dims)."""
    return torch.full((*lead, n), 1.0 / n, dtype=like.dtype, device=like.device)


def _log_weights(w: Tensor) -> Tensor:
    """log(w) with exact -inf for zero weights (torch.log(0) is -inf already; keep it explicit)."""
    return torch.where(w > 0, w.clamp_min(torch.finfo(w.dtype).tiny).log(), torch.full_like(w, -math.inf))


def check_solver_args(eps: float, n_iter: int, scaling: float | None, tol: float | None) -> None:
    """Reject solver hyper-parameters that would make the loop meaningless (no host sync)."""
    if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps > 0):
        raise ConfigError(f"entropic OT temperature eps must be a finite number > 0, got eps={eps!r}")
    if not (isinstance(n_iter, int) and n_iter >= 1):
        raise ConfigError(f"Sinkhorn n_iter must be an integer >= 1, got n_iter={n_iter!r}")
    if scaling is not None and not (0.0 < scaling < 1.0):
        raise ConfigError(f"eps-scaling ratio must be in (0, 1) or None, got scaling={scaling!r}")
    if tol is not None and not (tol > 0):
        raise ConfigError(f"Sinkhorn tol must be > 0 or None, got tol={tol!r}")


def _check_weights(w: Tensor, n: int, name: str) -> None:
    """Value checks on a weight vector (host sync; skipped with validate=False)."""
    if w.shape[-1] != n:
        raise DataError(f"{name} has {w.shape[-1]} entries but its point cloud has {n} points")
    if not bool(torch.isfinite(w).all()) or bool((w < 0).any()):
        raise DataError(f"{name} must be finite and non-negative")
    total = w.sum(-1)
    if not bool(torch.allclose(total, torch.ones_like(total), rtol=0, atol=1e-5)):
        raise DataError(
            f"{name} must sum to 1 (got sums in [{float(total.min()):.6g}, {float(total.max()):.6g}]); "
            "an empty Poisson batch has no distribution to transport to"
        )


def eps_schedule(c_max: Tensor | None, eps: float | Tensor, n_iter: int, scaling: float | None, *,
                 like: Tensor, lead: tuple[int, ...] = ()) -> Tensor:
    """The temperature of every iteration, shape ``(n_iter, *lead)``, built on the device.

    With ``scaling`` (eps-scaling) iteration k runs at ``max(eps, c_max * scaling**k)``, where
    ``c_max`` (shape ``lead``) is the largest cost between points that carry mass; without it,
    every iteration runs at ``eps``. ``eps`` is a float or a tensor broadcastable to ``lead``
    (one temperature per problem). Written with fills rather than host->device copies, so it
    can run inside a captured CUDA graph.
    """
    eps_t = eps if isinstance(eps, Tensor) else torch.full((), eps, dtype=like.dtype, device=like.device)
    eps_t = eps_t.to(like.dtype).expand(lead) if lead else eps_t.to(like.dtype)
    if scaling is None or c_max is None:
        return eps_t.unsqueeze(0).expand(n_iter, *lead)
    eps0 = torch.maximum(c_max, eps_t)
    ks = torch.arange(n_iter, device=like.device, dtype=like.dtype).reshape(-1, *([1] * len(lead)))
    return torch.maximum(eps0.unsqueeze(0) * scaling**ks, eps_t.unsqueeze(0))


def sinkhorn_iteration(softmin_f: Callable[[Tensor, Tensor], Tensor], softmin_g: Callable[[Tensor, Tensor], Tensor],
                       log_a: Tensor, log_b: Tensor, e: Tensor, g: Tensor) -> tuple[Tensor, Tensor]:
    """One iteration of THE loop at temperature ``e``: the f-update, then the g-update (Algorithm 3 of
    the papers); returns the new ``(f, g)``."""
    f = softmin_f(e, log_b + g / e)
    return f, softmin_g(e, log_a + f / e)


def sinkhorn_loop(softmin_f: Callable[[Tensor, Tensor], Tensor], softmin_g: Callable[[Tensor, Tensor], Tensor],
                  log_a: Tensor, log_b: Tensor, schedule: Tensor,
                  stop: Callable[[int, Tensor, Tensor], bool] | None = None,
                  iteration: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]] | None = None) -> tuple[Tensor, Tensor]:
    """THE Sinkhorn loop (log domain, alternating updates, Algorithm 3 of the papers).

    Every backend runs it -- the dense cost matrix (:func:`sinkhorn_potentials`) and the
    blockwise one that never forms the matrix (``ot/online.py``) -- and differs only in its
    softmin, as geomloss runs its tensorized and online backends through one loop:
    ``softmin_f(e, h)`` is ``-e log sum_j exp(h_j - C_ij / e)`` over the columns (the f-update)
    and ``softmin_g(e, h)`` the same over the rows (the g-update). ``schedule`` is
    :func:`eps_schedule`'s; ``e`` is handed over with a trailing axis (``(*lead, 1)``).
    ``stop(k, f, g)`` (optional) ends the loop early; it may read the host. ``iteration(e, g)``
    (optional) takes :func:`sinkhorn_iteration` over those softmins another way -- the fused solve's
    compiled one (:func:`fused_solve`).
    """
    g = torch.zeros_like(log_b)
    f = torch.zeros_like(log_a)
    for k, e in enumerate(schedule.unsqueeze(-1).unbind(0)):  # one op for every iteration's temperature
        f, g = (iteration(e, g) if iteration is not None
                else sinkhorn_iteration(softmin_f, softmin_g, log_a, log_b, e, g))
        if stop is not None and stop(k, f, g):
            break
    return f, g


def _dense_iteration(c: Tensor, ct: Tensor, log_a: Tensor, log_b: Tensor, e: Tensor, g: Tensor,
                     floor: bool) -> tuple[Tensor, Tensor]:
    """:func:`sinkhorn_iteration` on a dense cost matrix ``c`` and its transpose ``ct``, tensors and a
    constant only: what :func:`fused_solve` compiles (a closure made per call would recompile)."""
    return sinkhorn_iteration(lambda e_, h: _softmin(e_, c, h, floor), lambda e_, h: _softmin(e_, ct, h, floor),
                              log_a, log_b, e, g)


def fused_solve(c: Tensor, ct: Tensor, log_a: Tensor, log_b: Tensor, schedule: Tensor,
                floor: bool | None = None) -> tuple[Tensor, Tensor]:
    """:func:`sinkhorn_loop` on a dense cost matrix with each iteration compiled (``dpsynth.compiling.compiled`` of
    :func:`_dense_iteration`): the same loop and arithmetic, a few fused kernels per half-step instead of
    ~10-20 ops, and nothing between them but the schedule's view.

    Why one iteration and not the whole unrolled loop: measured on the CPU (torch 2.14, one thread,
    a (2, 50, 144) problem, 30 iterations), compiling the unrolled loop took 2-3 minutes and ran at
    10.3 ms against the eager floored loop's 6.5; one iteration compiles in seconds, is reused by every
    iteration and every step of a shape, and a CUDA graph captures its kernels like any other. Where
    compiling fails the eager loop runs (same numbers, slower; warned once). The floor is decided here,
    outside the graph.
    """
    floor = floors_exp(c) if floor is None else floor

    def softmin_f(e: Tensor, h: Tensor) -> Tensor:
        return _softmin(e, c, h, floor)

    def softmin_g(e: Tensor, h: Tensor) -> Tensor:
        return _softmin(e, ct, h, floor)

    fused = compiled(_dense_iteration)
    if fused is not None:
        try:
            return sinkhorn_loop(softmin_f, softmin_g, log_a, log_b, schedule,
                                 iteration=lambda e, g: fused(c, ct, log_a, log_b, e, g, floor))
        except Exception as exc:  # noqa: BLE001 - any backend failure: the eager loop is the same solve
            compile_failed(exc)
    return sinkhorn_loop(softmin_f, softmin_g, log_a, log_b, schedule)


def live_max_cost(c: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """Largest cost between points of positive weight: zero-weight padding must not change the
    eps-scaling schedule, or padding would not equal dropping. (On the device.)"""
    live = (a > 0).unsqueeze(-1) & (b > 0).unsqueeze(-2)
    return c.masked_fill(~live, -math.inf).amax(dim=(-2, -1))


@torch.no_grad()
def sinkhorn_potentials(
    c: Tensor,
    a: Tensor,
    b: Tensor,
    eps: float | Tensor,
    *,
    n_iter: int = DEFAULT_N_ITER,
    scaling: float | None = DEFAULT_SCALING,
    tol: float | None = None,
    check_every: int = 10,
    cache_kernel: bool = False,
    fused: bool = False,
) -> tuple[Tensor, Tensor]:
    """Dual potentials ``(f, g)`` of OT_eps for cost matrix ``c`` (..., N, M); no autograd.

    :func:`sinkhorn_loop` on the dense matrix. With ``scaling`` the temperature of iteration k
    is ``max(eps, max(C) * scaling**k)`` (eps-scaling: potentials are in cost units, so they
    carry over between temperatures); the annealing reaches ``eps`` after
    ``log(max C / eps) / log(1 / scaling)`` iterations (17 for MNIST costs ~5e3 at eps 0.05
    with scaling 0.5), the rest run at ``eps``. ``eps`` may be a tensor broadcastable to
    ``c.shape[:-2]`` (one temperature per problem: a batched sweep). ``tol`` (optional, float
    ``eps`` only) stops once the row-marginal L1 error is below it, checked every
    ``check_every`` iterations -- that check syncs with the host, so training leaves ``tol=None``.
    With a fixed ``n_iter`` and ``tol=None`` nothing is read on the host (CUDA-graph safe).
    ``cache_kernel`` runs the same iterations through :class:`CachedKernelSoftmin` (one host
    read per half-iteration; ~5x fewer exponentials at a fixed temperature): for CPU solves.
    ``fused`` runs the fixed-length loop compiled (:func:`fused_solve`); it needs ``tol=None`` and no
    ``cache_kernel`` (both read the host inside the loop).
    """
    if fused and (tol is not None or cache_kernel):
        raise ConfigError("sinkhorn_potentials: the fused solve runs a fixed n_iter (tol=None, cache_kernel=False)")
    if tol is not None and isinstance(eps, Tensor):
        raise ConfigError("sinkhorn_potentials: tol needs a single float eps")
    c, a, b = c.detach(), a.detach(), b.detach()
    lead = tuple(c.shape[:-2])
    log_a, log_b = _log_weights(a).expand(*lead, c.shape[-2]), _log_weights(b).expand(*lead, c.shape[-1])
    c_max = live_max_cost(c, a, b) if scaling is not None else None
    schedule = eps_schedule(c_max, eps, n_iter, scaling, like=c, lead=lead)
    ct = c.transpose(-1, -2).contiguous()  # the g-update reduces over rows: make them the last axis
    stop = None
    if tol is not None:
        first_check = _anneal_len(c, float(eps), scaling)

        def stop(k: int, f: Tensor, g: Tensor) -> bool:
            if (k + 1) % check_every or k + 1 < first_check:
                return False
            # After the g-update the column marginals are exact; measure the row marginals.
            plan_rows = torch.exp(log_a + (f - _softmin(eps, c, log_b + g / eps)) / eps)
            return float((plan_rows - a).abs().sum(-1).max()) < tol

    if cache_kernel:
        return sinkhorn_loop(CachedKernelSoftmin(c), CachedKernelSoftmin(ct), log_a, log_b, schedule, stop)
    if fused:
        return fused_solve(c, ct, log_a, log_b, schedule)
    return sinkhorn_loop(lambda e, h: _softmin(e, c, h), lambda e, h: _softmin(e, ct, h), log_a, log_b,
                         schedule, stop)


def _anneal_len(c: Tensor, eps: float, scaling: float | None) -> int:
    """Iterations the eps-scaling schedule needs to reach eps (host sync; only used with tol)."""
    if scaling is None:
        return 0
    cmax = max(float(c.max()), eps)
    return int(math.ceil(math.log(cmax / eps) / math.log(1.0 / scaling)))


def ot_value_from_potentials(c: Tensor, a: Tensor, b: Tensor, g: Tensor, eps: float | Tensor) -> Tensor:
    """``<a, f> + <b, g>`` with ``f`` the soft-c-transform of the detached ``g``.

    ``c`` should carry autograd (the differentiable cost); the result's gradient is the
    envelope-theorem gradient described in the module docstring.
    """
    f = _softmin(eps, c, (_log_weights(b.detach()) + g.detach() / eps))
    return (a * f).sum(-1) + (b * g.detach()).sum(-1)


def transport_plan(c: Tensor, a: Tensor, b: Tensor, f: Tensor, g: Tensor, eps: float) -> Tensor:
    """``P_ij = a_i b_j exp((f_i + g_j - C_ij) / eps)`` (diagnostics and tests)."""
    log_p = _log_weights(a).unsqueeze(-1) + _log_weights(b).unsqueeze(-2) + (f.unsqueeze(-1) + g.unsqueeze(-2) - c) / eps
    return exp_floored(log_p)


def entropic_ot(
    x: Tensor,
    y: Tensor,
    a: Tensor | None = None,
    b: Tensor | None = None,
    *,
    eps: float,
    cost: GroundCost | None = None,
    n_iter: int = DEFAULT_N_ITER,
    scaling: float | None = DEFAULT_SCALING,
    tol: float | None = None,
    validate: bool = True,
    cache_kernel: bool = False,
) -> Tensor:
    """``OT_eps(a, X; b, Y)`` for clouds ``x`` (..., N, D), ``y`` (..., M, D); shape (...).

    ``a``/``b`` default to uniform weights. ``cost`` defaults to ``||x-y||_2^2``.
    ``validate`` checks weight values (host syncs): turn it off in a hot training loop.
    ``cache_kernel``: see :func:`sinkhorn_potentials`.
    """
    check_solver_args(eps, n_iter, scaling, tol)
    if x.ndim < 2 or y.ndim < 2:
        raise DataError(f"entropic_ot: point clouds must be (..., N, D), got x {tuple(x.shape)}, y {tuple(y.shape)}")
    if x.shape[-2] == 0 or y.shape[-2] == 0:
        raise DataError(f"entropic_ot: empty point cloud (x has {x.shape[-2]} points, y has {y.shape[-2]})")
    cost = SquaredEuclideanCost() if cost is None else cost
    lead = tuple(x.shape[:-2])
    a = uniform_weights(x.shape[-2], x, lead) if a is None else a.to(x.dtype)
    b = uniform_weights(y.shape[-2], y, tuple(y.shape[:-2])) if b is None else b.to(y.dtype)
    if validate:
        _check_weights(a, x.shape[-2], "weights a")
        _check_weights(b, y.shape[-2], "weights b")
    c = cost(x, y)
    _, g = sinkhorn_potentials(c, a, b, eps, n_iter=n_iter, scaling=scaling, tol=tol, cache_kernel=cache_kernel)
    return ot_value_from_potentials(c, a, b, g, eps)
