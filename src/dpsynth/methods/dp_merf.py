"""DP-MERF (Harder, Adamczewski, Park, "DP-MERF: Differentially Private Mean Embeddings with Random
Features for Practical Privacy-Preserving Data Generation", AISTATS 2021, arXiv:2002.11603).

The private data is read ONCE. Each record (image in [0, 1], flattened) is mapped to random Fourier
features ``phi(x) = [cos(W x), sin(W x)] / sqrt(D / 2)`` with ``W ~ N(0, I / l^2)`` -- a fixed,
public bandwidth ``l^2`` (``hparams.bandwidth_sq``) and frequencies drawn from the run's seed, never
from the data -- so ``||phi(x)|| = 1`` and ``phi(x) . phi(x')`` approximates the Gaussian kernel
``exp(-||x - x'||^2 / (2 l^2))``. The label-conditional mean embedding ``(1/n) sum phi(x_i) (x) e_{y_i}``
goes through ``MeanEmbeddingSanitizer`` (rows clipped to norm 1, the mean noised with
``N(0, (2 sigma / n)^2)``: replace-one neighbours, L2 sensitivity 2/n) and is released once; sigma is
calibrated to (epsilon, delta) by the same accountant as every other run (one Gaussian mechanism:
q = 1, one step). The generator is then trained, without touching the data again, to minimise
``|| noisy embedding - embedding of a generated batch ||^2`` -- post-processing, so its steps cost no
budget and its loss may be released.

The authors' MNIST/Fashion-MNIST settings are the defaults (``config.hparams.DPMERFHparams``): 10,000
features, their conditional conv generator, 5 epochs of ``n // 100`` steps of batch 100, Adam lr 0.01
decayed by 0.9 per epoch. Deviations (docs/deviations.md): the bandwidth is the authors' published
constant, not re-derived from our data; sigma is calibrated by our RDP accountant.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from dpsynth.errors import ConfigError, DataError, DpsynthError
from dpsynth.methods.artifacts import release_meta
from dpsynth.methods.checkpoint import Resumable
from dpsynth.methods.context import TrainContext
from dpsynth.methods.loop import Release, run_training
from dpsynth.methods.optim import make_optimizer
from dpsynth.nets import build_seeded_generator
from dpsynth.privacy import mechanisms
from dpsynth.privacy.report import PrivacyReport, gaussian_release_report
from dpsynth.privacy.sanitizers import MeanEmbeddingSanitizer

#: Records per chunk of the one pass over the private data (only the (classes x D) sum is kept).
RELEASE_CHUNK = 500
LOG_FIELDS = ("loss", "lr")


class RandomFourierFeatures:
    """``x -> [cos(W x), sin(W x)] / sqrt(D / 2)`` (norm exactly 1) with ``W ~ N(0, I / bandwidth_sq)``
    drawn from ``seed``: the frequencies depend on the seed only, never on the data."""

    def __init__(self, in_dim: int, n_features: int, bandwidth_sq: float, seed: int, device: torch.device) -> None:
        gen = torch.Generator().manual_seed(int(np.random.SeedSequence([seed, 0x3EF]).generate_state(1)[0]))
        self.w = (torch.randn(n_features // 2, in_dim, generator=gen) / math.sqrt(bandwidth_sq)).to(device)
        self.scale = math.sqrt(n_features / 2)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        xw = x.reshape(len(x), -1) @ self.w.T
        return torch.cat([torch.cos(xw), torch.sin(xw)], dim=1) / self.scale


def release_sigma(ctx: TrainContext) -> float:
    """The noise multiplier of the one release (``privacy.mechanisms.GaussianRelease``): calibrated to the
    target (q = 1, one step), or the experiment's own sigma if it meets the target; 0 for a non-private run."""
    schedule = mechanisms.get("gaussian_release", mechanisms.GaussianRelease).schedule(
        ctx.privacy_plan, who=f"experiments.{ctx.name}.privacy")
    return 0.0 if schedule.sigma is None else schedule.sigma


