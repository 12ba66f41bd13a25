"""The trivial central-DP baseline of the generative tables: a class-conditional Gaussian released through ONE
Gaussian mechanism (method ``class_gaussian``).

DP-Sinkhorn (Cao et al., "Don't Generate Me: Training Differentially Private Generative Models with Sinkhorn
Divergence", NeurIPS 2021, arXiv:2111.01177) and GS-WGAN (Chen et al., "GS-WGAN: A Gradient-Sanitized Approach
for Learning Differentially Private Generators", NeurIPS 2020, arXiv:2006.08265) report Table 1 at (10, 1e-5) on
MNIST and Fashion-MNIST. Whether a trained generator beats a closed-form model released at the same budget is
what this baseline answers. The records z_i = x_i / sqrt(D) (images in [0, 1], flattened; the unit ball, which
``privacy.sanitizers.ClassMomentsSanitizer`` enforces by clipping, so it bounds the sensitivity whatever the
data) go through that sanitizer ONCE: the noisy global second moment (its top ``rank`` eigenvectors V span the
covariances), the noisy class counts, class sums and projected per-class second moments -- one Gaussian
mechanism of multiplier sigma (each query's std Delta_j sigma / sqrt(w_j), sum_j w_j = 1; the sanitizer's
docstring gives the sensitivities and the composition). Neighbours replace one record (the record count is
public, as for DP-MERF's release).

It runs as every method does: ``train(ctx)`` plans sigma with the registered ``gaussian_release`` mechanism
(q = 1, one step: calibrated to the experiment's (epsilon, delta), as DP-MERF's), and ``loop.run_training`` runs
its ONE step -- the release, its noise from the run's ``NoiseSource`` (secret OS entropy by default), then the
closed-form fit (:func:`fit`, post-processing) loaded into ``nets.ClassGaussianGenerator`` -- and releases the
generator and the privacy report (``privacy.report.gaussian_release_report``). The train stage reserves the
release in the release ledger before that step, its dataset's total budget checked, and confirms it after, as
for every method. The released statistics are in the checkpoint's extra state: a resumed run (a release that
failed to write) never reads the data again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from dpsynth.errors import DataError
from dpsynth.methods.artifacts import release_meta
from dpsynth.methods.checkpoint import Resumable
from dpsynth.methods.context import TrainContext
from dpsynth.methods.dp_merf import release_sigma
from dpsynth.methods.loop import Release, run_training
from dpsynth.nets import build_seeded_generator
from dpsynth.privacy.report import PrivacyReport, gaussian_release_report
from dpsynth.privacy.sanitizers import (
    CLASS_MOMENT_SENSITIVITY,
    CLASS_MOMENT_WEIGHTS,
    ClassMomentsSanitizer,
    class_moment_stds,
)

__all__ = ["ClassGaussian", "NAME", "NOISE_STREAM", "CentralBaselineStepper", "fit", "privacy_report",
           "release_statistics", "train"]

NAME = "class-conditional Gaussian (Gaussian mechanism)"
#: The run's NoiseSource stream of the release's noise.
NOISE_STREAM = 31
#: Records per chunk of the one pass over the private data (only the per-class moments are kept).
RELEASE_CHUNK = 2000


def release_statistics(ctx: TrainContext, sigma: float, generator: torch.Generator
                       ) -> tuple[dict[str, torch.Tensor], ClassMomentsSanitizer]:
    """The ONE read of the private data: every record, scaled into the unit ball, through the sanitizer,
    released once. Everything it returns carries its noise."""
    x, y = ctx.data.x_train, ctx.data.y_train
    d = int(np.prod(x.shape[1:]))
    rank = ctx.experiment.hparams.rank
    san = ClassMomentsSanitizer(sigma, len(x), int(ctx.data.num_classes), d, rank, generator)
    for start in range(0, len(x), RELEASE_CHUNK):
        xb = torch.from_numpy(np.ascontiguousarray(x[start:start + RELEASE_CHUNK])).to(ctx.device)
        yb = torch.from_numpy(y[start:start + RELEASE_CHUNK].astype(np.int64)).to(ctx.device)
        san.add(xb.reshape(len(xb), d).to(torch.float64).div(255.0 * math.sqrt(d)), yb)
    return san.release(), san


@dataclass(frozen=True)
class ClassGaussian:
    """Per class: prior, mean (in z = x / sqrt(D) units) and a covariance factor in the released subspace."""

    priors: torch.Tensor  # (C,)
    means: torch.Tensor  # (C, D)
    basis: torch.Tensor  # (D, r)
    factors: torch.Tensor  # (C, r, r)


def fit(stats: dict[str, torch.Tensor]) -> ClassGaussian:
    """The model from the released statistics alone (post-processing): counts clipped at 1, covariances
    symmetrised with their eigenvalues clipped at 0."""
    counts = stats["counts"].clamp_min(1.0)
    priors = counts / counts.sum()
    means = stats["sums"] / counts[:, None]
    mu = means @ stats["basis"]
    cov = stats["projected"] / counts[:, None, None] - mu[:, :, None] * mu[:, None, :]
    vals, vecs = torch.linalg.eigh((cov + cov.transpose(1, 2)) / 2)
    factors = vecs * vals.clamp_min(0.0).sqrt()[:, None, :]
    return ClassGaussian(priors, means, stats["basis"], factors)


class CentralBaselineStepper(Resumable):
    """The one step: the release and the closed-form fit, as the one training loop's stepper. It runs after
    the loop has looked for a checkpoint and the stage has reserved the release; a resumed run reloads the
    released statistics and the fitted buffers and never reads the data or spends the budget again."""

    log_fields = ()
    log_every = 1

    def __init__(self, ctx: TrainContext, G: Any, sigma: float, arch: dict[str, Any]) -> None:
        self.ctx, self.G, self.sigma, self.arch = ctx, G, sigma, arch
        self.gens = {"noise": ctx.noise.torch_generator(ctx.device, NOISE_STREAM)}
        self.stats: dict[str, torch.Tensor] | None = None
        self.sanitizer: ClassMomentsSanitizer | None = None

    def step(self) -> dict[str, float]:
        if self.stats is None:
            self.stats, self.sanitizer = release_statistics(self.ctx, self.sigma, self.gens["noise"])
        m = fit(self.stats)
        self.G.set_model(m.priors, m.means, m.basis, m.factors)
        return {}

    def check(self) -> None:
        """Nothing deferred (the sanitizer refuses at once)."""

    def log_row(self, stats: dict[str, Any]) -> dict[str, float]:
        return {}

    def progress(self, stats: dict[str, Any]) -> dict[str, float]:
        return {}

    def state_parts(self) -> dict[str, Any]:
        return {"generator": self.G}

    def random_streams(self) -> dict[str, torch.Generator]:
        return self.gens

    def extra_state(self) -> dict[str, Any]:
        return {"statistics": self.stats}  # the one release: a resumed run never reads the data again

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.stats = state["statistics"]

    def release(self, steps: int) -> Release:
        ctx = self.ctx
        return Release(self.G.eval(), self.arch, release_meta(ctx, "sigmoid", baseline=NAME),
                       privacy_report(ctx, self.sigma), public_fields=("step", "epsilon"),
                       summary={"release_sigma": self.sigma, "rank": ctx.experiment.hparams.rank})

    def close(self) -> None:
        pass


def privacy_report(ctx: TrainContext, sigma: float) -> PrivacyReport:
    """One Gaussian mechanism of multiplier sigma over the four queries (replace-one), with the baseline's
    query weights, sensitivities and noise stds beside the accountant's epsilons."""
    n, h, plan = len(ctx.data.x_train), ctx.experiment.hparams, ctx.privacy_plan
    extra = {"experiment": ctx.name, "scale": ctx.scale, "releases": 1, "baseline": NAME, "rank": h.rank,
             "weights": dict(CLASS_MOMENT_WEIGHTS), "sensitivity": dict(CLASS_MOMENT_SENSITIVITY),
             "query_stds": class_moment_stds(sigma),
             "note": "one release of a class-conditional Gaussian's moments (global second moment, class counts, "
                     "class sums, projected per-class second moments) of the records scaled into the unit ball; "
                     "query j noised with std Delta_j sigma / sqrt(w_j), sum_j w_j = 1: one Gaussian mechanism of "
                     "multiplier sigma; neighbouring datasets replace one record (n public); the fit is "
                     "post-processing"}
    if sigma == 0.0:
        return PrivacyReport(mechanism="none (non-private)", sigma=None, delta=0.0, epsilon={"non_private": math.inf},
                             headline="non_private", steps=1, dataset_size=n, extra=extra, noise=ctx.noise.describe())
    assert plan.delta is not None
    return gaussian_release_report(sigma=sigma, dataset_size=n, delta=plan.delta, bound=1.0,
                                   target_epsilon=plan.epsilon, extra=extra).within_target(ctx.name)


