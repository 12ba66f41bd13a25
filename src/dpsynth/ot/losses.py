"""Sinkhorn divergence and the semi-debiased Sinkhorn loss of DP-Sinkhorn (DP-Sinkhorn (NeurIPS 2021, arXiv:2111.01177)).

Definition (NeurIPS 2021, project page and supplementary): with mixture fraction ``p`` in [0, 1], ``n' = floor(p n)``
and ``n + n'`` generated points X, real points Y,

    S_p(X, Y) = 2 W(X[0:n], Y) - W(X[0:n], X[n':n+n'])

(the real-real term -W(Y, Y) is dropped: it has no generator gradient).

* ``p = 0``: ``n' = 0`` and the second batch IS the first: ``2 W(X, Y) - W(X, X)`` -- the
  biased estimator of Algorithm 1 of the ICLR paper.
* ``p = 1``: ``n' = n`` and ``X[n:2n]`` is an independent batch:
  ``2 W(X, Y) - W(X, X')`` -- the fully debiased (unbiased up to the dropped real-real
  term) estimator ``2W(X,Y) - W(X,X') - W(Y,Y')``.
* in between, the second batch re-uses ``n - n'`` of the first batch's points.

Only ``X[0:n]`` ever meets real data; ``X[n:n+n']`` only enters the generated-generated
term (the basis of the NeurIPS privacy proof).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from dpsynth.errors import ConfigError, DataError
from dpsynth.ot.costs import GroundCost, SquaredEuclideanCost
from dpsynth.ot.sinkhorn import (
    DEFAULT_N_ITER,
    DEFAULT_SCALING,
    _check_weights,
    check_solver_args,
    entropic_ot,
    ot_value_from_potentials,
    sinkhorn_potentials,
    uniform_weights,
)

__all__ = ["num_extra", "split_generated", "sinkhorn_divergence", "semi_debiased_loss"]


def num_extra(n: int, p: float) -> int:
    """``n' = floor(p * n)``, robust to float error (0.29 * 100 is 28.999... in binary)."""
    if not (0.0 <= p <= 1.0):
        raise ConfigError(f"semi-debias mixture fraction p must lie in [0, 1], got p={p!r}")
    if n < 1:
        raise ConfigError(f"generated batch size n must be >= 1, got n={n!r}")
    return int(math.floor(p * n + 1e-9))


def split_generated(total: int, p: float) -> tuple[int, int]:
    """Recover ``(n, n')`` from the number of generated rows ``n + floor(p n)``."""
    # n + floor(p n) is strictly increasing in n, so at most one n matches.
    n = max(1, int(total / (1.0 + p)))
    for cand in (n - 1, n, n + 1):
        if cand >= 1 and cand + num_extra(cand, p) == total:
            return cand, num_extra(cand, p)
    raise DataError(f"{total} generated points is not n + floor(p*n) for any n at p={p}; pass n explicitly")


def sinkhorn_divergence(
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
) -> Tensor:
    """``S = W(X, Y) - W(X, X)/2 - W(Y, Y)/2`` (Feydy et al.; the papers' Def. A.1 is 2S)."""
    kw = dict(eps=eps, cost=cost, n_iter=n_iter, scaling=scaling, tol=tol, validate=validate)
    return (
        entropic_ot(x, y, a, b, **kw)
        - 0.5 * entropic_ot(x, x, a, a, **kw)
        - 0.5 * entropic_ot(y, y, b, b, **kw)
    )


