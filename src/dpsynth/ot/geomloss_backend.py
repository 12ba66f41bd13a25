"""The same entropic OT through geomloss -- the library the published DP-Sinkhorn code used.

Mapping to geomloss's parameters (the trap): geomloss's temperature is ``blur**p`` and its
built-in ``p=2`` cost is ``|x-y|^2 / 2``. We always pass our own cost callable (so the cost
is exactly ours, e.g. ``||x-y||^2`` with no 1/2) and ``p=2`` only to fix the temperature:
``blur = sqrt(eps)`` gives geomloss's ``eps = blur**2`` = our eps in the cost's units.
geomloss's eps-scaling starts at ``diameter**2`` (bounding-box diameter of the clouds) and
divides the temperature by ``scaling**2`` per iteration, doing ONE symmetric Sinkhorn update
per temperature; with the default ``scaling=0.5`` that is ~10 iterations at MNIST scale,
so it is close to, not at, convergence. ``debias=False`` returns the raw OT_eps
``<a, f> + <b, g>``.

geomloss computes ``C(x, y.detach())`` and ``C(y, x.detach())``; x/y gradients are the
envelope gradients, but parameters inside a learned cost (FeatureAugmentedCost's phi)
would receive twice their gradient -- use ``entropic_ot`` for those.
"""

from __future__ import annotations

import math

from torch import Tensor

from dpsynth.errors import ConfigError
from dpsynth.ot.costs import GroundCost, SquaredEuclideanCost

__all__ = ["geomloss_entropic_ot"]


def geomloss_entropic_ot(
    x: Tensor,
    y: Tensor,
    a: Tensor | None = None,
    b: Tensor | None = None,
    *,
    eps: float,
    cost: GroundCost | None = None,
    scaling: float = 0.5,
    diameter: float | None = None,
) -> Tensor:
    """OT_eps via ``geomloss.SamplesLoss("sinkhorn", backend="tensorized", debias=False)``.

    ``x`` (N, D) or (B, N, D); weights default to uniform. Same value convention as
    ``entropic_ot`` (our cost, temperature in its units).
    """
    from geomloss import SamplesLoss  # optional heavy import kept local

    if not (math.isfinite(eps) and eps > 0):
        raise ConfigError(f"entropic OT temperature eps must be > 0, got eps={eps!r}")
    if not (0.0 < scaling < 1.0):
        raise ConfigError(f"geomloss scaling must be in (0, 1), got scaling={scaling!r}")
    cost = SquaredEuclideanCost() if cost is None else cost
    loss = SamplesLoss(
        "sinkhorn",
        p=2,
        blur=math.sqrt(eps),
        scaling=scaling,
        debias=False,
        backend="tensorized",
        cost=cost,
        diameter=diameter,
    )
    if a is None and b is None:
        return loss(x, y)
    if a is None:
        a = x.new_full(x.shape[:-1], 1.0 / x.shape[-2])
    if b is None:
        b = y.new_full(y.shape[:-1], 1.0 / y.shape[-2])
    return loss(a, x, b, y)
