"""DP-MERF's conditional convolutional generator (Harder, Adamczewski, Park, "DP-MERF: Differentially
Private Mean Embeddings with Random Features for Practical Privacy-Preserving Data Generation",
AISTATS 2021, arXiv:2002.11603; the authors' ``ConvCondGen`` in ``ParkLabML/DP-MERF``
``code_balanced/models_gen.py``, described here in our words).

Layout (28x28): ``[z, one_hot(label)]`` -> Linear(d_code + classes, 200) -> BN -> ReLU ->
Linear(200, c1 * 7 * 7) -> BN -> reshape c1x7x7 -> bilinear x2 -> Conv(c1 -> c2, k5) -> ReLU ->
bilinear x2 -> Conv(c2 -> C, k5) -> sigmoid. The authors' defaults: code 5, hidden 200, channels
(16, 8), kernels 5; latent N(0, 1); outputs in [0, 1] (the features are computed on [0, 1] images).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from dpsynth.nets.base import Generator

__all__ = ["MERFConvGenerator"]


class MERFConvGenerator(Generator):
    def __init__(self, latent_dim: int = 5, num_classes: int = 10, hidden: int = 200,
                 channels: tuple[int, int] = (16, 8), kernel_size: int = 5, out_channels: int = 1) -> None:
        super().__init__(latent_dim, num_classes, (out_channels, 28, 28), "normal")
        c1, c2 = channels
        self.fc1 = nn.Linear(latent_dim + num_classes, hidden)
        self.bn1 = nn.BatchNorm1d(hidden)
        self.fc2 = nn.Linear(hidden, c1 * 7 * 7)
        self.bn2 = nn.BatchNorm1d(c1 * 7 * 7)
        self.conv1 = nn.Conv2d(c1, c2, kernel_size, padding=(kernel_size - 1) // 2)
        self.conv2 = nn.Conv2d(c2, out_channels, kernel_size, padding=(kernel_size - 1) // 2)
        self.c1 = c1

    def forward(self, z: Tensor, labels: Tensor | None = None) -> Tensor:
        self._check_inputs(z, labels)
        assert labels is not None and self.num_classes is not None
        h = torch.cat([z, F.one_hot(labels.long(), self.num_classes).to(z.dtype)], dim=1)
        h = F.relu(self.bn1(self.fc1(h)))
        h = self.bn2(self.fc2(h)).reshape(len(z), self.c1, 7, 7)
        h = F.interpolate(h, scale_factor=2, mode="bilinear", align_corners=True)
        h = F.relu(self.conv1(h))
        h = F.interpolate(h, scale_factor=2, mode="bilinear", align_corners=True)
        return torch.sigmoid(self.conv2(h))