def semi_debiased_loss(
    x_gen: Tensor,
    y_real: Tensor,
    *,
    p: float | None = None,
    eps: float | Tensor,
    cost: GroundCost | None = None,
    real_weights: Tensor | None = None,
    n: int | None = None,
    n_extra: int | None = None,
    n_iter: int = DEFAULT_N_ITER,
    scaling: float | None = DEFAULT_SCALING,
    tol: float | None = None,
    validate: bool = True,
    fused: bool = False,
) -> Tensor:
    """``S_p = 2 W(X[0:n], Y) - W(X[0:n], X[n':n+n'])`` (see module docstring for p = 0, 1).

    THE DP-Sinkhorn loss: every training path (the fast step, its CUDA graph, the batched sweep)
    calls it. ``x_gen`` holds ``n + n'`` generated points (..., n + n', D), already embedded
    (e.g. by ``embed_with_labels``); give ``p`` (``n`` inferred, or checked) or ``n`` and
    ``n_extra``. ``y_real`` (..., M, D) with optional ``real_weights`` (..., M) summing to 1 --
    zero weights mark padding of a Poisson batch; all-zero weights (an empty Poisson batch,
    only with ``validate=False``) make the real term exactly 0, so the step still counts.
    ``eps`` may be a tensor of shape ``...`` (one temperature per problem), ``cost`` a
    :class:`~dpsynth.ot.costs.MixedL2L1Cost` with one ``m`` per problem. Returns shape (...).

    Both OT terms are solved in ONE Sinkhorn run: ``W(X, X2)`` and ``W(X, Y)`` share the rows
    ``X``, so the two column sets are stacked into a ``(..., 2, n, M')`` problem, each padded
    with zero-weight columns to the common ``M'``. Zero weights are exactly absent in the log
    domain (log-weight -inf; the eps-scaling starts from the largest *live* cost), so this is
    the value and gradients of two ``entropic_ot`` calls with half the loop's launches.
    ``fused`` runs that loop with each iteration compiled (:func:`~dpsynth.ot.sinkhorn.fused_solve`; the
    CUDA step's default): the same solve within float32 rounding.
    """
    n, n_prime = _generated_split(x_gen.shape[-2], p, n, n_extra)
    # A per-problem eps tensor is the caller's to check (StepSpec does); the rest is checked here.
    check_solver_args(eps if not isinstance(eps, Tensor) else 1.0, n_iter, scaling, tol)
    x, x_second = x_gen[..., :n, :], x_gen[..., n_prime : n + n_prime, :]
    lead = tuple(x.shape[:-2])
    n2, mm = x_second.shape[-2], y_real.shape[-2]
    w = uniform_weights(mm, x, lead) if real_weights is None else real_weights.to(x.dtype)
    if validate:
        _check_weights(w, mm, "real_weights")
    cols = max(n2, mm)

    def pad(t: Tensor, rows: int) -> Tensor:
        return t if t.shape[-2] == rows else torch.cat([t, t.new_zeros(*lead, rows - t.shape[-2], t.shape[-1])], -2)

    def padw(v: Tensor, rows: int) -> Tensor:
        return v if v.shape[-1] == rows else torch.cat([v, v.new_zeros(*lead, rows - v.shape[-1])], -1)

    ys = torch.stack([pad(x_second, cols), pad(y_real.to(x.dtype), cols)], dim=-3)  # (..., 2, cols, D)
    b_gen = padw(x.new_full((*lead, n2), 1.0 / n2), cols)
    nonempty = (w.sum(-1, keepdim=True) > 0).to(x.dtype)  # (..., 1)
    # An empty real batch has no distribution: solve against the generated weights instead
    # (any valid weights) and zero its term -- the same as skipping it, without a branch.
    b_real = torch.where(nonempty > 0, padw(w, cols), b_gen)
    b = torch.stack([b_gen, b_real], dim=-2)  # (..., 2, cols)
    a = x.new_full((*lead, 2, n), 1.0 / n)
    cost = SquaredEuclideanCost() if cost is None else cost
    c = cost(x.unsqueeze(-3), ys)  # (..., 2, n, cols)
    eps_lead = eps.reshape(*eps.shape, 1) if isinstance(eps, Tensor) else eps  # one per problem pair
    _, g = sinkhorn_potentials(c, a, b, eps_lead, n_iter=n_iter, scaling=scaling, tol=tol, fused=fused)
    e = eps_lead if isinstance(eps_lead, Tensor) else torch.full((), eps, dtype=c.dtype, device=c.device)
    e = e.to(c.dtype).expand(*lead, 2).unsqueeze(-1)  # (..., 2, 1)
    ot = ot_value_from_potentials(c, a, b, g, e)  # (..., 2): W(X, X2), W(X, Y)
    return 2.0 * nonempty[..., 0] * ot[..., 1] - ot[..., 0]


def _generated_split(total: int, p: float | None, n: int | None, n_extra: int | None) -> tuple[int, int]:
    """``(n, n')`` from ``p`` and/or ``n``/``n_extra``, checked against the rows given."""
    if n is None:
        if p is None:
            raise ConfigError("semi_debiased_loss: give p, or n and n_extra")
        return split_generated(total, p)
    n_prime = n_extra if n_extra is not None else num_extra(n, p if p is not None else 0.0)
    if p is not None and n_extra is not None and n_extra != num_extra(n, p):
        raise ConfigError(f"semi_debiased_loss: n_extra={n_extra} is not floor(p*n) at p={p}, n={n}")
    if not (0 <= n_prime <= n) or n + n_prime != total:
        raise DataError(
            f"semi_debiased_loss: expected n + n' = {n} + {n_prime} = {n + n_prime} generated "
            f"points{f' at p={p}' if p is not None else ''}, got {total}"
        )
    return n, n_prime
