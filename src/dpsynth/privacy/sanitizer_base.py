"""What every sanitizer shares: the argument checks, the clip, the noise draw, the release statistics.

Each privacy barrier (``privacy/sanitizers.py``: the image and parameter-gradient barriers;
``privacy/record_sanitizers.py``: DP-MERF's mean embedding and DP-SGD's per-example gradients) is a
small subclass of :class:`Sanitizer`. The base owns what used to be written once per class -- the
noise generator must be an explicit ``torch.Generator`` (secret, checkpointed for an exact resume),
``sigma`` finite and >= 0, a clip bound finite and > 0, the count of releases, the statistics of the
last release -- so a new barrier cannot forget one of them, and a fix to one reaches all.

The subclasses keep the math (``release_batch``, with a leading trials axis so the Monte-Carlo audit
in ``privacy/audit.py`` runs the very same code) and their own release-once rule, which differs by
barrier: an autograd token (image gradients), a gradient-accumulation hook (parameter gradients), a
released flag (the one mean-embedding release).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dpsynth.errors import PrivacyError

__all__ = ["ReleaseStats", "Sanitizer", "check_pos", "check_positive_int", "clip_rows", "draw_noise",
           "require_finite", "vector_norm"]

# Multiply the clip factor by (1 - _SAFETY * machine eps) so rounding the clipped
# tensor back to its dtype can never push its norm above the bound.
_SAFETY = 8.0


@dataclass(frozen=True)
class ReleaseStats:
    """Norms of the last release (for logs). ``clean_norm`` is before clipping."""

    clean_norm: float
    clipped_norm: float
    noise_norm: float
    released_norm: float
    clipped: bool
    extra_clean_norm: float = 0.0  # WholeBatch only: the n' noise-free images


def check_pos(name: str, v: float, allow_zero: bool = False) -> float:
    """``v`` as a float, or PrivacyError: it must be a finite number > 0 (>= 0 with ``allow_zero``)."""
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and v != float("inf")
    if not ok or (v < 0 if allow_zero else v <= 0):
        bound = ">= 0" if allow_zero else "> 0"
        raise PrivacyError(f"{name} must be a finite number {bound}, got {v!r}")
    return float(v)


def check_positive_int(name: str, v: int) -> int:
    """``v``, or PrivacyError: it must be an int >= 1 (a bool is not a count)."""
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise PrivacyError(f"{name} must be a positive integer, got {v!r}")
    return v


def require_finite(t: torch.Tensor, what: str) -> None:
    """Refuse (PrivacyError) to release a tensor holding NaN or Inf (one host sync)."""
    if not bool(torch.isfinite(t).all()):
        raise PrivacyError(f"refusing to release a non-finite (NaN/Inf) {what}; nothing was released")


def clip_rows(g: torch.Tensor, bound: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Clip each row of a 2-D tensor to L2 norm ``bound``; returns (clipped, clean norms).

    Norms are taken in float64 so huge float32 values cannot overflow to inf, and the
    scale carries a safety margin so the result, rounded to ``g.dtype``, is <= bound.
    """
    g64 = g.to(torch.float64)
    norms = torch.linalg.vector_norm(g64, dim=1)
    margin = 1.0 - _SAFETY * torch.finfo(g.dtype).eps
    scale = torch.where(norms > bound, bound * margin / norms.clamp_min(1e-300), torch.ones_like(norms))
    return (g64 * scale[:, None]).to(g.dtype), norms


def draw_noise(shape: torch.Size, std: float, gen: torch.Generator, like: torch.Tensor) -> torch.Tensor:
    """``N(0, std^2)`` of ``shape`` from ``gen`` (drawn in float64 on the generator's device), as ``like``."""
    z = torch.randn(shape, generator=gen, device=gen.device, dtype=torch.float64)
    return (z * std).to(device=like.device, dtype=like.dtype)


def vector_norm(t: torch.Tensor) -> float:
    """The L2 norm of a whole tensor, in float64, as a host float (for ``ReleaseStats``)."""
    return float(torch.linalg.vector_norm(t.double()))


class Sanitizer:
    """The base of every privacy barrier: the checked noise multiplier, clip bound and generator, the
    release count and the last release's statistics (``last``, read at log time only).

    ``clip`` None: the barrier's bound is not a gradient clip (DP-MERF's feature-norm bound is checked
    by its subclass under its own name)."""

    def __init__(self, sigma: float, generator: torch.Generator, *, clip: float | None = None) -> None:
        if not isinstance(generator, torch.Generator):
            raise PrivacyError("a torch.Generator is required for the noise (reproducibility and resume)")
        if clip is not None:
            self.clip = check_pos("clip bound C", clip)
        self.sigma = check_pos("noise multiplier sigma", sigma, allow_zero=True)
        self.generator = generator
        self.last: ReleaseStats | None = None
        self.releases = 0  # how many times this barrier released, ever

    @property
    def noise_std(self) -> float:  # pragma: no cover - every barrier states its own
        raise NotImplementedError

    def _record(self, *, clean_norm: float, clipped: torch.Tensor | float, noise: torch.Tensor,
                released: torch.Tensor, was_clipped: bool) -> ReleaseStats:
        """Set ``last`` from the last trial's tensors (a float ``clipped`` is taken as its norm)."""
        self.last = ReleaseStats(
            clean_norm=float(clean_norm),
            clipped_norm=clipped if isinstance(clipped, float) else vector_norm(clipped),
            noise_norm=vector_norm(noise),
            released_norm=vector_norm(released),
            clipped=bool(was_clipped),
        )
        return self.last
