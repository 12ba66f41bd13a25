"""DP-Sinkhorn (seeds 000-002, DESIGN 5.1): a conditional generator trained on the
semi-debiased Sinkhorn loss, private through the image-gradient barrier.

One step: Poisson-sample the real batch (each record with probability q = B/N), generate a
FIXED batch of n + n' images (n = B, n' = floor(p n)), embed (image, alpha_c * onehot), compute
``S_p = 2 W(X[:n], Y) - W(X[:n], X[n':n+n'])`` and back-propagate through the sanitizer,
which clips the gradient w.r.t. the first n images as one tensor to C and adds
N(0, (2 C sigma)^2) noise (the n' images, which never meet real data, are clipped only).
The ``param`` ablation instead clips/noises the whole parameter gradient (C = 1 there).

An empty Poisson batch still counts as a step: the real term contributes no gradient, the
sanitizer still releases noise, and the accountant charges it. The real batch is padded
with zero-weight points to a bucketed size, so shapes take few distinct values.

Training runs :class:`~dpsynth.methods.fast_step.FastStep` (one stacked Sinkhorn solve, a
sync-free sanitizer, a CUDA graph on a GPU) for every variant but the adversarial one.
:func:`_step` is the plain step: the adversarial variant's (per-partition feature costs), and
the reference that tests/test_fast_step.py holds the fast step and this trainer to.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch

from dpsynth.data.dataset import validate_arrays
from dpsynth.errors import DataError, DpsynthError
from dpsynth.methods.base import (
    TOGETHER_KEY,
    Checkpointer,
    already_done,
    release_record,
    config_fingerprint,
    checkpoint_if_due,
    TrainContext,
    TrainLog,
    images_to_float,
    rng_state,
    save_generator,
    set_rng_state,
    sigterm_flag,
    show_progress_fields,
    train_progress,
    write_public_log,
)
from dpsynth.methods.fast_step import FastStep, StepSpec
from dpsynth.nets import build_generator
from dpsynth.ot import FeatureAugmentedCost, embed_with_labels, entropic_ot, make_cost, num_extra
from dpsynth.privacy import accounting as acc
from dpsynth.privacy.report import BudgetGuard, PrivacyReport, dp_sgd_report
from dpsynth.privacy.sanitizers import ParamGradSanitizer, WholeBatchSanitizer

#: DP-Sinkhorn's default Sinkhorn iterations per solve (annealed from the largest cost down
#: to eps with factor ``sinkhorn_scaling``; ~16 annealing iterations, the rest at eps).
DEFAULT_ITERS = 30
#: Pad the Poisson batch to a multiple of this many points (zero weights).
BUCKET = 16
LOG_EVERY = 25
#: ``hparams.model_dim`` of the published DCGAN generator (channels 256, 128, 64 = 4d, 2d, d).
DCGAN_WIDTH = 64
LOG_FIELDS = ["loss", "real_batch", "clean_norm", "noise_norm", "epsilon", "steps_per_s"]


def validate_data(ctx: TrainContext) -> None:
    """Clear errors before any training: the data layer's checks (dtype, shape, empty data, labels),
    then what this method needs (a generator for the image size, batch <= N)."""
    d, h = ctx.data, ctx.experiment.hparams
    validate_arrays(ctx.name, {"x_train": d.x_train, "y_train": d.y_train, "x_test": d.x_test,
                               "y_test": d.y_test}, d.num_classes, f"{ctx.name} (training data)")
    if d.x_train.ndim == 4 and d.x_train.shape[2:] not in ((28, 28), (32, 32)):
        raise DataError(f"{ctx.name}: generators exist for 28x28 and 32x32 images, got {d.x_train.shape[2:]}")
    if h.batch_size > d.x_train.shape[0]:
        raise DataError(f"{ctx.name}: batch_size {h.batch_size} is larger than the dataset "
                        f"({d.x_train.shape[0]} records)")


def generator_arch(ctx: TrainContext) -> dict[str, Any]:
    """Architecture from the hyperparameters and the data's shape (DESIGN 5.1)."""
    h, d = ctx.experiment.hparams, ctx.data
    if d.x_train.ndim == 2:
        if h.generator != "mlp":
            raise DpsynthError(f"{ctx.name}: point-cloud data needs hparams.generator 'mlp', not {h.generator!r}")
        return {"name": "mlp", "kwargs": {"latent_dim": 2, "output_dim": int(d.x_train.shape[1]),
                                          "hidden": [256, 256], "latent_dist": "uniform_symmetric"}}
    c, size = d.x_train.shape[1], d.x_train.shape[2]
    if h.generator == "dcgan":
        kwargs = {"latent_dim": 12 if c == 1 else 32, "num_classes": d.num_classes, "embed_dim": 4,
                  "out_channels": c, "image_size": size}
        if h.model_dim != DCGAN_WIDTH:  # (4d, 2d, d): the published (256, 128, 64) is d = 64
            kwargs["channels"] = [4 * h.model_dim, 2 * h.model_dim, h.model_dim]
    elif h.generator == "biggan":
        kwargs = {"latent_dim": 32, "num_classes": d.num_classes, "out_channels": c, "image_size": size}
    else:
        raise DpsynthError(f"{ctx.name}: hparams.generator {h.generator!r} is not a DP-Sinkhorn image generator "
                           f"(dcgan or biggan)")
    return {"name": h.generator, "kwargs": kwargs}


