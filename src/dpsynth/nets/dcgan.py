"""DCGAN-style generator (DP-Sinkhorn MNIST/Fashion-MNIST; Reshetova et al. (arXiv:2306.09547) MNIST with latent 100).

Layout (ICLR App. D.3, 28x28): ``[z, embed(label)]`` as a 1x1 map -> ConvT(k7, s1, p0) to
256x7x7 -> ConvT(256->128, k4 s2 p1) 14x14 -> ConvT(128->64, k4 s2 p1) 28x28 ->
ConvT(64->C, k3 s1 p1) 28x28 -> tanh; ReLU at hidden layers. For 32x32 (CelebA DCGAN row)
the first layer uses k4 (4x4) and the last ConvT(k4 s2 p1) doubles to 32x32.
The papers do not mention batch norm; the published code (NVIDIA DP-Sinkhorn,
``ConvCondGenerator``) has BatchNorm after the three hidden layers, so
``batch_norm=True`` by default. Weights use the DCGAN initialisation by default (``init="dcgan"``);
DP-Sinkhorn builds it with ``init="authors"``, the published code's PyTorch defaults (the papers state
no initialisation). The same class, unconditional with latent 100, is the seed-003 MNIST generator.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from dpsynth.errors import ConfigError
from dpsynth.nets.base import Generator

__all__ = ["DCGANGenerator", "INITS"]

INITS = ("dcgan", "authors")  # DCGAN's N(0, 0.02) (Radford et al.), or the DP-Sinkhorn authors' (PyTorch default)


class DCGANGenerator(Generator):
    def __init__(
        self,
        latent_dim: int = 12,
        num_classes: int | None = 10,
        embed_dim: int = 4,
        channels: tuple[int, int, int] = (256, 128, 64),
        out_channels: int = 1,
        image_size: int = 28,
        batch_norm: bool = True,
        latent_dist: str = "uniform",
        init: str = "dcgan",
    ) -> None:
        if image_size not in (28, 32):
            raise ConfigError(f"DCGANGenerator supports image_size 28 or 32, got {image_size!r}")
        if init not in INITS:
            raise ConfigError(f"DCGANGenerator: init must be one of {INITS}, got {init!r}")
        super().__init__(latent_dim, num_classes, (out_channels, image_size, image_size), latent_dist)
        c1, c2, c3 = channels
        self.embed = nn.Embedding(num_classes, embed_dim) if num_classes is not None else None
        in_dim = latent_dim + (embed_dim if num_classes is not None else 0)
        first_k = 7 if image_size == 28 else 4
        last = (3, 1, 1) if image_size == 28 else (4, 2, 1)

        def block(cin: int, cout: int, k: int, s: int, p: int) -> list[nn.Module]:
            layers: list[nn.Module] = [nn.ConvTranspose2d(cin, cout, k, s, p, bias=not batch_norm)]
            if batch_norm:
                layers.append(nn.BatchNorm2d(cout))
            layers.append(nn.ReLU())
            return layers

        self.net = nn.Sequential(
            *block(in_dim, c1, first_k, 1, 0),
            *block(c1, c2, 4, 2, 1),
            *block(c2, c3, 4, 2, 1),
            nn.ConvTranspose2d(c3, out_channels, *last, bias=True),
            nn.Tanh(),
        )
        self.init = init
        if init == "dcgan":
            self._init_weights()
        else:
            self._init_authors(c3, last[0])

    def _init_authors(self, c3: int, k: int) -> None:
        """The DP-Sinkhorn authors' initialisation (``nv-tlabs/DP-Sinkhorn_code``, ``ConvCondGenerator``:
        PyTorch's default for every layer; the papers state none). The hidden ConvTranspose2d layers,
        batch norm and the embedding keep the defaults they were built with. The authors' 28x28 output
        layer is a ``Conv2d(c3, C, 3, padding=1)``, which our ``ConvTranspose2d(c3, C, 3, 1, 1)`` equals
        with its kernel flipped and its channel axes swapped; PyTorch's default for that Conv2d draws
        weight and bias from U(-1/sqrt(c3 k^2), 1/sqrt(c3 k^2)) (fan-in from the INPUT channels, a
        distribution the flip leaves unchanged), so we draw ours from it -- the ConvTranspose2d default
        would take fan-in from the output channels (1/3 at C = 1) and saturate tanh at init. At 32x32
        the authors' output layer is a ConvTranspose2d like ours and keeps its default."""
        if k != 3:
            return
        out = self.net[-2]
        bound = 1.0 / math.sqrt(c3 * k * k)
        with torch.no_grad():
            out.weight.uniform_(-bound, bound)
            out.bias.uniform_(-bound, bound)

    def _init_weights(self) -> None:
        """DCGAN init (Radford et al.): conv N(0, 0.02), BN gain N(1, 0.02), zero biases.

        The label embedding keeps PyTorch's N(0, 1) so the class signal is as strong as z's.

        PyTorch's default ConvTranspose2d init computes fan-in from the OUTPUT channels, so
        the 64 -> 1 output layer starts with weights ~0.3 and tanh saturates at +-1 at init.
        """
        for m in self.modules():
            if isinstance(m, nn.ConvTranspose2d):
                nn.init.normal_(m.weight, 0.0, 0.02)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.normal_(m.weight, 1.0, 0.02)
            if isinstance(m, (nn.ConvTranspose2d, nn.BatchNorm2d)) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, z: Tensor, labels: Tensor | None = None) -> Tensor:
        self._check_inputs(z, labels)
        h = z if self.embed is None else torch.cat([z, self.embed(labels)], dim=1)
        return self.net(h[:, :, None, None])
