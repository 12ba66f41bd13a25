"""GS-WGAN (GS-WGAN (Chen et al., NeurIPS 2020, arXiv:2006.08265); sound accounting: docs/deviations.md row 8): a private generator trained against N_d warm-started critics.

Each generator step picks one critic uniformly at random; that critic takes ``critic_steps``
WGAN-GP steps on its own shard (non-private: critics are never released), then the
generator takes one step on ``-mean D(G(z), y)``. The ONLY path from private data to the
generator is the gradient w.r.t. the generated images, which goes through
``PerSampleSanitizer`` (per-sample clip ``C/B``, noise std ``2 (C/B) sigma``): the critic's
weights enter the generator step detached, and the generator's initialisation, latents
and labels never touch the data. The released generator is an EMA of the generator.

Privacy, both ways (``privacy.gswgan_accounting.gswgan_epsilon``): the SOUND accountant governs every
run -- a step budget (``calibrate_sigma``) calibrates sigma to the target, a given sigma
(``derive_steps``) derives the steps that keep the sound epsilon within the target. The report
carries the published ("as published") epsilon beside it for comparison with the paper; the
published settings are the experiment ``gswgan_*_published`` (sigma 1.07, sound target ~370).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dpsynth.errors import ConfigError, DataError
from dpsynth.methods.artifacts import release_meta
from dpsynth.methods.checkpoint import Resumable
from dpsynth.methods.context import TrainContext
from dpsynth.methods.gswgan_critics import (
    PAPER_N_CRITICS,
    PAPER_WARMUP_STEPS,
    CriticBank,
    check_finite,
    critic_settings,
    critic_step,
    data_fingerprint,
    load_critics,
    real_batch,
)
from dpsynth.methods.loop import LOOP_LOG_FIELDS, Release, run_training
from dpsynth.methods.optim import make_optimizer
from dpsynth.nets import GENERATORS, build_generator
from dpsynth.nets.gswgan import GSWGANGenerator
from dpsynth.privacy import mechanisms
from dpsynth.privacy.report import BudgetGuard, PrivacyReport, gswgan_report
from dpsynth.privacy.sanitizers import PerSampleSanitizer

PAPER_STEPS = 20_000  # GS-WGAN: generator iterations (non-private runs without a step budget)
LOG_EVERY = 10
STEP_LOG_FIELDS = ("critic", "d_loss", "wasserstein", "g_loss", "max_sample_norm")
LOG_FIELDS = [*STEP_LOG_FIELDS, *LOOP_LOG_FIELDS]


# --------------------------------------------------------------------------- configuration


def validate(ctx: TrainContext) -> None:
    h = ctx.experiment.hparams
    if GENERATORS.get(h.generator) is not GSWGANGenerator:
        names = sorted(k for k, v in GENERATORS.items() if v is GSWGANGenerator)
        raise ConfigError(f"experiments.{ctx.name}.hparams.generator: GS-WGAN uses its ResNet generator "
                          f"({' or '.join(map(repr, names))}), got {h.generator!r}")
    x = ctx.data.x_train
    if x.ndim != 4 or tuple(x.shape[2:]) != (28, 28):
        raise DataError(f"{ctx.data.name}: GS-WGAN needs 28x28 images (N, C, 28, 28), got {tuple(x.shape)}")


def warmstart_location(ctx: TrainContext) -> tuple[dict[str, Any], Path]:
    """The critic settings of this run and its warm-start directory (``private/warmstart/<name>``:
    a static path the workflows name; the artifact records the settings and training checks them)."""
    if ctx.warmstart_dir is None:
        raise ConfigError(f"{ctx.name}: no warm-start directory in the training context")
    settings = critic_settings(ctx.experiment, ctx.preset, ctx.seed, len(ctx.data.x_train))
    return settings, ctx.warmstart_dir


def privacy_schedule(ctx: TrainContext, n_critics: int) -> tuple[float | None, int, BudgetGuard | None, str]:
    """(sigma, generator steps, guard, accounting that sets the schedule) from the privacy plan, by GS-WGAN's
    per-critic Gaussian (``privacy.mechanisms``). The target is held to the SOUND accountant in either mode
    (docs/deviations.md row 8): deriving the steps from the published per-sample count would let a run
    configured for epsilon 10 end at ~369; a sweep cell's share of a scale budget is measured with it too."""
    h = ctx.experiment.hparams
    schedule = mechanisms.get("gs_wgan", mechanisms.GSWGANGaussian).schedule(
        ctx.privacy_plan, who=f"experiments.{ctx.name}.privacy", batch_size=h.batch_size, shards=n_critics,
        default_steps=lambda: h.max_steps or PAPER_STEPS)
    return schedule.sigma, schedule.steps, schedule.guard, "none" if schedule.sigma is None else "sound"


# --------------------------------------------------------------------------- steps


