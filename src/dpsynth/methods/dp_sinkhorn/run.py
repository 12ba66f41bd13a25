"""A DP-Sinkhorn run (seeds 000-002, DESIGN 5.1): plan, build, step until the budget is spent,
release. The step itself -- every variant's -- is :mod:`dpsynth.methods.dp_sinkhorn.step`.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch

from dpsynth.methods.base import (
    TOGETHER_KEY,
    Checkpointer,
    TrainContext,
    TrainLog,
    already_done,
    checkpoint_if_due,
    config_fingerprint,
    release_record,
    rng_state,
    save_generator,
    set_rng_state,
    show_progress_fields,
    sigterm_flag,
    train_progress,
    write_public_log,
)
from dpsynth.methods.dp_sinkhorn.plan import (
    DEFAULT_ITERS,
    LOG_EVERY,
    LOG_FIELDS,
    PARAM_CLIP,
    final_report,
    generator_arch,
    make_optimizer,
    privacy_schedule,
    records_to_float,
    sampling,
    validate_data,
)
from dpsynth.methods.dp_sinkhorn.step import AdversarialStep, FastStep, StepSpec
from dpsynth.nets import build_generator
from dpsynth.ot import num_extra
from dpsynth.privacy.report import BudgetGuard
from dpsynth.privacy.sanitizers import ParamGradSanitizer

__all__ = ["train"]


def train(ctx: TrainContext) -> dict[str, Any]:
    validate_data(ctx)
    h = ctx.experiment.hparams
    dev = ctx.device
    q, scheme, parts_np = sampling(ctx)
    sigma, total_steps = privacy_schedule(ctx, q, scheme)
    private = sigma is not None
    n, n_extra = h.batch_size, num_extra(h.batch_size, h.p)
    n_iter = h.sinkhorn_iters or DEFAULT_ITERS
    num_classes = ctx.data.num_classes

    x_all = records_to_float(ctx.data.x_train).to(dev)
    y_all = torch.from_numpy(ctx.data.y_train).to(dev)

    arch = generator_arch(ctx)
    torch.manual_seed(ctx.seed)
    G = build_generator(arch["name"], **arch["kwargs"]).to(dev)
    # The fast step's CUDA graph needs a capturable optimizer (SGD has no device-side state; it
    # runs the fast step eagerly) and no host-side parameter-gradient sanitizer.
    graph = dev.type == "cuda" and parts_np is None and h.optimizer != "sgd" and not (private and h.sanitizer == "param")
    opt = make_optimizer(G.parameters(), h, capturable=graph)
    g_model = torch.Generator(device=dev).manual_seed(ctx.seed * 1000 + 1)  # latents, labels (not secret)
    g_data = ctx.noise.torch_generator(dev, 2)  # Poisson sampling / partition choice: secret
    g_noise = ctx.noise.torch_generator(dev, 3)  # sanitizer noise: secret
    gens = {"model": g_model, "data": g_data, "noise": g_noise}

    san_par = ParamGradSanitizer(list(G.parameters()), PARAM_CLIP, sigma, generator=g_noise) \
        if private and h.sanitizer == "param" else None
    guard = BudgetGuard(sigma, q, ctx.privacy_plan["delta"], ctx.privacy_plan["epsilon"],
                        sampling=scheme) if private else None
    spec = StepSpec(n=n, n_extra=n_extra, num_classes=num_classes, alpha_c=h.alpha_c, eps=h.temperature,
                    n_iter=n_iter, scaling=h.sinkhorn_scaling, m=h.m, clip=h.clip,
                    sigma=sigma if private and h.sanitizer == "image" else None, q=q)
    if parts_np is None:
        fast: FastStep = FastStep(G, opt, x_all, y_all, spec, gens, cuda_graph=graph, param_sanitizer=san_par)
    else:
        fast = AdversarialStep(G, opt, x_all, y_all, spec, gens, partitions=torch.from_numpy(parts_np).to(dev),
                               alpha_a=h.alpha_a, feature_lr=h.feature_lr or h.lr, param_sanitizer=san_par)
    adversarial = isinstance(fast, AdversarialStep)

    ckpt = Checkpointer(ctx.checkpoint_path, config_fingerprint(ctx))
    state = ckpt.load()
    step = 0
    together = state.get(TOGETHER_KEY) if state is not None else None  # trained by a batched sweep
    if state is not None:
        G.load_state_dict(state["generator"])
        opt.load_state_dict(state["optimizer"])
        set_rng_state(state["rng"], gens)
        step = state["step"]
        if adversarial:
            fast.load_adversary_state(state["adversary"])
        if guard is not None:
            guard = BudgetGuard.from_state_dict(state["guard"])
        if already_done(ctx, state):  # else a finished run re-releases below: the loop has no steps left
            return {"experiment": ctx.name, "steps": step, "resumed": True, "already_done": True, "sigma": sigma}

    log = TrainLog(ctx.log_path, LOG_FIELDS, resume_step=step if state is not None else None,
                   rows=state.get("log_rows") if state is not None else None)
    ckpt.log = log

    def save_checkpoint(done: bool = False) -> None:
        ckpt.save({"step": step, "total_steps": total_steps, "sigma": sigma, "arch": arch, "done": done,
                   "release": release_record(ctx) if done else None,
                   "generator": G.state_dict(), "optimizer": opt.state_dict(), "rng": rng_state(gens),
                   "guard": guard.state_dict() if guard is not None else None,
                   "adversary": fast.adversary_state() if adversarial else None})

    def sanitizer_stats() -> tuple[float, float]:
        last = san_par.last if san_par is not None else fast.sanitizer.last if fast.sanitizer is not None else None
        return (last.clean_norm, last.noise_norm) if last else (float("nan"), 0.0)

    def checked_save(done: bool = False) -> None:
        fast.check()  # on a GPU the step defers its refusal to here: never checkpoint or release past it
        save_checkpoint(done)

    stop_at = total_steps if ctx.max_steps_this_run is None else min(total_steps, step + ctx.max_steps_this_run)
    G.train()
    t_start, steps_start = time.perf_counter(), step
    bar = train_progress(ctx, total_steps, step)
    try:
        with sigterm_flag() as flag:
            while step < stop_at:
                if guard is not None:
                    guard.step()  # refuses (PrivacyError) before a step that would exceed the target
                loss, k = fast()  # device tensors: read at log time only
                step += 1
                bar.update(1)
                if step % LOG_EVERY == 0 or step == total_steps:
                    fast.check()
                    rate = (step - steps_start) / max(time.perf_counter() - t_start, 1e-9)
                    eps_spent = guard.epsilon_spent() if guard is not None else math.inf
                    clean_norm, noise_norm = sanitizer_stats()
                    loss_v = float(loss)
                    log.write(step, loss=loss_v, real_batch=int(k), epsilon=eps_spent, steps_per_s=rate,
                              clean_norm=clean_norm, noise_norm=noise_norm)
                    show_progress_fields(ctx, bar, eps_spent, loss=loss_v)
                checkpoint_if_due(ctx, step, total_steps, flag, log, checked_save)
    finally:
        bar.close()
        log.close()
        if san_par is not None:
            san_par.remove()
    rows = log.snapshot()
    fast.check()  # nothing is released after a refused step (on a GPU the refusal is deferred)

    elapsed = time.perf_counter() - t_start
    rate = (step - steps_start) / max(elapsed, 1e-9)
    if step < total_steps:  # stopped early on purpose (tests simulate a kill; benchmarks time a slice)
        checked_save()
        return {"experiment": ctx.name, "steps": step, "total_steps": total_steps, "finished": False,
                "steps_this_run": step - steps_start, "steps_per_s_this_run": round(rate, 3),
                "variant": "adversarial" if adversarial else "fast", "cuda_graph": graph}

    meta = {"num_classes": num_classes, "record_shape": list(ctx.data.record_shape),
            "output_range": "tanh" if ctx.data.is_image else "identity",
            "sample_batch_size": 500, "experiment": ctx.name, "scale": ctx.scale, "seed": ctx.seed}
    G.eval()
    report = final_report(ctx, sigma, step, q, scheme, {"experiment": ctx.name, "scale": ctx.scale, "sanitizer":
                                              h.sanitizer if private else "none", "p": h.p, "m": h.m,
                                              "temperature": h.temperature, "sinkhorn_iters": n_iter,
                                              "sinkhorn_scaling": h.sinkhorn_scaling,
                                              "adversarial": h.adversarial,
                                              "partitions": len(fast.phis) if adversarial else None})
    report.noise = ctx.noise.describe()
    save_generator(ctx.generator_path, G, arch, meta)
    write_public_log(rows, ctx.public_log_path)
    report.write(ctx.privacy_path)
    checked_save(done=True)
    return {"experiment": ctx.name, "steps": step, "sigma": sigma, "steps_per_s_this_run": round(rate, 2),
            "epsilon": report.epsilon, "finished": True, "variant": "adversarial" if adversarial else "fast",
            "cuda_graph": graph,
            **({TOGETHER_KEY: together} if together else {})}
