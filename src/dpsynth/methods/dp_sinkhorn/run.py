"""A DP-Sinkhorn run (the DP-Sinkhorn ICLR submission; DP-Sinkhorn (NeurIPS 2021, arXiv:2111.01177)): the plan, the one step, and the stepper the one
training loop (``methods/loop.py``) drives. The step itself -- every variant's -- is
:mod:`dpsynth.methods.dp_sinkhorn.step`.
"""

from __future__ import annotations

from typing import Any

import torch

from dpsynth.methods.artifacts import release_meta
from dpsynth.methods.checkpoint import Resumable
from dpsynth.methods.context import TrainContext
from dpsynth.methods.dp_sinkhorn.plan import (
    DEFAULT_ITERS,
    LOG_EVERY,
    PARAM_CLIP,
    STEP_LOG_FIELDS,
    final_report,
    generator_arch,
    generator_optimizer,
    latent_generator,
    privacy_schedule,
    records_to_float,
    sampling,
    validate_data,
)
from dpsynth.methods.dp_sinkhorn.adversarial import AdversarialStep
from dpsynth.methods.dp_sinkhorn.step import FastStep, PackedStep, StepSpec
from dpsynth.methods.dp_sinkhorn.tuning import StepTuning
from dpsynth.methods.loop import Release, run_training
from dpsynth.nets import build_seeded_generator
from dpsynth.ot import num_extra
from dpsynth.privacy.report import BudgetGuard
from dpsynth.privacy.sanitizers import ParamGradSanitizer

__all__ = ["DPSinkhornStepper", "MemberState", "train"]


class MemberState(Resumable):
    """Member ``i`` of a packed step as its run's checkpoint: its generator, its optimizer, its three
    random streams (the secret ones included) and the architecture -- with the adversarial variant's
    feature extractors, the keys a run's checkpoint always had. A run's stepper is member 0 of its
    one-member step; each member of a batched sweep (``together.py``) is one of these, so its
    checkpoint is its own run's: ``dpsynth train CELL`` resumes or releases it alone."""

    def __init__(self, packed: PackedStep, i: int, arch: dict[str, Any]) -> None:
        self.packed, self.i, self.arch = packed, i, arch

    def state_parts(self) -> dict[str, Any]:
        m = self.packed.members[self.i]
        return {"generator": m.G, "optimizer": m.opt}

    def random_streams(self) -> dict[str, torch.Generator]:
        return self.packed.members[self.i].gens

    def extra_state(self) -> dict[str, Any]:
        adv = self.packed if isinstance(self.packed, AdversarialStep) else None
        return {"arch": self.arch, "adversary": adv.adversary_state() if adv is not None else None}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        if isinstance(self.packed, AdversarialStep):
            self.packed.load_adversary_state(state["adversary"])