@contextmanager
def frozen_buffers(module: torch.nn.Module) -> Iterator[None]:
    """Restore the module's buffers (BN running stats) afterwards.

    The critic's fake batch is generated from the private batch's labels; letting that
    forward update the generator's running statistics would put private labels into the
    released generator without passing the sanitizer (a test caught exactly this).
    """
    saved = [b.detach().clone() for b in module.buffers()]
    try:
        yield
    finally:
        with torch.no_grad():
            for b, v in zip(module.buffers(), saved):
                b.copy_(v)


@torch.no_grad()
def ema_update(ema: torch.nn.Module, model: torch.nn.Module, step: int, decay: float) -> None:
    """Published ``exp_mov_avg``: decay ``min(1 - 1/(step+1), decay)``; buffers (BN stats) copied."""
    a = min(1.0 - 1.0 / (step + 1), decay)
    for pe, p in zip(ema.parameters(), model.parameters()):
        pe.mul_(a).add_(p, alpha=1.0 - a)
    for be, bm in zip(ema.buffers(), model.buffers()):
        be.copy_(bm)


def generator_step(
    G: GSWGANGenerator, opt: torch.optim.Optimizer, critic: CriticBank, batch_size: int,
    gen: torch.Generator, sanitizer: PerSampleSanitizer | None,
) -> float:
    """One generator update against ``critic`` (a one-critic bank).

    The critic's weights are detached, so the generator's gradient is
    ``J_G^T * sanitize(d loss / d images)`` and nothing else (GS-WGAN eq. 11).
    """
    dev = next(G.parameters()).device
    z = G.sample_latent(batch_size, gen)
    y = torch.randint(0, G.num_classes or 1, (batch_size,), generator=gen, device=gen.device).to(dev)
    fake = G(z, y)
    if sanitizer is not None:
        fake = sanitizer.attach(fake)
    w = critic.critics.weights(detach=True, power_iteration=False)
    loss = -critic.critics(fake[None], y[None], w).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return float(loss.detach())


def train_step(
    G: GSWGANGenerator, opt: torch.optim.Optimizer, bank: CriticBank, x_u8: torch.Tensor, y_all: torch.Tensor,
    shards: torch.Tensor, h: Any, gens: dict[str, torch.Generator], sanitizer: PerSampleSanitizer | None,
) -> dict[str, float]:
    """Pick a critic, train it ``critic_steps`` times on its shard, then one sanitized generator step."""
    j = int(torch.randint(0, bank.copies, (1,), generator=gens["pick"]))
    critic = bank.take(j, j + 1)
    b = h.batch_size
    stats: dict[str, float] = {}
    for _ in range(h.critic_steps):
        real, ry = real_batch(x_u8, y_all, shards[j : j + 1], b, gens["data"])
        with torch.no_grad(), frozen_buffers(G):
            z = G.sample_latent(b, gens["data"])
            fake = G(z, ry[0])[None]  # conditioned on the REAL labels (published): critic side only
        stats = critic_step(critic, real, ry, fake, h.gp_weight, h.drift, gens["data"])
    g_loss = generator_step(G, opt, critic, b, gens["data"], sanitizer)
    bank.put(j, critic)
    return {"critic": j, **stats, "g_loss": g_loss}


# --------------------------------------------------------------------------- train


def generator_arch(ctx: TrainContext) -> dict[str, Any]:
    return {"name": ctx.experiment.hparams.generator, "kwargs": {"latent_dim": 10, "num_classes": ctx.data.num_classes,
                                           "model_dim": ctx.experiment.hparams.model_dim,
                                           "out_channels": int(ctx.data.x_train.shape[1])}}


class GSWGANStepper(Resumable):
    """GS-WGAN's step (a critic's turn on its shard, one sanitized generator step, the EMA) as the
    one training loop's stepper (``methods/loop.py``)."""

    log_fields = STEP_LOG_FIELDS
    log_every = LOG_EVERY

    def __init__(self, ctx: TrainContext, G: GSWGANGenerator, G_ema: torch.nn.Module, opt: torch.optim.Optimizer,
                 bank: CriticBank, shards: torch.Tensor, gens: dict[str, torch.Generator],
                 sanitizer: PerSampleSanitizer | None, arch: dict[str, Any], report: Any) -> None:
        self.ctx, self.G, self.G_ema, self.opt, self.bank, self.shards = ctx, G, G_ema, opt, bank, shards
        self.gens, self.sanitizer, self.arch, self.report = gens, sanitizer, arch, report
        self.x_u8 = torch.from_numpy(ctx.data.x_train).to(ctx.device)
        self.y_all = torch.from_numpy(ctx.data.y_train.astype(np.int64)).to(ctx.device)
        self.steps_done = 0  # the EMA's decay depends on it

    def step(self) -> dict[str, float]:
        h = self.ctx.experiment.hparams
        stats = train_step(self.G, self.opt, self.bank, self.x_u8, self.y_all, self.shards, h, self.gens,
                           self.sanitizer)
        ema_update(self.G_ema, self.G, self.steps_done, h.ema_decay)
        self.steps_done += 1
        return stats

    def check(self) -> None:
        """The per-sample sanitizer refuses at once (nothing is deferred)."""

    def log_row(self, stats: dict[str, float]) -> dict[str, float]:
        check_finite(stats["g_loss"], "the generator loss")
        last = self.sanitizer.last if self.sanitizer is not None else None
        return {"critic": stats["critic"], "d_loss": stats["d_loss"], "wasserstein": stats["wasserstein"],
                "g_loss": stats["g_loss"], "max_sample_norm": last.clean_norm if last else float("nan")}

    def progress(self, stats: dict[str, float]) -> dict[str, float]:
        return {"wasserstein": stats["wasserstein"]}

    def state_parts(self) -> dict[str, Any]:
        return {"generator": self.G, "generator_ema": self.G_ema, "optimizer": self.opt, "critics": self.bank}

    def random_streams(self) -> dict[str, torch.Generator]:
        return self.gens

    def release(self, steps: int) -> Release:
        ctx = self.ctx
        meta = release_meta(ctx, "sigmoid", released="ema")
        return Release(self.G_ema.eval(), self.arch, meta, self.report(steps))

    def close(self) -> None:
        pass