def generator_arch(ctx: TrainContext) -> dict[str, Any]:
    return {"name": ctx.experiment.hparams.generator,
            "kwargs": {"num_classes": int(ctx.data.num_classes), "rank": ctx.experiment.hparams.rank,
                       "output_shape": [int(s) for s in ctx.data.x_train.shape[1:]]}}


def train(ctx: TrainContext) -> dict[str, Any]:
    h = ctx.experiment.hparams
    x = ctx.data.x_train
    if x.ndim < 2 or x.dtype != np.uint8 or not len(x):
        raise DataError(f"{ctx.data.name}: the class-conditional Gaussian models uint8 images; got {x.dtype} "
                        f"{tuple(x.shape)}")
    if not ctx.data.num_classes:
        raise DataError(f"{ctx.data.name}: the class-conditional Gaussian needs labels; the dataset has none")
    d = int(np.prod(x.shape[1:]))
    if h.rank > d:
        raise DataError(f"experiments.{ctx.name}.hparams.rank {h.rank} > the records' dimension {d}")
    sigma = release_sigma(ctx)
    arch = generator_arch(ctx)
    G = build_seeded_generator(arch, ctx.seed, ctx.device)
    stepper = CentralBaselineStepper(ctx, G, sigma, arch)
    spent = privacy_report(ctx, sigma).headline_epsilon if sigma > 0 else math.inf
    return run_training(ctx, stepper, total_steps=h.fit_steps(len(x)), guard=None, sigma=sigma or None,
                        epsilon_spent=lambda: spent if stepper.stats is not None else 0.0,
                        extra={"schedule": "one release"})