class DPSinkhornStepper(MemberState):
    """The one step of one run (:class:`FastStep` or :class:`AdversarialStep`) as the loop's stepper."""

    log_fields = STEP_LOG_FIELDS
    log_every = LOG_EVERY

    def __init__(self, ctx: TrainContext, fast: FastStep, arch: dict[str, Any], sigma: float | None, q: float,
                 scheme: str, graph: bool) -> None:
        super().__init__(fast, 0, arch)
        self.ctx, self.fast, self.sigma, self.q, self.scheme, self.graph = ctx, fast, sigma, q, scheme, graph
        self.adversarial = isinstance(fast, AdversarialStep)

    def step(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.fast()  # (loss, k) as device tensors: read at log time only

    def check(self) -> None:
        self.fast.check()

    def log_row(self, stats: tuple[torch.Tensor, torch.Tensor]) -> dict[str, float]:
        loss, k = stats
        return self.fast.log_row(0, (loss.reshape(1), k.reshape(1)))

    def progress(self, stats: tuple[torch.Tensor, torch.Tensor]) -> dict[str, float]:
        return {"loss": float(stats[0])}

    def release(self, steps: int) -> Release:
        ctx, h, s = self.ctx, self.ctx.experiment.hparams, self.fast.spec
        G = self.fast.G.eval()
        meta = release_meta(ctx, "tanh" if ctx.data.is_image else "identity")
        report = final_report(ctx, self.sigma, steps, self.q, self.scheme, {
            "experiment": ctx.name, "scale": ctx.scale, "sanitizer": h.sanitizer if self.sigma is not None else "none",
            "p": h.p, "m": h.m, "temperature": h.temperature, "sinkhorn_iters": s.n_iter,
            "sinkhorn_scaling": h.sinkhorn_scaling, "adversarial": h.adversarial,
            "partitions": len(self.fast.phis) if isinstance(self.fast, AdversarialStep) else None})
        return Release(G, self.arch, meta, report, summary={"variant": self.variant, "cuda_graph": self.graph})

    @property
    def variant(self) -> str:
        return "adversarial" if self.adversarial else "fast"

    def close(self) -> None:
        if self.fast.param_sanitizer is not None:
            self.fast.param_sanitizer.remove()


def train(ctx: TrainContext) -> dict[str, Any]:
    validate_data(ctx)
    h = ctx.experiment.hparams
    dev = ctx.device
    q, scheme, parts_np = sampling(ctx)
    sigma, total_steps = privacy_schedule(ctx, q, scheme)
    private = sigma is not None

    x_all = records_to_float(ctx.data.x_train).to(dev)
    y_all = torch.from_numpy(ctx.data.y_train).to(dev)
    arch = generator_arch(ctx)
    G = build_seeded_generator(arch, ctx.seed, dev)
    # The fast step's CUDA graph needs a capturable optimizer (SGD has no device-side state; it
    # runs the fast step eagerly) and no host-side parameter-gradient sanitizer.
    graph = dev.type == "cuda" and parts_np is None and h.optimizer != "sgd" and not (private and h.sanitizer == "param")
    tuning = StepTuning.for_run(h.gpu_levers, dev)  # the GPU speed levers (none on the CPU)
    opt = generator_optimizer(G.parameters(), h, capturable=graph, fused=tuning.fused_adam)
    gens = {"model": latent_generator(ctx.seed, dev),  # latents, labels (not secret)
            "data": ctx.noise.torch_generator(dev, 2),  # Poisson sampling / partition choice: secret
            "noise": ctx.noise.torch_generator(dev, 3)}  # sanitizer noise: secret

    san_par = ParamGradSanitizer(list(G.parameters()), PARAM_CLIP, sigma, generator=gens["noise"]) \
        if private and h.sanitizer == "param" else None
    guard = BudgetGuard(sigma, q, ctx.privacy_plan.delta, ctx.privacy_plan.epsilon,
                        sampling=scheme) if private else None
    spec = StepSpec(n=h.batch_size, n_extra=num_extra(h.batch_size, h.p), num_classes=ctx.data.num_classes,
                    alpha_c=h.alpha_c, eps=h.temperature, n_iter=h.sinkhorn_iters or DEFAULT_ITERS,
                    scaling=h.sinkhorn_scaling, m=h.m, clip=h.clip,
                    sigma=sigma if private and h.sanitizer == "image" else None, q=q)
    if parts_np is None:
        fast = FastStep(G, opt, x_all, y_all, spec, gens, cuda_graph=graph, param_sanitizer=san_par, tuning=tuning)
    else:
        fast = AdversarialStep(G, opt, x_all, y_all, spec, gens, partitions=torch.from_numpy(parts_np).to(dev),
                               alpha_a=h.alpha_a, feature_lr=h.feature_lr or h.lr, param_sanitizer=san_par)
    G.train()
    stepper = DPSinkhornStepper(ctx, fast, arch, sigma, q, scheme, graph)
    return run_training(ctx, stepper, total_steps=total_steps, guard=guard, sigma=sigma,
                        extra={"variant": stepper.variant, "cuda_graph": graph, "fused_solve": fast.fused_solve,
                               "gpu_levers": list(tuning.levers)})
