"""The adversarial feature extractor of DP-Sinkhorn's adversarial variant (ICLR App. D.3):
three conv layers (hidden depth 64, output depth 32); batch norm + ReLU + 2x2 max-pool between
them; kernels 3, 3 (padding 1) and 1 (no padding)."""

from __future__ import annotations

from torch import Tensor, nn


class FeatureExtractor(nn.Module):
    def __init__(self, in_channels: int = 1, hidden: int = 64, out: int = 32) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(in_channels, hidden, 3, padding=1), nn.BatchNorm2d(hidden), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(hidden, hidden, 3, padding=1), nn.BatchNorm2d(hidden), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(hidden, out, 1),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x).flatten(1)
