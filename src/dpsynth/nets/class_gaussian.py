"""The central baseline's "generator": a class-conditional Gaussian held as buffers, no trainable weight
(``methods/central_baseline.py`` fits it, in closed form, to one noisy release of class moments).

Per class c: a mean ``means[c]`` (D,) and a covariance factor ``factors[c]`` (r, r) in the subspace spanned by
``basis`` (D, r), all in the released units z = x / sqrt(D). A latent e ~ N(0, I_r) and a label c give

    x = clip(sqrt(D) (means[c] + basis factors[c] e), 0, 1),

an image in [0, 1] (output range "sigmoid", as DP-MERF's generator) of shape ``output_shape``. ``priors`` are
the released class frequencies (for ``sample_labels``; the evaluation protocol samples balanced labels). Every
buffer is a function of the released statistics only; a fresh module holds zeros until they are loaded, and the
released file restores them (``load_state_dict``), so building, sampling and loading go the way of every generator.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from dpsynth.errors import ConfigError
from dpsynth.nets.base import Generator

__all__ = ["ClassGaussianGenerator"]


class ClassGaussianGenerator(Generator):
    def __init__(self, num_classes: int = 10, rank: int = 20, output_shape: tuple[int, ...] | list[int] = (1, 28, 28)
                 ) -> None:
        shape = tuple(int(s) for s in output_shape)
        dim = math.prod(shape)
        if not 1 <= rank <= dim:
            raise ConfigError(f"ClassGaussianGenerator: rank {rank} must be in [1, {dim}]")
        super().__init__(rank, num_classes, shape, "normal")
        self.dim = dim
        self.register_buffer("priors", torch.full((num_classes,), 1.0 / num_classes))
        self.register_buffer("means", torch.zeros(num_classes, dim))
        self.register_buffer("basis", torch.zeros(dim, rank))
        self.register_buffer("factors", torch.zeros(num_classes, rank, rank))

    @torch.no_grad()
    def set_model(self, priors: Tensor, means: Tensor, basis: Tensor, factors: Tensor) -> None:
        """Load a fitted model (its shapes checked against this module's)."""
        for name, value in (("priors", priors), ("means", means), ("basis", basis), ("factors", factors)):
            buf = getattr(self, name)
            if tuple(value.shape) != tuple(buf.shape):
                raise ConfigError(f"ClassGaussianGenerator.{name}: expected shape {tuple(buf.shape)}, "
                                  f"got {tuple(value.shape)}")
            buf.copy_(value.to(buf.dtype))

    def sample_labels(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """``n`` labels drawn by the released class priors."""
        return torch.multinomial(self.priors, n, replacement=True, generator=generator)

    def forward(self, z: Tensor, labels: Tensor | None = None) -> Tensor:
        self._check_inputs(z, labels)
        assert labels is not None
        lab = labels.long().to(self.means.device)
        e = torch.einsum("nr,nkr->nk", z.to(self.factors.dtype), self.factors[lab])
        x = (self.means[lab] + e @ self.basis.T) * math.sqrt(self.dim)
        return x.clamp(0.0, 1.0).reshape(len(z), *self.output_shape)
