"""Generators for the DP generative models, and ``build_generator`` so configs name them."""

from __future__ import annotations

from typing import Any

from dpsynth.errors import ConfigError
from dpsynth.nets.base import LATENT_DISTS, Generator
from dpsynth.nets.biggan import BigGANGenerator
from dpsynth.nets.cgan import CGANGenerator
from dpsynth.nets.class_gaussian import ClassGaussianGenerator
from dpsynth.nets.dcgan import DCGANGenerator
from dpsynth.nets.gswgan import GSWGANGenerator
from dpsynth.nets.merf import MERFConvGenerator
from dpsynth.nets.mlp import MLPGenerator

__all__ = ["GENERATORS", "LATENT_DISTS", "BigGANGenerator", "CGANGenerator", "ClassGaussianGenerator", "DCGANGenerator", "Generator", "MERFConvGenerator", "MLPGenerator", "build_generator",
           "build_seeded_generator"]

GENERATORS: dict[str, type[Generator]] = {
    "dcgan": DCGANGenerator,
    "biggan": BigGANGenerator,
    "mlp": MLPGenerator,
    "resnet28": GSWGANGenerator,
    "merf_conv": MERFConvGenerator,
    "cgan_mlp": CGANGenerator,
    "class_gaussian": ClassGaussianGenerator,
}


def build_generator(name: str, **kwargs: Any) -> Generator:
    """Instantiate a generator by config name; unknown names/arguments raise ConfigError."""
    try:
        cls = GENERATORS[name]
    except KeyError:
        raise ConfigError(f"unknown generator {name!r}; choose one of {sorted(GENERATORS)}") from None
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"generator {name!r}: bad arguments {sorted(kwargs)}: {exc}") from exc


def build_seeded_generator(arch: dict[str, Any], seed: int, device: Any = "cpu") -> Generator:
    """``arch`` (``{"name", "kwargs"}``) with its initial weights drawn by torch's default init right
    after ``torch.manual_seed(seed)``: the one place a run's generator initialisation is seeded, so a
    run, its batched-sweep member and the benchmark start from the same weights for the same seed.
    (GS-WGAN's generator takes its own ``init_seed`` instead: the published initialisation.)"""
    import torch

    torch.manual_seed(seed)
    return build_generator(arch["name"], **arch["kwargs"]).to(device)