def records_to_float(x: np.ndarray) -> torch.Tensor:
    """Images -> [-1, 1] (tanh output); point clouds are used as they are."""
    return images_to_float(x, "tanh") if x.ndim == 4 else torch.from_numpy(x.astype(np.float32))


def embed(points: torch.Tensor, labels: torch.Tensor | None, num_classes: int, alpha_c: float) -> torch.Tensor:
    """Joint (record, alpha_c * onehot(label)) space; unconditional models use the record alone."""
    if labels is None:
        return points.reshape(points.shape[0], -1)
    return embed_with_labels(points, labels, num_classes, alpha_c, validate=False)


def privacy_schedule(ctx: TrainContext, q: float, sampling: str) -> tuple[float | None, int]:
    """(sigma, steps) from the plan: derive the steps from sigma, or calibrate sigma to the steps."""
    plan, h = ctx.privacy_plan, ctx.experiment.hparams
    if not plan["enabled"]:
        steps = plan.get("steps") or h.max_steps
        if steps is None:
            raise DpsynthError(f"{ctx.name}: a non-private run needs hparams.max_steps (or a scale step budget)")
        return None, int(steps)
    if plan["mode"] == "derive_steps":
        sigma = float(plan["sigma"])
        steps = acc.max_steps(sigma, q, plan["delta"], plan["epsilon"], conversion="classic", sampling=sampling)
        if steps < 1:
            raise DpsynthError(f"{ctx.name}: sigma {sigma} cannot afford a single step at epsilon {plan['epsilon']}")
    else:
        steps = int(plan["steps"])
        sigma = acc.calibrate_sigma(q, steps, plan["delta"], plan["epsilon"], conversion="classic",
                                    sampling=sampling)
    return sigma, steps


def make_partitions(n_records: int, batch_size: int, k: int | None, seed: int) -> np.ndarray:
    """Adversarial variant: a seeded split into k equal partitions (the paper's batches-as-records,
    k = N // B by default); the N - k * (N // k) leftover records are never used."""
    k = k or n_records // batch_size
    if k < 2:
        raise DataError(f"the adversarial variant needs at least 2 partitions; N={n_records}, "
                        f"batch_size={batch_size} gives {k}")
    size = n_records // k
    return np.random.default_rng(seed).permutation(n_records)[: k * size].reshape(k, size)


def _make_optimizer(params: Any, h: Any, capturable: bool = False) -> torch.optim.Optimizer:
    """``capturable`` (CUDA only) keeps Adam's/RMSprop's step counter on the device, which a
    CUDA graph needs; the update is the same."""
    if h.optimizer == "adam":
        return torch.optim.Adam(params, lr=h.lr, betas=tuple(h.betas), weight_decay=h.weight_decay,
                                capturable=capturable)
    if h.optimizer == "sgd":
        return torch.optim.SGD(params, lr=h.lr, weight_decay=h.weight_decay)
    return torch.optim.RMSprop(params, lr=h.lr, weight_decay=h.weight_decay, capturable=capturable)


