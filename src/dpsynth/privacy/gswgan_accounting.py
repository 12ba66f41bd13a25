"""GS-WGAN's privacy, both ways (docs/deviations.md row 8): the published per-sample count and the
sound per-step account.

Why a file of its own: GS-WGAN is the one method whose step is not the subsampled Gaussian it looks
like -- all ``batch_size`` per-sample releases of a step come from the same shard -- so its
accounting is a composition rule on top of ``accounting`` (the generic subsampled-Gaussian
accountant), not part of it. ``privacy.mechanisms.GSWGANGaussian`` plans, guards and verifies runs
with these functions; ``dpsynth privacy --method gs_wgan`` prints them.
"""

from __future__ import annotations

import math

import numpy as np

from dpsynth.errors import PrivacyError
from dpsynth.privacy.accounting import calibrate_sigma, check_sigma, check_steps, epsilon, max_steps


def _check_gswgan(shards: int, batch_size: int) -> None:
    for name, v in (("shards", shards), ("batch_size", batch_size)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise PrivacyError(f"{name} must be a positive integer, got {v!r}")


def gswgan_sound_step(sigma: float, shards: int, batch_size: int) -> tuple[float, float]:
    """One GS-WGAN generator step as the SOUND accounting composes it: ``(noise multiplier, q)``.

    Within a step all ``batch_size`` per-sample releases come from the SAME critic's shard, so
    their noise adds up: the step is one Gaussian of multiplier ``sigma / sqrt(batch_size)`` over a
    shard picked with probability ``1 / shards`` (Poisson-style). Every sound GS-WGAN figure --
    epsilon, calibrated sigma, step budget, budget guard, ledger -- is this step composed."""
    _check_gswgan(shards, batch_size)
    return check_sigma(sigma) / math.sqrt(batch_size), 1.0 / shards


def gswgan_epsilon(
    sigma: float, shards: int, batch_size: int, steps: int, delta: float, *, pld: bool = False
) -> dict[str, dict[str, float]]:
    """GS-WGAN epsilon both ways (docs/deviations.md row 8).

    ``as_published``: ``steps * B`` per-sample releases, each a Gaussian of multiplier
    ``sigma`` subsampled at rate ``1/N_d`` without replacement (replace-one), the
    Wang-Balle-Kasiviswanathan bound the paper's code used (its reference [39]); this
    reproduces the published ~10 (classic) / ~9.2 (modern). The same count with Poisson
    sampling is given as ``as_published_poisson`` for reference.
    ``sound``: within a step all B releases come from the SAME shard, so a step is one
    subsampled release of a Gaussian with multiplier ``sigma / sqrt(B)`` (Poisson-style
    rate ``1/N_d``; one shard chosen uniformly per step): ~366 for the published settings.
    """
    _check_gswgan(shards, batch_size)
    sigma, steps = check_sigma(sigma), check_steps(steps)
    q = 1.0 / shards
    return {
        "as_published": epsilon(sigma, q, steps * batch_size, delta, sampling="without_replacement", pld=pld),
        "as_published_poisson": epsilon(sigma, q, steps * batch_size, delta, sampling="poisson", pld=pld),
        "sound": epsilon(*gswgan_sound_step(sigma, shards, batch_size), steps, delta, sampling="poisson", pld=pld),
    }


def gswgan_sound_sigma(
    shards: int, batch_size: int, steps: int, delta: float, target_eps: float, *, conversion: str = "classic"
) -> float:
    """Per-sample noise multiplier ``sigma`` that makes the SOUND GS-WGAN epsilon meet the target."""
    _check_gswgan(shards, batch_size)
    eff = calibrate_sigma(1.0 / shards, steps, delta, target_eps, conversion=conversion, sampling="poisson")
    return eff * math.sqrt(batch_size)


def gswgan_sound_max_steps(
    sigma: float, shards: int, batch_size: int, delta: float, target_eps: float, *, conversion: str = "classic"
) -> int:
    """Generator steps that keep the SOUND GS-WGAN epsilon within the target."""
    return max_steps(*gswgan_sound_step(sigma, shards, batch_size), delta, target_eps, conversion=conversion)
