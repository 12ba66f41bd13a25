"""DCGAN-style generator (DP-Sinkhorn MNIST/Fashion-MNIST; Reshetova et al. (arXiv:2306.09547) MNIST with latent 100).

Layout (ICLR App. D.3, 28x28): ``[z, embed(label)]`` as a 1x1 map -> ConvT(k7, s1, p0) to
256x7x7 -> ConvT(256->128, k4 s2 p1) 14x14 -> ConvT(128->64, k4 s2 p1) 28x28 ->
ConvT(64->C, k3 s1 p1) 28x28 -> tanh; ReLU at hidden layers. For 32x32 (CelebA DCGAN row)
the first layer uses k4 (4x4) and the last ConvT(k4 s2 p1) doubles to 32x32.
The papers do not mention batch norm; the published code (NVIDIA DP-Sinkhorn,
``ConvCondGenerator``) has BatchNorm after the three hidden layers, so
``batch_norm=True`` by default. Weights use the DCGAN initialisation. The same class, unconditional with latent 100, is the
seed-003 MNIST generator.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from dpsynth.errors import ConfigError
from dpsynth.nets.base import Generator

__all__ = ["DCGANGenerator"]


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
    ) -> None:
        if image_size not in (28, 32):
            raise ConfigError(f"DCGANGenerator supports image_size 28 or 32, got {image_size!r}")
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
        self._init_weights()

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