def train(ctx: TrainContext) -> dict[str, Any]:
    validate(ctx)
    h, dev = ctx.experiment.hparams, ctx.device
    settings, ws_dir = warmstart_location(ctx)
    n_d = settings["n_critics"]
    sigma, total_steps, guard, schedule = privacy_schedule(ctx, n_d)
    private = sigma is not None

    bank, shards_np = load_critics(ws_dir, settings, data_fingerprint(ctx.data.x_train, ctx.data.y_train), dev, ctx.name)
    bank.reset_optimizer()  # as the published main.py: warm-started weights, new Adam (a resume reloads its own)
    arch = generator_arch(ctx)
    G = build_generator(arch["name"], **arch["kwargs"], init_seed=int(np.random.SeedSequence([ctx.seed, 0x6E]).generate_state(1)[0]))
    G = G.to(dev).train()
    G_ema = copy.deepcopy(G)
    opt = make_optimizer(G.parameters(), "adam", lr=h.lr, betas=h.betas)  # the published: no weight decay
    # critic pick (the subsampling), real/fake batches and sanitizer noise: all secret by default
    gens = {name: ctx.noise.torch_generator(dev, i) for i, name in enumerate(("pick", "data", "noise"), start=11)}
    sanitizer = PerSampleSanitizer(h.clip, sigma, h.batch_size, generator=gens["noise"]) if private else None
    stepper = GSWGANStepper(ctx, G, G_ema, opt, bank, torch.from_numpy(shards_np).to(dev), gens, sanitizer, arch,
                            lambda steps: final_report(ctx, sigma, steps, n_d, schedule, settings))
    overrides = warm_start_overrides(settings)
    return run_training(ctx, stepper, total_steps=total_steps, guard=guard, sigma=sigma,
                        extra={"n_critics": n_d, "schedule": schedule,
                               **({"scale_overrides": overrides} if overrides else {})})


def warm_start_overrides(settings: dict[str, Any]) -> dict[str, dict[str, int]]:
    """The critic count and warm-up a scale cut (``scales.<scale>.n_critics`` / ``warmup_steps``), as
    ``scale_overrides`` entries: they are GS-WGAN's biggest cut at the quick scale (10 critics, not
    1,000, which forces a large sigma for the sound epsilon), so the tables' notes must say so."""
    return {key: {"paper": paper, "this_scale": int(settings[key])}
            for key, paper in (("n_critics", PAPER_N_CRITICS), ("warmup_steps", PAPER_WARMUP_STEPS))
            if int(settings[key]) != paper}


def final_report(ctx: TrainContext, sigma: float | None, steps: int, n_d: int, schedule: str,
                 settings: dict[str, Any]) -> PrivacyReport:
    """privacy.json: both accountings for a private run; an explicit 'not private' record otherwise."""
    h = ctx.experiment.hparams
    extra = {"experiment": ctx.name, "scale": ctx.scale, "schedule_accounting": schedule,
             "warmstart": {k: settings[k] for k in ("n_critics", "warmup_steps")},
             "note": "headline = sound (one subsampled Gaussian of multiplier sigma/sqrt(B) per step); "
                     "as_published = the paper's per-sample count"}
    if sigma is None:
        return PrivacyReport(mechanism="none (non-private)", sigma=None, delta=0.0, epsilon={"non_private": math.inf},
                             headline="non_private", steps=steps, dataset_size=len(ctx.data.x_train),
                             batch_size=h.batch_size, shards=n_d, extra=extra, noise=ctx.noise.describe())
    plan = ctx.privacy_plan
    rep = gswgan_report(sigma=sigma, shards=n_d, batch_size=h.batch_size, steps=steps, delta=plan.delta,
                        dataset_size=len(ctx.data.x_train), clip=h.clip, target_epsilon=plan.epsilon)
    rep.extra.update(extra)
    rep.noise = ctx.noise.describe()
    return rep
