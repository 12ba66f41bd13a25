"""One entropic WGAN run on the one training loop: its stepper, its privacy report (a copy of the
local mechanism's: training is post-processing) and ``train``."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

import numpy as np
import torch

from dpsynth.errors import ConfigError, DataError, DpsynthError
from dpsynth.methods.checkpoint import Resumable
from dpsynth.methods.context import TrainContext
from dpsynth.methods.entropic_wgan.fit import EWGANTrainer, generator_arch
from dpsynth.methods.entropic_wgan.loss import LossSpec, local_noise, loss_spec_for
from dpsynth.methods.loop import Release, run_training
from dpsynth.nets import build_seeded_generator
from dpsynth.privacy import mechanisms

def _total_steps(ctx: TrainContext) -> int:
    steps = ctx.privacy_plan.steps or ctx.experiment.hparams.max_steps
    if steps is None:
        raise ConfigError(f"experiments.{ctx.name}.hparams.max_steps: the {ctx.scale!r} scale sets no step "
                          "budget, so the experiment must (e.g. epochs * N / batch_size)")
    return int(steps)


def _privacy_report(ctx: TrainContext, noise: dict[str, Any], n_records: int) -> Any:
    from dpsynth.privacy.report import PrivacyReport

    local = ctx.experiment.local
    assert local is not None
    return PrivacyReport(
        mechanism=mechanisms.local(local.mechanism).name, sigma=noise["noise_scale"], delta=noise["delta"],
        epsilon={"sound": noise["epsilon"], "paper_convention": noise["epsilon_paper_convention"]},
        headline="sound", dataset_size=n_records,
        noise=ctx.noise.describe(),
        extra={"local": {**noise, "dct": local.dct, "dct_quantile": local.dct_quantile if local.dct else None},
               "note": "epsilon-LDP of each record from the privatize stage; training is post-processing "
                       "of the privatized records, so no accountant is involved (Reshetova et al., arXiv:2306.09547, Remark 1)"},
    )


class EWGANStepper(Resumable):
    """The entropic WGAN's step as the one training loop's stepper (``methods/loop.py``). Training
    sees only locally privatized records, so its loss is post-processing: logged and released."""

    log_fields = ("loss",)

    def __init__(self, ctx: TrainContext, trainer: EWGANTrainer, spec: LossSpec, noise: dict[str, Any],
                 arch: dict[str, Any], record_shape: tuple[int, ...], total: int) -> None:
        self.ctx, self.trainer, self.spec, self.noise, self.arch = ctx, trainer, spec, noise, arch
        self.record_shape = record_shape
        self.log_every = max(1, total // 200)
        self.steps_done = 0
        self.loss = float("nan")

    def step(self) -> float:
        self.loss = self.trainer.step()
        self.steps_done += 1
        if not math.isfinite(self.loss):
            raise DpsynthError(f"{self.ctx.name}: loss became {self.loss} at step {self.steps_done}; lower hparams.lr")
        return self.loss

    def check(self) -> None:
        """Nothing deferred: the loss is checked every step."""

    def log_row(self, stats: float) -> dict[str, float]:
        return {"loss": stats}

    def progress(self, stats: float) -> dict[str, float]:
        return {"loss": stats}

    def state_parts(self) -> dict[str, Any]:
        return self.trainer.state_parts()

    def random_streams(self) -> dict[str, torch.Generator]:
        return self.trainer.random_streams()

    def extra_state(self) -> dict[str, Any]:
        return {"spec": asdict(self.spec), "arch": self.arch}

    def epsilon(self) -> float:
        """The whole local budget was spent before the first step: epsilon is that, at every step."""
        return self.noise["epsilon"] if self.noise["epsilon"] is not None else math.inf

    def release(self, steps: int) -> Release:
        ctx, spec, noise, rs = self.ctx, self.spec, self.noise, self.record_shape
        meta = {"num_classes": ctx.data.num_classes, "record_shape": list(rs),
                "output_range": "tanh" if len(rs) == 3 else "identity",
                "sample_batch_size": self.trainer.batch, "unconditional": True,
                "record_space": "images in [-1, 1]" if len(rs) == 3 else "points", "loss": asdict(spec)}
        summary = {
            "method": ctx.experiment.method, "loss_name": spec.loss, "final_loss": self.loss, "p": spec.p,
            "temperature": spec.temperature, "noise_scale": noise["noise_scale"], "epsilon": noise["epsilon"],
            "epsilon_paper_convention": noise["epsilon_paper_convention"], "delta": noise["delta"],
            "scale": ctx.scale, "seed": ctx.seed,
        }
        # The loss (computed on privatized records only) is released beside epsilon in train_log.csv.
        return Release(self.trainer.gen, self.arch, meta, _privacy_report(ctx, noise, len(ctx.data.x_train)),
                       public_fields=("step", "epsilon", "loss"), summary=summary)

    def close(self) -> None:
        pass


def train(ctx: TrainContext) -> dict[str, Any]:
    """Train (or resume) the experiment's generator through the one training loop; it writes
    generator.pt, privacy.json and train_log.csv (the whole log is releasable: see EWGANStepper)."""
    exp, hp = ctx.experiment, ctx.experiment.hparams
    record_shape = _record_shape(ctx)
    spec = loss_spec_for(exp, record_shape)
    assert exp.local is not None
    noise = local_noise(exp.local)
    total = _total_steps(ctx)
    x = ctx.data.x_train
    if x.ndim != 2 or x.shape[1] != int(np.prod(record_shape)):
        raise DataError(f"{ctx.name}: expected privatized float records (N, {int(np.prod(record_shape))}), got "
                        f"{x.shape} -- run `dpsynth privatize {ctx.name}` first")
    arch = generator_arch(hp.generator, record_shape)
    gen = build_seeded_generator(arch, ctx.seed, ctx.device)
    records = torch.as_tensor(np.asarray(x, dtype=np.float32), device=ctx.device)
    stepper = EWGANStepper(ctx, EWGANTrainer(gen, records, spec, hp, ctx.seed), spec, noise, arch, record_shape, total)
    # No accountant: the records were privatized once, before training (Reshetova et al., arXiv:2306.09547, Remark 1).
    return run_training(ctx, stepper, total_steps=total, guard=None, sigma=None, epsilon_spent=stepper.epsilon,
                        extra={"method": ctx.experiment.method})


def _record_shape(ctx: TrainContext) -> tuple[int, ...]:
    """Shape of one clean record (images (C, H, W), points (D,)) from the dataset registry."""
    from dpsynth.data.registry import get_spec

    return tuple(get_spec(ctx.experiment.dataset).shape)
