"""BigGAN-style residual generator for 32x32 RGB (DP-Sinkhorn CelebA, ICLR App. D.3).

"4 residual blocks of depth 256, latent 32; each block three conv layers with ReLU and
spectral norm" -- BigGAN's GBlock has exactly three convs (3x3, 3x3, 1x1 shortcut) when it
upsamples, so the layout is: SN-Linear(z) -> 256 x 2 x 2 -> 4 up-sampling GBlocks
(2 -> 4 -> 8 -> 16 -> 32) -> BN -> ReLU -> SN-Conv3x3(256 -> 3) -> tanh. (BigGAN-PyTorch's
own 32x32 arch has 3 blocks from 4x4; the paper says 4, so we start from 2x2.)
Following BigGAN-PyTorch's CIFAR setting (no shared embedding, no hierarchical z):
class-conditional BN = BatchNorm without affine, then ``(1 + gain[y]) * h + bias[y]`` with
per-class embeddings; weights initialised N(0, 0.02) (its ``--G_init N02``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.parametrizations import spectral_norm

from dpsynth.errors import ConfigError
from dpsynth.nets.base import Generator

__all__ = ["BigGANGenerator", "ConditionalBatchNorm2d", "GBlock"]


class ConditionalBatchNorm2d(nn.Module):
    """BatchNorm whose gain/bias depend on the class (plain affine BN when unconditional)."""

    def __init__(self, channels: int, num_classes: int | None) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.bn = nn.BatchNorm2d(channels, affine=num_classes is None)
        if num_classes is not None:
            self.gain = nn.Embedding(num_classes, channels)
            self.bias = nn.Embedding(num_classes, channels)

    def forward(self, x: Tensor, labels: Tensor | None) -> Tensor:
        h = self.bn(x)
        if self.num_classes is None:
            return h
        return h * (1.0 + self.gain(labels))[:, :, None, None] + self.bias(labels)[:, :, None, None]


class GBlock(nn.Module):
    """BigGAN generator block: cBN-ReLU-up-conv3 -> cBN-ReLU-conv3, plus up-conv1 shortcut."""

    def __init__(self, cin: int, cout: int, num_classes: int | None) -> None:
        super().__init__()
        self.bn1 = ConditionalBatchNorm2d(cin, num_classes)
        self.conv1 = spectral_norm(nn.Conv2d(cin, cout, 3, padding=1))
        self.bn2 = ConditionalBatchNorm2d(cout, num_classes)
        self.conv2 = spectral_norm(nn.Conv2d(cout, cout, 3, padding=1))
        self.conv_sc = spectral_norm(nn.Conv2d(cin, cout, 1))

    def forward(self, x: Tensor, labels: Tensor | None) -> Tensor:
        h = F.interpolate(F.relu(self.bn1(x, labels)), scale_factor=2.0, mode="nearest")
        h = self.conv2(F.relu(self.bn2(self.conv1(h), labels)))
        return h + self.conv_sc(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class BigGANGenerator(Generator):
    def __init__(
        self,
        latent_dim: int = 32,
        num_classes: int | None = 2,
        width: int = 256,
        num_blocks: int = 4,
        image_size: int = 32,
        out_channels: int = 3,
        latent_dist: str = "uniform",
    ) -> None:
        bottom = image_size // (2**num_blocks)
        if num_blocks < 1 or bottom < 1 or bottom * 2**num_blocks != image_size:
            raise ConfigError(
                f"BigGANGenerator: image_size={image_size} must be a multiple of 2**num_blocks={2**max(num_blocks, 0)}"
            )
        super().__init__(latent_dim, num_classes, (out_channels, image_size, image_size), latent_dist)
        self.width, self.bottom = width, bottom
        self.linear = spectral_norm(nn.Linear(latent_dim, width * bottom * bottom))
        self.blocks = nn.ModuleList([GBlock(width, width, num_classes) for _ in range(num_blocks)])
        self.out_bn = nn.BatchNorm2d(width)
        self.out_conv = spectral_norm(nn.Conv2d(width, out_channels, 3, padding=1))
        self._init_weights()

    def _init_weights(self) -> None:
        """N(0, 0.02) on conv/linear/embedding weights (BigGAN-PyTorch N02), zero biases."""
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                w = m.parametrizations.weight.original if hasattr(m, "parametrizations") else m.weight
                nn.init.normal_(w, 0.0, 0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, 0.0, 0.02)

    def forward(self, z: Tensor, labels: Tensor | None = None) -> Tensor:
        self._check_inputs(z, labels)
        h = self.linear(z).view(z.shape[0], self.width, self.bottom, self.bottom)
        for blk in self.blocks:
            h = blk(h, labels)
        return torch.tanh(self.out_conv(F.relu(self.out_bn(h))))
