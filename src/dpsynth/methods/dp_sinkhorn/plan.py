"""What a DP-Sinkhorn run is, before any step: its data checks, generator, optimizer, privacy
schedule (sigma and steps), the adversarial variant's partitions and the final privacy report.

Everything here reads the experiment and the data's shape only; nothing touches a gradient.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from dpsynth.data.dataset import images_to_signed, validate_arrays
from dpsynth.errors import DataError, DpsynthError
from dpsynth.methods.context import TrainContext
from dpsynth.methods.loop import LOOP_LOG_FIELDS
from dpsynth.methods.optim import make_optimizer
from dpsynth.privacy import mechanisms
from dpsynth.privacy.report import PrivacyReport, dp_sgd_report

#: DP-Sinkhorn's default Sinkhorn iterations per solve (annealed from the largest cost down
#: to eps with factor ``sinkhorn_scaling``; ~16 annealing iterations, the rest at eps).
DEFAULT_ITERS = 30
LOG_EVERY = 25
#: ``hparams.model_dim`` of the published DCGAN generator (channels 256, 128, 64 = 4d, 2d, d).
DCGAN_WIDTH = 64
#: The private diagnostics columns (the stepper's, then the loop's epsilon and steps/s).
#: The step's private diagnostics; the log's columns are these, then the loop's (epsilon, steps/s).
STEP_LOG_FIELDS = ("loss", "real_batch", "clean_norm", "noise_norm")
LOG_FIELDS = [*STEP_LOG_FIELDS, *LOOP_LOG_FIELDS]
#: The grad_theta ablation clips the parameter gradient to C = 1.
PARAM_CLIP = 1.0


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
    if h.adversarial and not d.is_image:
        raise DataError(f"{ctx.name}: the adversarial variant needs image data")
    if h.adversarial and h.m > 0:
        raise DpsynthError(f"{ctx.name}: hparams.m = {h.m}: the adversarial variant (ICLR 2021) appends learned "
                           "features to each point under the squared L2 cost; it has no L1 cost mix (set m: 0)")


def generator_arch(ctx: TrainContext) -> dict[str, Any]:
    """Architecture from the hyperparameters and the data's shape (ICLR submission App. D)."""
    h, d = ctx.experiment.hparams, ctx.data
    if d.x_train.ndim == 2:
        if h.generator != "mlp":
            raise DpsynthError(f"{ctx.name}: point-cloud data needs hparams.generator 'mlp', not {h.generator!r}")
        return {"name": "mlp", "kwargs": {"latent_dim": 2, "output_dim": int(d.x_train.shape[1]),
                                          "hidden": [256, 256], "latent_dist": "uniform_symmetric"}}
    c, size = d.x_train.shape[1], d.x_train.shape[2]
    if h.generator == "dcgan":
        # latent 12 (32 for RGB), embedding 4, ReLU: the papers' App. D.3 (the authors' README runs 16/8 and
        # LeakyReLU: docs/deviations.md); the initialisation, which the papers do not state, is the authors' code's
        kwargs = {"latent_dim": 12 if c == 1 else 32, "num_classes": d.num_classes, "embed_dim": 4,
                  "out_channels": c, "image_size": size, "init": "authors"}
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
    return torch.from_numpy(images_to_signed(x, np.float32)) if x.ndim == 4 else torch.from_numpy(x.astype(np.float32))


def latent_generator(seed: int, device: torch.device | str) -> torch.Generator:
    """The generator of a run's latents and generated labels: seeded (not private; they never touch
    the data), the same for a run and its batched-sweep member."""
    return torch.Generator(device=device).manual_seed(seed * 1000 + 1)


def make_partitions(n_records: int, batch_size: int, k: int | None, seed: int) -> np.ndarray:
    """Adversarial variant: a seeded split into k equal partitions (the paper's batches-as-records,
    k = N // B by default); the N - k * (N // k) leftover records are never used."""
    k = k or n_records // batch_size
    if k < 2:
        raise DataError(f"the adversarial variant needs at least 2 partitions; N={n_records}, "
                        f"batch_size={batch_size} gives {k}")
    size = n_records // k
    return np.random.default_rng(seed).permutation(n_records)[: k * size].reshape(k, size)


def sampling(ctx: TrainContext) -> tuple[float, str, np.ndarray | None]:
    """(q, sampling scheme, partitions): Poisson at q = B / N, or for the adversarial variant one
    of k fixed partitions drawn uniformly (q = 1 / k, without replacement)."""
    h, n_records = ctx.experiment.hparams, ctx.data.x_train.shape[0]
    if h.adversarial:
        parts = make_partitions(n_records, h.batch_size, h.partitions, ctx.seed)
        return 1.0 / parts.shape[0], "without_replacement", parts
    return h.batch_size / n_records, "poisson", None


def privacy_schedule(ctx: TrainContext, q: float, sampling: str) -> tuple[float | None, int]:
    """(sigma, steps) from the plan by the subsampled Gaussian (``privacy.mechanisms``): steps derived
    from sigma, or sigma calibrated to the steps. A sweep cell's share of a scale budget is measured at
    its batch size's rate under Poisson sampling, at the fixed 1 / k of the adversarial partitions."""
    h, n_records = ctx.experiment.hparams, ctx.data.x_train.shape[0]

    def rate(batch_size: int) -> float:
        return q if h.adversarial else batch_size / n_records

    schedule = mechanisms.get("subsampled_gaussian", mechanisms.SubsampledGaussian).schedule(
        ctx.privacy_plan, who=f"experiments.{ctx.name}.privacy", batch_size=h.batch_size, rate=rate,
        sampling=sampling, default_steps=lambda: h.max_steps)
    return schedule.sigma, schedule.steps


def generator_optimizer(params: Any, h: Any, capturable: bool = False, fused: bool = False) -> torch.optim.Optimizer:
    """The generator's optimizer from the hyperparameters (``methods.optim.make_optimizer``)."""
    return make_optimizer(params, h.optimizer, lr=h.lr, betas=h.betas, weight_decay=h.weight_decay,
                          capturable=capturable, fused=fused)


def final_report(ctx: TrainContext, sigma: float | None, steps_done: int, q: float, sampling: str,
                 extra: dict[str, Any]) -> PrivacyReport:
    """The released privacy report of a finished run (what the accountant says of its steps)."""
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
                         delta=plan.delta, sampling=sampling, q=q,
                         clip=h.clip if h.sanitizer == "image" else PARAM_CLIP,
                         target_epsilon=plan.epsilon, extra=extra)
