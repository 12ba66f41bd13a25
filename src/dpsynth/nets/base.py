"""What every generator exposes, so method code never hard-codes a latent distribution."""

from __future__ import annotations

import itertools

import torch
from torch import Tensor, nn

from dpsynth.errors import ConfigError

__all__ = ["Generator", "LATENT_DISTS"]

# name -> what it is; uniform = U(0,1) (DP-Sinkhorn Alg. 1, Reshetova et al. MNIST),
# uniform_symmetric = U(-1,1) (Reshetova et al., arXiv:2306.09547, 2-D manifolds), normal = N(0, 1).
LATENT_DISTS = ("uniform", "uniform_symmetric", "normal")


class Generator(nn.Module):
    """Base class: ``forward(z, labels=None)`` plus samplers for ``z`` and labels.

    ``num_classes`` is None for an unconditional generator. ``output_shape`` is the shape
    of one sample (e.g. (1, 28, 28) or (2,)).
    """

    latent_dim: int
    num_classes: int | None
    output_shape: tuple[int, ...]
    latent_dist: str

    def __init__(self, latent_dim: int, num_classes: int | None, output_shape: tuple[int, ...], latent_dist: str) -> None:
        super().__init__()
        if latent_dim < 1:
            raise ConfigError(f"generator latent_dim must be >= 1, got {latent_dim!r}")
        if num_classes is not None and num_classes < 1:
            raise ConfigError(f"generator num_classes must be >= 1 or None, got {num_classes!r}")
        if latent_dist not in LATENT_DISTS:
            raise ConfigError(f"unknown latent_dist {latent_dist!r}; choose one of {list(LATENT_DISTS)}")
        self.latent_dim = int(latent_dim)
        self.num_classes = None if num_classes is None else int(num_classes)
        self.output_shape = tuple(int(s) for s in output_shape)
        self.latent_dist = latent_dist

    @property
    def conditional(self) -> bool:
        return self.num_classes is not None

    def _first_tensor(self) -> Tensor:
        """A weight, else a buffer (a generator fitted in closed form holds buffers only): its device and dtype
        are the module's."""
        return next(itertools.chain(self.parameters(), self.buffers()))

    def _device(self) -> torch.device:
        return self._first_tensor().device

    def sample_latent(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """``n`` latent codes from this model's latent distribution, on its device."""
        first = self._first_tensor()
        dev, dtype = first.device, first.dtype
        shape = (n, self.latent_dim)
        if self.latent_dist == "normal":
            return torch.randn(shape, generator=generator, device=dev, dtype=dtype)
        u = torch.rand(shape, generator=generator, device=dev, dtype=dtype)
        return 2.0 * u - 1.0 if self.latent_dist == "uniform_symmetric" else u

    def sample_labels(self, n: int, generator: torch.Generator | None = None) -> Tensor | None:
        """``n`` labels uniform over the classes (Alg. 1), or None when unconditional."""
        if self.num_classes is None:
            return None
        return torch.randint(0, self.num_classes, (n,), generator=generator, device=self._device())

    def sample(self, n: int, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor | None]:
        """Draw ``(outputs, labels)``: latent + labels from ``generator``, then a forward pass."""
        z = self.sample_latent(n, generator)
        labels = self.sample_labels(n, generator)
        return self(z, labels), labels

    def _check_inputs(self, z: Tensor, labels: Tensor | None) -> None:
        if z.ndim != 2 or z.shape[1] != self.latent_dim:
            raise ConfigError(f"{type(self).__name__}: z must be (B, {self.latent_dim}), got {tuple(z.shape)}")
        if self.conditional and (labels is None or labels.shape != (z.shape[0],)):
            raise ConfigError(f"{type(self).__name__} is class-conditional: pass labels of shape ({z.shape[0]},)")
        if not self.conditional and labels is not None:
            raise ConfigError(f"{type(self).__name__} is unconditional but labels were passed")
