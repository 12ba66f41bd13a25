"""DP-CGAN (Torkzadehmahani, Kairouz, Paten, "DP-CGAN: Differentially Private Synthetic Data and Label
Generation", CVPR Workshops 2019, arXiv:2001.09700): the DP-SGD GAN baseline of GS-WGAN (Chen et al.,
NeurIPS 2020, arXiv:2006.08265) and of DP-Sinkhorn's ICLR Table 1.

A class-conditional GAN (``nets/cgan.py``: one-hidden-layer MLPs, the label one-hot concatenated to
the input) whose discriminator D is trained by DP-SGD and whose generator G only ever sees D.

What is private, exactly. One step:

1. a Poisson sample of the private records: each record independently with probability
   ``q = B / N`` (``B`` = ``hparams.batch_size``, the EXPECTED batch size), drawn from a secret
   generator (``ctx.noise``);
2. for each sampled record ``(x_i, y_i)``, the per-example gradient of ITS term of the discriminator
   loss, ``g_i = d/d theta_D  BCE(D(x_i, y_i), 1)``, clipped to norm ``C``; the clipped rows are summed,
   ``N(0, (C sigma)^2)`` is added per coordinate and the result divided by ``B``
   (``privacy.sanitizers.PerExampleGradSanitizer``, audited in ``privacy/audit.py``). Only this
   gradient is clipped and noised: it is the only one that reads a private record;
3. the fake-sample term ``BCE(D(G(z_j), y_j), 0)`` on ``B`` generated samples, whose latents ``z_j``
   and labels ``y_j`` are drawn from a seeded generator, never from the data: its gradient is a
   function of the current (already privatized) parameters only, so it needs no noise. It is clipped
   per example to the same ``C`` (as the reference clips it, so the two terms stay balanced) and
   averaged over its ``B`` samples; D takes one SGD step on the sum of both terms;
4. G takes one Adam step on ``BCE(D(G(z_j), y_j), 1)`` through the updated D: post-processing.

Neighbouring datasets add or remove one record. Under Poisson sampling the noisy sum changes by one
clipped row, L2 sensitivity ``C``; with noise std ``C sigma`` every step is the Poisson-subsampled
Gaussian mechanism of multiplier ``sigma`` at rate ``q``, which ``privacy.accounting`` composes over
the steps (``dp_sgd_report``, sampling "poisson", headline the classic RDP conversion the papers
quote); a ``BudgetGuard`` refuses any step past the target. The division by the public ``B`` (never
by the realised, private count) is post-processing.

Per-example gradients come from ``torch.func`` (``functional_call`` + ``vmap`` + ``grad``). Opacus is
the well-kept library for this, but it is not a dependency, it would draw its own noise outside the
run's secret ``NoiseSource``, and every privacy barrier here must be an audited class of
``privacy/sanitizers.py``.

Deviations from the reference script (``ParkLabML/DP-MERF`` ``dpcgan/dp_cgan_reference_im.py``, a copy
of the authors' code): (a) its fake samples are conditioned on the real batch's labels, which would
pass private labels into an un-noised gradient; ours are conditioned on uniform labels; (b) its
accountant is called with multiplier ``sigma * C`` (1.12 x 1.1); ours charges the noise actually added
(multiplier ``sigma``), so at the paper's sigma 1.12, q = 600/60,000 and (10, 1e-5) a run has 24,702
steps; (c) its loop stops when epsilon reaches the target; ours plans the steps up front (derived from
sigma, or a scale's step budget with sigma calibrated).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch.func import functional_call, grad, vmap
from torch.nn import functional as F

from dpsynth.errors import ConfigError, DataError, DpsynthError
from dpsynth.methods.artifacts import release_meta
from dpsynth.methods.checkpoint import Resumable
from dpsynth.methods.context import TrainContext
from dpsynth.methods.loop import Release, run_training
from dpsynth.methods.optim import make_optimizer
from dpsynth.nets import GENERATORS, build_seeded_generator
from dpsynth.nets.cgan import CGANDiscriminator, CGANGenerator
from dpsynth.privacy import mechanisms
from dpsynth.privacy.report import BudgetGuard, PrivacyReport, dp_sgd_report
from dpsynth.privacy.sanitizers import PerExampleGradSanitizer

#: Generator steps of a non-private run without a step budget (the reference's loop cap).
PAPER_STEPS = 100_000
LOG_EVERY = 50
LOG_FIELDS = ("d_loss_real", "d_loss_fake", "g_loss", "real_batch", "max_example_norm", "d_lr")


def validate(ctx: TrainContext) -> None:
    """One clear error before any training (shape, dtype, labels, batch vs records, generator)."""
    x, h = ctx.data.x_train, ctx.experiment.hparams
    if x.ndim != 4 or tuple(x.shape[2:]) != (28, 28) or x.dtype != np.uint8:
        raise DataError(f"{ctx.data.name}: DP-CGAN's MLPs take 28x28 images; need uint8 (N, C, 28, 28), "
                        f"got {x.dtype} {tuple(x.shape)}")
    if not ctx.data.num_classes:
        raise DataError(f"{ctx.data.name}: DP-CGAN is class-conditional; the dataset has no labels")
    if h.batch_size > len(x):
        raise ConfigError(f"experiments.{ctx.name}.hparams.batch_size {h.batch_size} > the {len(x)} records")
    if GENERATORS.get(h.generator) is not CGANGenerator:
        raise ConfigError(f"experiments.{ctx.name}.hparams.generator: DP-CGAN uses its conditional MLP "
                          f"('cgan_mlp'), got {h.generator!r}")


def privacy_schedule(ctx: TrainContext) -> tuple[float | None, int, BudgetGuard | None]:
    """(sigma, steps, guard) from the plan by the subsampled Gaussian (``privacy.mechanisms``): steps
    derived from a given sigma (the paper's way), or sigma calibrated to a step budget; Poisson sampling
    at q = B / N either way."""
    h, n = ctx.experiment.hparams, len(ctx.data.x_train)
    schedule = mechanisms.get("subsampled_gaussian", mechanisms.SubsampledGaussian).schedule(
        ctx.privacy_plan, who=f"experiments.{ctx.name}.privacy", batch_size=h.batch_size,
        rate=lambda batch: batch / n, sampling="poisson", default_steps=lambda: h.max_steps or PAPER_STEPS)
    return schedule.sigma, schedule.steps, schedule.guard


def per_example_grads(D: CGANDiscriminator, x: torch.Tensor, y: torch.Tensor, target: float) -> torch.Tensor:
    """(k, P) gradients of each record's own term ``BCE(D(x_i, y_i), target)`` w.r.t. D's parameters,
    flattened in ``D.parameters()`` order. D has no buffers and no batch statistics, so row i depends on
    record i alone."""
    params = {k: v.detach() for k, v in D.named_parameters()}
    n_params = sum(v.numel() for v in params.values())
    if len(x) == 0:  # an empty Poisson sample: no rows (the sanitizer still releases the noise)
        return torch.zeros(0, n_params, dtype=x.dtype, device=x.device)

    def loss_one(p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        logit = functional_call(D, p, (xi[None], yi[None]))
        return F.binary_cross_entropy_with_logits(logit, torch.full_like(logit, target)).sum()

    rows = vmap(grad(loss_one), in_dims=(None, 0, 0))(params, x, y)
    return torch.cat([rows[k].reshape(len(x), -1) for k in params], dim=1)


def set_flat_grad(module: torch.nn.Module, flat: torch.Tensor) -> None:
    """Write a flat (P,) gradient into ``module``'s parameters' ``.grad`` (``parameters()`` order)."""
    offset = 0
    for p in module.parameters():
        k = p.numel()
        p.grad = flat[offset:offset + k].view_as(p).clone()
        offset += k


class DPCGANStepper(Resumable):
    """One DP-CGAN step (a DP-SGD discriminator step, then a generator step through it) as the one
    training loop's stepper."""

    log_fields = LOG_FIELDS
    log_every = LOG_EVERY

    def __init__(self, ctx: TrainContext, G: CGANGenerator, D: CGANDiscriminator, opt_g: torch.optim.Optimizer,
                 opt_d: torch.optim.Optimizer, gens: dict[str, torch.Generator],
                 sanitizer: PerExampleGradSanitizer | None, sigma: float | None, arch: dict[str, Any]) -> None:
        self.ctx, self.G, self.D, self.opt_g, self.opt_d = ctx, G, D, opt_g, opt_d
        self.gens, self.sanitizer, self.sigma, self.arch = gens, sanitizer, sigma, arch
        self.x_all = torch.from_numpy(np.ascontiguousarray(ctx.data.x_train)).to(ctx.device)
        self.y_all = torch.from_numpy(ctx.data.y_train.astype(np.int64)).to(ctx.device)
        self.q = ctx.experiment.hparams.batch_size / len(self.x_all)
        self.steps_done = 0

    def d_lr_at(self, step: int) -> float:
        """The reference's linear decay: d_lr at step 0 down to d_lr_end at d_lr_decay_steps, then flat."""
        h = self.ctx.experiment.hparams
        if step >= h.d_lr_decay_steps - 1:
            return h.d_lr_end
        return h.d_lr - (h.d_lr - h.d_lr_end) * step / (h.d_lr_decay_steps - 1)

    def poisson_sample(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Each private record independently with probability q (secret generator); images in [0, 1]."""
        mask = torch.rand(len(self.x_all), generator=self.gens["sample"], device=self.x_all.device) < self.q
        idx = torch.nonzero(mask).squeeze(1)
        return self.x_all[idx].float().div(255.0), self.y_all[idx]

    def step(self) -> dict[str, Any]:
        h = self.ctx.experiment.hparams
        b = h.batch_size
        lr = self.d_lr_at(self.steps_done)
        for group in self.opt_d.param_groups:
            group["lr"] = lr
        xr, yr = self.poisson_sample()
        z = self.G.sample_latent(b, self.gens["latent"])
        yf = self.G.sample_labels(b, self.gens["latent"])
        assert yf is not None
        with torch.no_grad():
            fake = self.G(z, yf)
        real_rows = per_example_grads(self.D, xr, yr, 1.0)
        fake_rows = per_example_grads(self.D, fake, yf, 0.0)
        if self.sanitizer is not None:
            d_grad = self.sanitizer.release(real_rows) + self.sanitizer.clip_mean(fake_rows)
        else:  # non-private: the same step without clip or noise
            d_grad = real_rows.sum(dim=0) / b + fake_rows.mean(dim=0)
        set_flat_grad(self.D, d_grad)
        self.opt_d.step()
        # the generator's step reads D's (privatized) weights only: post-processing
        logits = self.D(self.G(z, yf), yf)
        g_loss = F.binary_cross_entropy_with_logits(logits, torch.ones_like(logits))
        self.opt_g.zero_grad(set_to_none=True)
        g_loss.backward(inputs=list(self.G.parameters()))
        self.opt_g.step()
        self.steps_done += 1
        return {"xr": xr, "yr": yr, "fake": fake, "yf": yf, "g_loss": g_loss.detach(), "d_lr": lr}

    def check(self) -> None:
        """The sanitizer refuses non-finite gradients at once (nothing is deferred)."""

    def log_row(self, stats: dict[str, Any]) -> dict[str, float]:
        """Private diagnostics (losses on the sampled real records, the realised batch size, norms)."""
        with torch.no_grad():
            lr_ = self.D(stats["xr"], stats["yr"])
            lf = self.D(stats["fake"], stats["yf"])
            d_real = float(F.binary_cross_entropy_with_logits(lr_, torch.ones_like(lr_))) if len(lr_) else 0.0
            d_fake = float(F.binary_cross_entropy_with_logits(lf, torch.zeros_like(lf)))
        g_loss = float(stats["g_loss"])
        if not math.isfinite(g_loss):
            raise DpsynthError(f"{self.ctx.name}: the generator loss became {g_loss}; lower hparams.lr")
        last = self.sanitizer.last if self.sanitizer is not None else None
        return {"d_loss_real": d_real, "d_loss_fake": d_fake, "g_loss": g_loss, "real_batch": float(len(stats["xr"])),
                "max_example_norm": last.clean_norm if last else float("nan"), "d_lr": float(stats["d_lr"])}

    def progress(self, stats: dict[str, Any]) -> dict[str, float]:
        return {"g_loss": float(stats["g_loss"])}

    def state_parts(self) -> dict[str, Any]:
        return {"generator": self.G, "discriminator": self.D, "opt_g": self.opt_g, "opt_d": self.opt_d}

    def random_streams(self) -> dict[str, torch.Generator]:
        return self.gens  # sample and noise (secret), latent (seeded)

    def release(self, steps: int) -> Release:
        ctx = self.ctx
        return Release(self.G.eval(), self.arch, release_meta(ctx, "sigmoid"), privacy_report(ctx, self.sigma, steps))

    def close(self) -> None:
        pass


def privacy_report(ctx: TrainContext, sigma: float | None, steps: int) -> PrivacyReport:
    """privacy.json: the Poisson-subsampled Gaussian of multiplier sigma at q = B / N over ``steps``."""
    h, plan, n = ctx.experiment.hparams, ctx.privacy_plan, len(ctx.data.x_train)
    extra = {"experiment": ctx.name, "scale": ctx.scale,
             "note": "DP-SGD on the discriminator: each Poisson-sampled real record's per-example gradient of its "
                     "own loss term clipped to C, the sum noised with N(0, (C sigma)^2) and divided by the expected "
                     "batch B; add/remove-one neighbours (sensitivity C); the fake-sample term and the generator "
                     "are post-processing"}
    if sigma is None:
        return PrivacyReport(mechanism="none (non-private)", sigma=None, delta=0.0, epsilon={"non_private": math.inf},
                             headline="non_private", steps=steps, dataset_size=n, batch_size=h.batch_size,
                             extra=extra, noise=ctx.noise.describe())
    assert plan.delta is not None
    return dp_sgd_report(mechanism="dp_cgan: DP-SGD discriminator (per-example clip C, add/remove-one, Poisson)",
                         sigma=sigma, batch_size=h.batch_size, dataset_size=n, steps=steps, delta=plan.delta,
                         sampling="poisson", clip=h.clip, target_epsilon=plan.epsilon, extra=extra).within_target(ctx.name)


def generator_arch(ctx: TrainContext) -> dict[str, Any]:
    h = ctx.experiment.hparams
    return {"name": h.generator, "kwargs": {"latent_dim": h.latent_dim, "num_classes": ctx.data.num_classes,
                                            "hidden": h.hidden, "out_channels": int(ctx.data.x_train.shape[1])}}


def train(ctx: TrainContext) -> dict[str, Any]:
    validate(ctx)
    h, dev = ctx.experiment.hparams, ctx.device
    sigma, total, guard = privacy_schedule(ctx)
    arch = generator_arch(ctx)
    G = build_seeded_generator(arch, ctx.seed, dev).train()
    torch.manual_seed(int(np.random.SeedSequence([ctx.seed, 0xD15]).generate_state(1)[0]))
    D = CGANDiscriminator(int(np.prod(ctx.data.x_train.shape[1:])), int(ctx.data.num_classes), h.hidden).to(dev)
    opt_g = make_optimizer(G.parameters(), h.optimizer, lr=h.lr, betas=h.betas)
    opt_d = make_optimizer(D.parameters(), "sgd", lr=h.d_lr)
    # Poisson sampling and the sanitizer's noise protect privacy: secret streams (OS entropy by default).
    # Latents and generated labels never meet the data: a seeded stream. All three are checkpointed.
    gens = {"sample": ctx.noise.torch_generator(dev, 31), "noise": ctx.noise.torch_generator(dev, 32),
            "latent": torch.Generator(dev).manual_seed(int(np.random.SeedSequence([ctx.seed, 0xC6A]).generate_state(1)[0]))}
    sanitizer = PerExampleGradSanitizer(h.clip, sigma, float(h.batch_size), gens["noise"]) if sigma is not None else None
    stepper = DPCGANStepper(ctx, G, D, opt_g, opt_d, gens, sanitizer, sigma, arch)
    return run_training(ctx, stepper, total_steps=total, guard=guard, sigma=sigma,
                        extra={"schedule": ctx.privacy_plan.mode})
