"""Small MLP generator: Reshetova et al.'s (arXiv:2306.09547) 2-D manifold experiments (latent U[-1,1]^2, 2x256 hidden)
and its Fig. 5 model (2 x 500 hidden, latent U[0,1]^2, flattened 784-pixel output)."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from dpsynth.errors import ConfigError
from dpsynth.nets.base import Generator

__all__ = ["MLPGenerator"]

_ACTIVATIONS = {"none": nn.Identity, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}


class MLPGenerator(Generator):
    """``z -> [Linear, ReLU] * len(hidden) -> Linear -> output_activation`` (unconditional)."""

    def __init__(
        self,
        latent_dim: int = 2,
        output_dim: int = 2,
        hidden: Sequence[int] = (256, 256),
        latent_dist: str = "uniform_symmetric",
        output_activation: str = "none",
    ) -> None:
        if output_activation not in _ACTIVATIONS:
            raise ConfigError(f"unknown output_activation {output_activation!r}; choose one of {sorted(_ACTIVATIONS)}")
        super().__init__(latent_dim, None, (output_dim,), latent_dist)
        layers: list[nn.Module] = []
        width = latent_dim
        for h in hidden:
            layers += [nn.Linear(width, int(h)), nn.ReLU()]
            width = int(h)
        layers += [nn.Linear(width, output_dim), _ACTIVATIONS[output_activation]()]
        self.net = nn.Sequential(*layers)

    def forward(self, z: Tensor, labels: Tensor | None = None) -> Tensor:
        self._check_inputs(z, labels)
        return self.net(z)