def release_embedding(ctx: TrainContext, features: RandomFourierFeatures, sigma: float,
                      generator: torch.Generator) -> tuple[torch.Tensor, MeanEmbeddingSanitizer]:
    """The ONE read of the private data: every record's features through the sanitizer, released once."""
    x, y = ctx.data.x_train, ctx.data.y_train
    san = MeanEmbeddingSanitizer(sigma, len(x), int(ctx.data.num_classes), generator)
    for start in range(0, len(x), RELEASE_CHUNK):
        xb = torch.from_numpy(np.ascontiguousarray(x[start:start + RELEASE_CHUNK])).to(ctx.device)
        yb = torch.from_numpy(y[start:start + RELEASE_CHUNK].astype(np.int64)).to(ctx.device)
        san.add(features(xb.float().div(255.0)), yb)
    return san.release(), san


class DPMERFStepper(Resumable):
    """One generator step against the released embedding, as the one training loop's stepper. The
    release itself runs at the first step (after the loop has looked for a checkpoint), so a resumed
    run reloads the released embedding and never reads the data or spends the budget again."""

    log_fields = LOG_FIELDS
    log_every = 50

    def __init__(self, ctx: TrainContext, G: torch.nn.Module, opt: torch.optim.Optimizer,
                 features: RandomFourierFeatures, sigma: float, steps_per_epoch: int, arch: dict[str, Any]) -> None:
        self.ctx, self.G, self.opt, self.features, self.sigma, self.arch = ctx, G, opt, features, sigma, arch
        self.steps_per_epoch = steps_per_epoch
        self.gens = {"latent": torch.Generator(ctx.device).manual_seed(
            int(np.random.SeedSequence([ctx.seed, 0x3F0]).generate_state(1)[0])),
            "noise": ctx.noise.torch_generator(ctx.device, 21)}
        self.embedding: torch.Tensor | None = None
        self.sanitizer: MeanEmbeddingSanitizer | None = None
        self.steps_done = 0

    def lr_at(self, step: int) -> float:
        h = self.ctx.experiment.hparams
        return h.lr * h.lr_decay ** (step // self.steps_per_epoch)

    def step(self) -> dict[str, torch.Tensor | float]:
        if self.embedding is None:
            self.embedding, self.sanitizer = release_embedding(self.ctx, self.features, self.sigma, self.gens["noise"])
        lr = self.lr_at(self.steps_done)
        for group in self.opt.param_groups:
            group["lr"] = lr
        b = self.ctx.experiment.hparams.batch_size
        z = self.G.sample_latent(b, self.gens["latent"])
        y = self.G.sample_labels(b, self.gens["latent"])
        phi = self.features(self.G(z, y))
        gen_emb = torch.zeros_like(self.embedding).index_add_(0, y, phi) / b
        loss = ((self.embedding - gen_emb) ** 2).sum()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        self.steps_done += 1
        return {"loss": loss.detach(), "lr": lr}

    def check(self) -> None:
        """Nothing deferred (the sanitizer refuses at once)."""

    def log_row(self, stats: dict[str, Any]) -> dict[str, float]:
        loss = float(stats["loss"])
        if not math.isfinite(loss):
            raise DpsynthError(f"{self.ctx.name}: the generator loss became {loss}; lower hparams.lr")
        return {"loss": loss, "lr": float(stats["lr"])}

    def progress(self, stats: dict[str, Any]) -> dict[str, float]:
        return {"loss": float(stats["loss"])}

    def state_parts(self) -> dict[str, Any]:
        return {"generator": self.G, "optimizer": self.opt}

    def random_streams(self) -> dict[str, torch.Generator]:
        return self.gens

    def extra_state(self) -> dict[str, Any]:
        return {"embedding": self.embedding}  # the one release: a resumed run never reads the data again

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.embedding = state["embedding"]

    def release(self, steps: int) -> Release:
        ctx = self.ctx
        meta = release_meta(ctx, "sigmoid")
        # the loss is a function of the released embedding and the generator only: post-processing
        return Release(self.G.eval(), self.arch, meta, privacy_report(ctx, self.sigma),
                       public_fields=("step", "epsilon", "loss"),
                       summary={"release_sigma": self.sigma, "n_features": ctx.experiment.hparams.n_features})

    def close(self) -> None:
        pass


def privacy_report(ctx: TrainContext, sigma: float) -> PrivacyReport:
    """One Gaussian mechanism of multiplier sigma (replace-one, sensitivity 2/n): the RDP conventions
    every run reports, plus the exact (analytic) Gaussian epsilon, the tightest claim for one release."""
    n, h, plan = len(ctx.data.x_train), ctx.experiment.hparams, ctx.privacy_plan
    extra = {"experiment": ctx.name, "scale": ctx.scale, "releases": 1, "n_features": h.n_features,
             "bandwidth_sq": h.bandwidth_sq,
             "note": "one release of the label-conditional mean of random Fourier features (rows clipped to norm "
                     "1); neighbouring datasets replace one record (n public), so the mean's L2 sensitivity is 2/n "
                     "and the noise std is 2 sigma / n; the generator's training is post-processing"}
    if sigma == 0.0:
        return PrivacyReport(mechanism="none (non-private)", sigma=None, delta=0.0, epsilon={"non_private": math.inf},
                             headline="non_private", steps=1, dataset_size=n, extra=extra, noise=ctx.noise.describe())
    assert plan.delta is not None
    return gaussian_release_report(sigma=sigma, dataset_size=n, delta=plan.delta, bound=1.0,
                                   target_epsilon=plan.epsilon, extra=extra).within_target(ctx.name)


def generator_arch(ctx: TrainContext) -> dict[str, Any]:
    h = ctx.experiment.hparams
    return {"name": h.generator, "kwargs": {"latent_dim": h.code_dim, "num_classes": ctx.data.num_classes,
                                            "out_channels": int(ctx.data.x_train.shape[1])}}


def train(ctx: TrainContext) -> dict[str, Any]:
    h = ctx.experiment.hparams
    x = ctx.data.x_train
    if x.ndim != 4 or tuple(x.shape[2:]) != (28, 28) or x.dtype != np.uint8:
        raise DataError(f"{ctx.data.name}: DP-MERF's generator makes 28x28 images; need uint8 (N, C, 28, 28), "
                        f"got {x.dtype} {tuple(x.shape)}")
    if not ctx.data.num_classes:
        raise DataError(f"{ctx.data.name}: DP-MERF embeds labels; the dataset has none")
    if h.bandwidth_sq is None:
        raise ConfigError(f"experiments.{ctx.name}.hparams.bandwidth_sq: {h.private_run_problem()}")
    if h.batch_size > len(x):
        raise ConfigError(f"experiments.{ctx.name}.hparams.batch_size {h.batch_size} > the {len(x)} records")
    sigma = release_sigma(ctx)
    steps_per_epoch = len(x) // h.batch_size
    total = h.fit_steps(len(x))
    arch = generator_arch(ctx)
    G = build_seeded_generator(arch, ctx.seed, ctx.device).train()
    opt = make_optimizer(G.parameters(), h.optimizer, lr=h.lr, betas=h.betas)
    features = RandomFourierFeatures(int(np.prod(x.shape[1:])), h.n_features, h.bandwidth_sq, ctx.seed, ctx.device)
    stepper = DPMERFStepper(ctx, G, opt, features, sigma, steps_per_epoch, arch)
    spent = privacy_report(ctx, sigma).headline_epsilon if sigma > 0 else math.inf
    return run_training(ctx, stepper, total_steps=total, guard=None, sigma=sigma or None,
                        epsilon_spent=lambda: spent if stepper.embedding is not None else 0.0,
                        extra={"schedule": "one release", "steps_per_epoch": steps_per_epoch})
