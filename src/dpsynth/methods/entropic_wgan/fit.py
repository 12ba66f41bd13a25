"""The entropic WGAN's generator and training core: the paper's generator for a record shape, the
trainer (one generator, its optimizer, its RNG streams) and ``fit`` (used by the W2-vs-noise figure)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from dpsynth.config import EntropicWGANHparams
from dpsynth.errors import ConfigError, DataError
from dpsynth.methods.artifacts import load_generator
from dpsynth.methods.checkpoint import Resumable
from dpsynth.methods.entropic_wgan.loss import EXACT_MAX_ENTRIES, LossSpec, TorchDCT, ewgan_loss
from dpsynth.methods.optim import make_optimizer
from dpsynth.nets import build_seeded_generator
from dpsynth.nets.base import Generator

# --------------------------------------------------------------------------- generators


def generator_arch(name: str, record_shape: tuple[int, ...]) -> dict[str, Any]:
    """``{"name", "kwargs"}`` for ``build_generator``: the paper's model for this record shape.

    ``mlp`` on 2-D points: latent U[-1,1]^2, 2 x 256 ReLU, linear out (§4.2); ``mlp`` on images:
    the Fig. 5 model, latent U[0,1]^2, 2 x 500, tanh; ``dcgan`` on 28x28/32x32 images:
    unconditional DCGAN, latent 100 ~ U[0,1], tanh (§4.3).
    """
    shape = tuple(int(s) for s in record_shape)
    dim = int(np.prod(shape))
    if name == "mlp":
        if len(shape) == 1:
            kw: dict[str, Any] = {"latent_dim": 2, "output_dim": dim, "hidden": [256, 256],
                                  "latent_dist": "uniform_symmetric", "output_activation": "none"}
        else:
            kw = {"latent_dim": 2, "output_dim": dim, "hidden": [500, 500], "latent_dist": "uniform",
                  "output_activation": "tanh"}
        return {"name": "mlp", "kwargs": kw}
    if name == "dcgan":
        if len(shape) != 3 or shape[1] != shape[2] or shape[1] not in (28, 32):
            raise ConfigError(f"hparams.generator: dcgan makes 28x28 or 32x32 images, the records have shape {shape}")
        return {"name": "dcgan", "kwargs": {"latent_dim": 100, "num_classes": None, "out_channels": shape[0],
                                            "image_size": shape[1], "latent_dist": "uniform"}}
    raise ConfigError(f"hparams.generator: {name!r} is not available for entropic_wgan (choose 'mlp' or 'dcgan')")


# --------------------------------------------------------------------------- training core


class EWGANTrainer(Resumable):
    """One generator, its optimizer and the two explicit RNG streams (latents, minibatch indices)."""

    def __init__(self, gen: Generator, records: Tensor, spec: LossSpec, hp: EntropicWGANHparams, seed: int) -> None:
        if records.ndim != 2 or records.shape[0] == 0:
            raise DataError(f"training records must be a non-empty (N, D) array, got shape {tuple(records.shape)}")
        self.gen, self.records, self.spec = gen, records, spec
        self.device = records.device
        self.batch = min(int(hp.batch_size), records.shape[0])  # batch >= N: full batch (the 2-D setting)
        if spec.loss == "exact" and self.batch * self.batch > EXACT_MAX_ENTRIES:
            raise ConfigError(f"hparams.batch_size: {hp.batch_size} gives the exact loss a {self.batch} x "
                              f"{self.batch} network simplex per step (limit {EXACT_MAX_ENTRIES:,} entries); use "
                              "a batch of at most 5000 or an entropic loss")
        params = list(gen.parameters())
        self.opt = make_optimizer(params, hp.optimizer, lr=hp.lr, betas=hp.betas, weight_decay=hp.weight_decay)
        self.g_latent = torch.Generator(device=self.device).manual_seed(int(seed))
        self.g_batch = torch.Generator().manual_seed(int(seed) + 1)
        self.dct = TorchDCT(spec.dct_shape, self.device, records.dtype) if spec.dct_shape else None

    @property
    def rng_generators(self) -> dict[str, torch.Generator]:
        return {"latent": self.g_latent, "batch": self.g_batch}

    def step(self) -> float:
        n = self.records.shape[0]
        if self.batch < n:
            idx = torch.randperm(n, generator=self.g_batch)[: self.batch].to(self.device)
            y = self.records[idx]
        else:
            y = self.records
        self.gen.train()
        z = self.gen.sample_latent(self.batch, self.g_latent)
        x = self.gen(z).reshape(self.batch, -1)
        if self.dct is not None:
            x = self.dct(x)
        loss = ewgan_loss(x, y, self.spec)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return float(loss.detach())

    def state_parts(self) -> dict[str, Any]:
        return {"model": self.gen, "optimizer": self.opt}

    def random_streams(self) -> dict[str, torch.Generator]:
        return self.rng_generators


def fit(records: np.ndarray | Tensor, record_shape: tuple[int, ...], spec: LossSpec, hp: EntropicWGANHparams, *,
        steps: int, seed: int, device: str | torch.device = "cpu",
        on_step: Callable[[], None] | None = None) -> Generator:
    """Train a fresh generator on privatized records for ``steps`` steps (no files): for sweeps and tests."""
    if steps < 1:
        raise ConfigError(f"steps must be >= 1, got {steps!r}")
    recs = torch.as_tensor(np.asarray(records, dtype=np.float32), device=device)
    arch = generator_arch(hp.generator, record_shape)
    gen = build_seeded_generator(arch, seed, device)
    trainer = EWGANTrainer(gen, recs, spec, hp, seed)
    for _ in range(steps):
        trainer.step()
        if on_step is not None:
            on_step()
    return gen.eval()


def sample_records(gen: Generator, n: int, seed: int) -> np.ndarray:
    """``n`` generated records (N, D) in record space (pixel domain, never DCT)."""
    g = torch.Generator(device=next(gen.parameters()).device).manual_seed(int(seed))
    gen.eval()
    with torch.no_grad():
        return gen(gen.sample_latent(n, g)).reshape(n, -1).cpu().numpy().astype(np.float64)


def load_released(path: Any) -> tuple[Generator, dict[str, Any]]:
    """Reload a released generator (thin wrapper kept here so evaluation code needs one import)."""
    gen, meta = load_generator(path)
    return gen, meta  # type: ignore[return-value]
