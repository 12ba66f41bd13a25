"""DP-CGAN's conditional MLP generator and discriminator (Torkzadehmahani, Kairouz, Paten, "DP-CGAN:
Differentially Private Synthetic Data and Label Generation", CVPR Workshops 2019, arXiv:2001.09700;
the authors' MNIST script as mirrored in ``ParkLabML/DP-MERF`` ``dpcgan/dp_cgan_reference_im.py``,
described here in our words).

Both networks are one-hidden-layer MLPs conditioned by concatenating the one-hot label to their
input:

- generator: ``[z, one_hot(y)]`` -> Linear(latent + classes, 128) -> ReLU -> Linear(128, C*28*28)
  -> sigmoid, reshaped to (C, 28, 28); ``z ~ U(-1, 1)^100``; outputs in [0, 1] like the records it
  imitates (pixels / 255);
- discriminator: ``[x_flat, one_hot(y)]`` -> Linear(C*28*28 + classes, 128) -> ReLU -> Linear(128, 1),
  a logit (the loss applies the sigmoid).

Weights start from ``N(0, 2 / fan_in)`` (the reference's "xavier_init", whose std is
``1 / sqrt(fan_in / 2)``), biases from zero. No batch normalisation anywhere: a BN layer would mix
the records of a batch in the forward pass, so one record's gradient would no longer be its own and
per-example clipping would not bound its influence.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from dpsynth.errors import ConfigError
from dpsynth.nets.base import Generator

__all__ = ["CGANDiscriminator", "CGANGenerator"]


def _he_normal_(layer: nn.Linear) -> nn.Linear:
    """The reference's initialisation: weights N(0, 2 / fan_in), zero biases (global torch RNG: the
    caller seeds it, see ``nets.build_seeded_generator``)."""
    with torch.no_grad():
        layer.weight.normal_(0.0, math.sqrt(2.0 / layer.in_features))
        layer.bias.zero_()
    return layer


class CGANGenerator(Generator):
    """``(z, y) -> image`` in [0, 1], shape (out_channels, image_size, image_size)."""

    def __init__(self, latent_dim: int = 100, num_classes: int = 10, hidden: int = 128, out_channels: int = 1,
                 image_size: int = 28) -> None:
        if num_classes is None or num_classes < 1:
            raise ConfigError(f"CGANGenerator is class-conditional: num_classes must be >= 1, got {num_classes!r}")
        super().__init__(latent_dim, num_classes, (out_channels, image_size, image_size), "uniform_symmetric")
        self.fc1 = _he_normal_(nn.Linear(latent_dim + num_classes, hidden))
        self.fc2 = _he_normal_(nn.Linear(hidden, out_channels * image_size * image_size))

    def forward(self, z: Tensor, labels: Tensor | None = None) -> Tensor:
        self._check_inputs(z, labels)
        assert labels is not None and self.num_classes is not None
        h = torch.cat([z, F.one_hot(labels.long(), self.num_classes).to(z.dtype)], dim=1)
        out = torch.sigmoid(self.fc2(F.relu(self.fc1(h))))
        return out.reshape(len(z), *self.output_shape)


class CGANDiscriminator(nn.Module):
    """``(x, y) -> logit`` (B,), ``x`` of any shape (B, ...) with ``in_dim`` values per record."""

    def __init__(self, in_dim: int = 784, num_classes: int = 10, hidden: int = 128) -> None:
        super().__init__()
        if in_dim < 1 or num_classes < 1:
            raise ConfigError(f"CGANDiscriminator needs in_dim >= 1 and num_classes >= 1, got {in_dim}, {num_classes}")
        self.num_classes = int(num_classes)
        self.fc1 = _he_normal_(nn.Linear(in_dim + num_classes, hidden))
        self.fc2 = _he_normal_(nn.Linear(hidden, 1))

    def forward(self, x: Tensor, labels: Tensor) -> Tensor:
        # one-hot by comparison, not F.one_hot: the per-example gradients run it under torch.func.vmap,
        # which cannot batch one_hot's data-dependent range check
        classes = torch.arange(self.num_classes, device=labels.device)
        one_hot = (labels.long()[:, None] == classes).to(x.dtype)
        h = torch.cat([x.reshape(len(x), -1), one_hot], dim=1)
        return self.fc2(F.relu(self.fc1(h))).squeeze(-1)