def _final_report(ctx: TrainContext, sigma: float | None, steps_done: int, q: float, sampling: str,
                  extra: dict[str, Any]) -> PrivacyReport:
    h, plan, n = ctx.experiment.hparams, ctx.privacy_plan, ctx.data.x_train.shape[0]
    if sigma is None:
        return PrivacyReport(mechanism="none (non-private)", sigma=None, delta=0.0,
                             epsilon={"non_private": math.inf}, headline="non_private", steps=steps_done,
                             dataset_size=n, batch_size=h.batch_size, extra=extra)
    mech = {"image": "dp_sinkhorn image-gradient (whole-batch clip, sensitivity 2C)",
            "param": "dp_sinkhorn parameter-gradient (grad_theta ablation)"}[h.sanitizer]
    if h.adversarial:
        mech += ", adversarial features; one of k fixed partitions per step (Wang et al. 2019, replace-one)"
    return dp_sgd_report(mechanism=mech, sigma=sigma, batch_size=h.batch_size, dataset_size=n, steps=steps_done,
                         delta=plan["delta"], sampling=sampling, q=q, clip=h.clip if h.sanitizer == "image" else 1.0,
                         target_epsilon=plan["epsilon"], extra=extra)


def train(ctx: TrainContext) -> dict[str, Any]:
    validate_data(ctx)
    h = ctx.experiment.hparams
    dev = ctx.device
    n_records = ctx.data.x_train.shape[0]
    if h.adversarial:
        if not ctx.data.is_image:
            raise DataError(f"{ctx.name}: the adversarial variant needs image data")
        parts_np = make_partitions(n_records, h.batch_size, h.partitions, ctx.seed)
        q, sampling = 1.0 / parts_np.shape[0], "without_replacement"
    else:
        parts_np, q, sampling = None, h.batch_size / n_records, "poisson"
    sigma, total_steps = privacy_schedule(ctx, q, sampling)
    private = sigma is not None
    n, n_extra = h.batch_size, num_extra(h.batch_size, h.p)
    n_iter = h.sinkhorn_iters or DEFAULT_ITERS
    cost = make_cost("l2_l1", m=h.m) if h.m > 0 else make_cost("sqeuclidean")
    num_classes = ctx.data.num_classes

    x_all = records_to_float(ctx.data.x_train).to(dev)
    y_all = torch.from_numpy(ctx.data.y_train).to(dev)

    arch = generator_arch(ctx)
    torch.manual_seed(ctx.seed)
    G = build_generator(arch["name"], **arch["kwargs"]).to(dev)
    # The fast step's CUDA graph needs a capturable optimizer (SGD has no device-side state; it
    # runs the fast step eagerly) and no host-side parameter-gradient sanitizer.
    graph = dev.type == "cuda" and parts_np is None and h.optimizer != "sgd" and not (private and h.sanitizer == "param")
    opt = _make_optimizer(G.parameters(), h, capturable=graph)
    adv = None
    if parts_np is not None:
        from dpsynth.nets.features import FeatureExtractor

        phis = [FeatureExtractor(ctx.data.x_train.shape[1]).to(dev) for _ in range(parts_np.shape[0])]
        adv = {"parts": torch.from_numpy(parts_np).to(dev), "phis": phis, "opts": {},
               "lr": h.feature_lr or h.lr, "image_shape": tuple(ctx.data.record_shape)}
    g_model = torch.Generator(device=dev).manual_seed(ctx.seed * 1000 + 1)  # latents, labels (not secret)
    g_data = ctx.noise.torch_generator(dev, 2)  # Poisson sampling / partition choice: secret
    g_noise = ctx.noise.torch_generator(dev, 3)  # sanitizer noise: secret
    gens = {"model": g_model, "data": g_data, "noise": g_noise}

    clip_param = 1.0  # DESIGN 5.1: the grad_theta ablation clips the parameter gradient to C = 1
    san_img = WholeBatchSanitizer(h.clip, sigma, n_private=n, generator=g_noise) \
        if private and h.sanitizer == "image" and adv is not None else None
    san_par = ParamGradSanitizer(list(G.parameters()), clip_param, sigma, generator=g_noise) \
        if private and h.sanitizer == "param" else None
    guard = BudgetGuard(sigma, q, ctx.privacy_plan["delta"], ctx.privacy_plan["epsilon"],
                        sampling=sampling) if private else None

    ckpt = Checkpointer(ctx.checkpoint_path, config_fingerprint(ctx))
    state = ckpt.load()
    step = 0
    together = state.get(TOGETHER_KEY) if state is not None else None  # trained by a batched sweep
    if state is not None:
        G.load_state_dict(state["generator"])
        opt.load_state_dict(state["optimizer"])
        set_rng_state(state["rng"], gens)
        step = state["step"]
        if adv is not None:
            for phi, sd in zip(adv["phis"], state["adversary"]["phis"]):
                phi.load_state_dict(sd)
            for j, sd in state["adversary"]["opts"].items():
                adv["opts"][j] = torch.optim.Adam(adv["phis"][j].parameters(), lr=adv["lr"])
                adv["opts"][j].load_state_dict(sd)
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
                   "adversary": None if adv is None else {
                       "phis": [phi.state_dict() for phi in adv["phis"]],
                       "opts": {j: o.state_dict() for j, o in adv["opts"].items()}}})

    fast = None
    if adv is None:  # everything but the adversarial variant: the fast step (module docstring)
        spec = StepSpec(n=n, n_extra=n_extra, num_classes=num_classes, alpha_c=h.alpha_c, eps=h.temperature,
                        n_iter=n_iter, scaling=h.sinkhorn_scaling, m=h.m, clip=h.clip,
                        sigma=sigma if private and h.sanitizer == "image" else None, q=q)
        fast = FastStep(G, opt, x_all, y_all, spec, gens, cuda_graph=graph, param_sanitizer=san_par)

    def take_step() -> tuple[Any, Any]:
        if fast is not None:
            return fast()
        return _step(G, opt, x_all, y_all, n, n_extra, q, num_classes, h, cost, n_iter, gens, san_img, san_par, adv)

    def sanitizer_stats() -> tuple[float, float]:
        if fast is not None and fast.sanitizer is not None:  # the fast step's image sanitizer
            st = fast.stats()
            return st["clean_norm"], st["noise_norm"]
        last = san_par.last if san_par is not None else san_img.last if san_img is not None else None
        return (last.clean_norm, last.noise_norm) if last else (float("nan"), 0.0)

    def checked_save(done: bool = False) -> None:
        if fast is not None:
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
                loss, k = take_step()  # device tensors on the fast path: read at log time only
                step += 1
                bar.update(1)
                if step % LOG_EVERY == 0 or step == total_steps:
                    if fast is not None:
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
    if fast is not None:
        fast.check()  # nothing is released after a refused step (on a GPU the refusal is deferred)

    elapsed = time.perf_counter() - t_start
    rate = (step - steps_start) / max(elapsed, 1e-9)
    if step < total_steps:  # stopped early on purpose (tests simulate a kill; benchmarks time a slice)
        checked_save()
        return {"experiment": ctx.name, "steps": step, "total_steps": total_steps, "finished": False,
                "steps_this_run": step - steps_start, "steps_per_s_this_run": round(rate, 3),
                "fast_step": fast is not None, "cuda_graph": graph}

    meta = {"num_classes": num_classes, "record_shape": list(ctx.data.record_shape),
            "output_range": "tanh" if ctx.data.is_image else "identity",
            "sample_batch_size": 500, "experiment": ctx.name, "scale": ctx.scale, "seed": ctx.seed}
    G.eval()
    report = _final_report(ctx, sigma, step, q, sampling, {"experiment": ctx.name, "scale": ctx.scale, "sanitizer":
                                              h.sanitizer if private else "none", "p": h.p, "m": h.m,
                                              "temperature": h.temperature, "sinkhorn_iters": n_iter,
                                              "sinkhorn_scaling": h.sinkhorn_scaling,
                                              "adversarial": h.adversarial,
                                              "partitions": None if adv is None else len(adv["phis"])})
    report.noise = ctx.noise.describe()
    save_generator(ctx.generator_path, G, arch, meta)
    write_public_log(rows, ctx.public_log_path)
    report.write(ctx.privacy_path)
    checked_save(done=True)
    return {"experiment": ctx.name, "steps": step, "sigma": sigma, "steps_per_s_this_run": round(rate, 2),
            "epsilon": report.epsilon, "finished": True, "fast_step": fast is not None, "cuda_graph": graph,
            **({TOGETHER_KEY: together} if together else {})}


