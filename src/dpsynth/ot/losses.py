"""Sinkhorn divergence and the semi-debiased Sinkhorn loss of DP-Sinkhorn (seeds 001/002).

Definition (NeurIPS 2021, seed 002): with mixture fraction ``p`` in [0, 1], ``n' = floor(p n)``
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

from torch import Tensor

from dpsynth.errors import ConfigError, DataError
from dpsynth.ot.costs import GroundCost
from dpsynth.ot.sinkhorn import DEFAULT_N_ITER, DEFAULT_SCALING, entropic_ot

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
    p: float,
    eps: float,
    cost: GroundCost | None = None,
    real_weights: Tensor | None = None,
    n: int | None = None,
    n_iter: int = DEFAULT_N_ITER,
    scaling: float | None = DEFAULT_SCALING,
    tol: float | None = None,
    validate: bool = True,
) -> Tensor:
    """``S_p = 2 W(X[0:n], Y) - W(X[0:n], X[n':n+n'])`` (see module docstring for p = 0, 1).

    ``x_gen`` holds ``n + floor(p n)`` generated points (..., n + n', D) (already embedded,
    e.g. by ``embed_with_labels``); ``n`` is inferred when not given. ``y_real`` (..., M, D)
    with optional ``real_weights`` (..., M) summing to 1 -- zero weights mark padding of a
    Poisson batch. Generated points get uniform weights. Returns a tensor of shape (...).
    """
    total = x_gen.shape[-2]
    if n is None:
        n, n_prime = split_generated(total, p)
    else:
        n_prime = num_extra(n, p)
        if n + n_prime != total:
            raise DataError(
                f"semi_debiased_loss: expected n + floor(p*n) = {n} + {n_prime} = {n + n_prime} generated "
                f"points at p={p}, got {total}"
            )
    kw = dict(eps=eps, cost=cost, n_iter=n_iter, scaling=scaling, tol=tol, validate=validate)
    x = x_gen[..., :n, :]
    x_second = x_gen[..., n_prime : n + n_prime, :]
    return 2.0 * entropic_ot(x, y_real, None, real_weights, **kw) - entropic_ot(x, x_second, **kw)