def _poisson_batch(x_all: torch.Tensor, y_all: torch.Tensor, q: float, gen: torch.Generator
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Each record independently with probability q, padded with zero-weight points to a bucket."""
    mask = torch.rand(x_all.shape[0], generator=gen, device=x_all.device) < q
    idx = mask.nonzero().squeeze(1)
    k = int(idx.numel())
    size = max(BUCKET, -(-k // BUCKET) * BUCKET)
    xs = torch.zeros((size, *x_all.shape[1:]), dtype=x_all.dtype, device=x_all.device)
    ys = torch.zeros(size, dtype=y_all.dtype, device=y_all.device)
    w = torch.zeros(size, dtype=x_all.dtype, device=x_all.device)
    if k:
        xs[:k], ys[:k], w[:k] = x_all[idx], y_all[idx], 1.0 / k
    return xs, ys, w, k


def _step(G, opt, x_all, y_all, n, n_extra, q, num_classes, h, cost, n_iter, gens, san_img, san_par, adv=None
          ) -> tuple[float, int]:
    if adv is None:
        xs, ys, w, k = _poisson_batch(x_all, y_all, q, gens["data"])
    else:  # one of the k fixed partitions, drawn uniformly: a fixed-size batch, no padding
        j = int(torch.randint(len(adv["phis"]), (1,), generator=gens["data"], device=x_all.device))
        idx = adv["parts"][j]
        xs, ys, w, k = x_all[idx], y_all[idx], None, int(idx.numel())
        phi = adv["phis"][j]
        phi.train()
        cost = FeatureAugmentedCost(cost, phi, h.alpha_a, adv["image_shape"])
    z = G.sample_latent(n + n_extra, gens["model"])
    labels = G.sample_labels(n + n_extra, gens["model"])
    imgs = G(z, labels)
    if san_img is not None:
        imgs = san_img.attach(imgs)
    xg = embed(imgs, labels, num_classes, h.alpha_c)
    x, x_second = xg[:n], xg[n_extra:n + n_extra]
    kw = dict(eps=h.temperature, cost=cost, n_iter=n_iter, scaling=h.sinkhorn_scaling, validate=False)
    loss = -entropic_ot(x, x_second, **kw)
    yr = None
    if k:  # an empty Poisson batch contributes no real term (but the step still counts)
        yr = embed(xs, ys if labels is not None else None, num_classes, h.alpha_c)
        loss = loss + 2.0 * entropic_ot(x, yr, None, w, **kw)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if san_par is not None:
        san_par.sanitize_()
    opt.step()
    if adv is not None:  # the partition's feature extractor ascends the full Sinkhorn loss
        if j not in adv["opts"]:
            adv["opts"][j] = torch.optim.Adam(phi.parameters(), lr=adv["lr"])
        xd = xg.detach()
        s_adv = (2.0 * entropic_ot(xd[:n], yr, **kw) - entropic_ot(xd[:n], xd[n_extra:n + n_extra], **kw)
                 - entropic_ot(yr, yr, **kw))
        adv["opts"][j].zero_grad(set_to_none=True)
        (-s_adv).backward()
        adv["opts"][j].step()
    return float(loss.detach()), k
