"""Entropic W_p GAN trained on locally privatized records (seed 003, DESIGN §5.3).

The records were noised ONCE, before training, by the ``privatize`` stage (Laplace or
Gaussian mechanism), so training is post-processing: no accountant, and the generator's
privacy report is a copy of the privatization's.

Why the entropic loss is NOT debiased: with cost ``||x - y||_p^p`` and temperature
``lambda = p s^p`` matched to the noise density ``exp(-||n||_p^p / (p s^p))``, the entropic
OT between the generator and the NOISY data is minimised by the CLEAN distribution
(Theorem 1): the blur of the entropic plan is exactly the blur the mechanism added. The
debiased Sinkhorn divergence subtracts that blur back out and (like unregularised W_p)
learns the noisy distribution. Both are offered as the paper's comparisons:

- ``entropic``: Algorithm 1 -- the plan of ``W_{p, lambda}`` between the generated and the
  privatized minibatch from a FIXED number of Sinkhorn iterations, treated as a constant;
  the generator descends ``<plan, C(G(z), y)>``.
- ``exact``: unregularised ``W_p^p`` on the minibatch (POT's ``ot.emd`` plan, constant).
- ``sinkhorn_divergence``: the debiased ``S_lambda`` (same cost and temperature), envelope
  gradient, without the data-data term (it has no generator gradient).

Record space (shared with the privatize stage and the W2 evaluation): images are uint8
``(N, C, H, W)`` mapped to ``[-1, 1]`` and flattened to ``C*H*W`` floats -- the scale of the
paper (§4.3: "each pixel lies in [-1, 1]", max l2 norm 28 on MNIST, so its l2 radius 20 and
l1 radius 140 are meaningful clips); 2-D points are used as they are. Image generators end
in tanh (the same range); with the DCT option the records are DCT coefficients and the
generator's output goes through the same orthonormal DCT before the loss.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from dpsynth.config import EntropicWGANHparams, Experiment, LocalMechanism
from dpsynth.data.dataset import images_to_signed
from dpsynth.errors import ConfigError, DataError, DpsynthError
from dpsynth.methods.artifacts import load_generator
from dpsynth.methods.checkpoint import rng_state, set_rng_state
from dpsynth.methods.context import TrainContext
from dpsynth.methods.loop import Release, run_training
from dpsynth.methods.optim import make_optimizer
from dpsynth.nets import build_seeded_generator
from dpsynth.nets.base import Generator
from dpsynth.ot import entropic_ot, lp_power_cost, sinkhorn_potentials, transport_plan
from dpsynth.ot.costs import GroundCost

__all__ = [
    "LOSSES",
    "DEFAULT_SINKHORN_ITERS",
    "LossSpec",
    "EWGANTrainer",
    "to_records",
    "local_noise",
    "loss_spec_for",
    "generator_arch",
    "TorchDCT",
    "ewgan_loss",
    "geomloss_schedule",
    "fit",
    "train",
]

LOSSES = ("entropic", "exact", "sinkhorn_divergence")
DEFAULT_SINKHORN_ITERS = 400  # seed 003 §4.3-4.4: L = 400 Sinkhorn-Knopp iterations
MATCHED_P = {"laplace": 1, "gaussian": 2}  # f_N ~ exp(-||x||_p^p / (p s^p))


# --------------------------------------------------------------------------- record space


def to_records(x: np.ndarray) -> np.ndarray:
    """Data -> float64 records ``(N, D)``: uint8 images to [-1, 1] flattened; points as they are."""
    x = np.asarray(x)
    if x.ndim == 4:
        if x.dtype != np.uint8:
            raise DataError(f"image records must be uint8 (N, C, H, W), got {x.dtype}")
        return images_to_signed(x.reshape(x.shape[0], -1))
    if x.ndim == 2:
        if not np.issubdtype(x.dtype, np.floating) or not np.isfinite(x).all():
            raise DataError("point records must be finite floats (N, D)")
        return x.astype(np.float64)
    raise DataError(f"records have shape {x.shape}; expected images (N, C, H, W) or points (N, D)")


# --------------------------------------------------------------------------- matched loss


def local_noise(local: LocalMechanism) -> dict[str, Any]:
    """The mechanism's noise scale and both epsilon conventions, from the privacy library itself.

    Calls the very mechanism the privatize stage uses (on one dummy record) so the trainer's
    temperature can never drift from the noise actually added.
    """
    from dpsynth.privacy.local import gaussian_mechanism, laplace_mechanism

    dummy = np.zeros((1, 1))
    if local.mechanism == "laplace":
        _, rep = laplace_mechanism(dummy, local.radius, local.epsilon, 0)
    else:
        if local.delta is None:
            raise ConfigError("local.delta: the Gaussian mechanism needs delta in (0, 0.5)")
        _, rep = gaussian_mechanism(dummy, local.radius, local.epsilon, local.delta, 0)
    return {
        "mechanism": local.mechanism,
        "noise_scale": rep.noise_scale,
        "epsilon": rep.epsilon,
        "epsilon_paper_convention": rep.epsilon_paper_convention,
        "delta": rep.delta,
        "radius": rep.radius,
        "sensitivity": rep.sensitivity,
        "sensitivity_paper_convention": rep.radius,
    }


@dataclass(frozen=True)
class LossSpec:
    """Everything that defines the training objective (stored in checkpoints to refuse a mixed resume)."""

    loss: str
    p: int
    temperature: float  # lambda = p s^p, in the cost's units
    n_iter: int
    scaling: float | None
    dct_shape: tuple[int, ...] | None = None
    geomloss_scaling: float | None = None  # set: ``scaling``/``n_iter`` come from geomloss's schedule per solve

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise ConfigError(f"hparams.loss: unknown loss {self.loss!r}; choose one of {list(LOSSES)}")
        if self.p not in (1, 2):
            raise ConfigError(f"cost p must be 1 or 2, got {self.p!r}")
        if not (math.isfinite(self.temperature) and self.temperature > 0):
            raise ConfigError(f"temperature must be a finite number > 0, got {self.temperature!r}")

    @property
    def cost(self) -> GroundCost:
        return lp_power_cost(self.p)


def loss_spec_for(exp: Experiment, record_shape: tuple[int, ...]) -> LossSpec:
    """The objective an experiment trains with; a mechanism/cost mismatch is an error unless allowed."""
    if exp.local is None:
        raise ConfigError("entropic_wgan trains on locally privatized records: the experiment needs a "
                          "local: section (its temperature is matched to that noise)")
    h: EntropicWGANHparams = exp.hparams  # type: ignore[assignment]
    matched = MATCHED_P[exp.local.mechanism]
    p = matched if h.cost_p is None else int(h.cost_p)
    if p != matched and not h.allow_mismatch:
        raise ConfigError(
            f"hparams.cost_p={p} does not match the {exp.local.mechanism} mechanism (its noise density is "
            f"exp(-|x|^{matched}), so p={matched}); set hparams.allow_mismatch: true for this ablation")
    s = local_noise(exp.local)["noise_scale"]
    dct_shape = tuple(record_shape) if exp.local.dct else None
    if dct_shape is not None and len(dct_shape) < 2:
        raise ConfigError("local.dct needs image records (C, H, W), not points")
    n_iter = DEFAULT_SINKHORN_ITERS if h.sinkhorn_iters is None else int(h.sinkhorn_iters)
    return LossSpec(loss=h.loss, p=p, temperature=p * s**p, n_iter=n_iter,
                    scaling=None if h.geomloss_scaling is not None else h.sinkhorn_scaling, dct_shape=dct_shape,
                    geomloss_scaling=h.geomloss_scaling)


# --------------------------------------------------------------------------- DCT (differentiable)


class TorchDCT:
    """Orthonormal DCT-II over every axis of a record's image shape, as ``scipy.fft.dctn(norm="ortho")``
    in ``privacy.local.dct_records`` (without the quantile zeroing, which only the data gets)."""

    def __init__(self, image_shape: tuple[int, ...], device: torch.device | str = "cpu",
                 dtype: torch.dtype = torch.float32) -> None:
        self.image_shape = tuple(int(s) for s in image_shape)
        self.mats = [self.matrix(n).to(device=device, dtype=dtype) for n in self.image_shape]

    @staticmethod
    def matrix(n: int) -> Tensor:
        k = torch.arange(n, dtype=torch.float64)[:, None]
        i = torch.arange(n, dtype=torch.float64)[None, :]
        m = torch.cos(math.pi * k * (2 * i + 1) / (2 * n)) * math.sqrt(2.0 / n)
        m[0] /= math.sqrt(2.0)
        return m

    def __call__(self, flat: Tensor) -> Tensor:
        x = flat.reshape(flat.shape[0], *self.image_shape)
        for axis, m in enumerate(self.mats, start=1):
            x = torch.movedim(torch.movedim(x, axis, -1) @ m.T, -1, axis)
        return x.reshape(flat.shape[0], -1)


# --------------------------------------------------------------------------- the three losses


DENSE_MAX_ENTRIES = 1 << 24  # above this many cost entries (64 MiB in float32) the cost is never stored
EXACT_MAX_ENTRIES = 25_000_000  # network simplex on 5,000 x 5,000 already takes minutes


def geomloss_schedule(x: Tensor, y: Tensor, spec: LossSpec) -> tuple[int, float]:
    """``(n_iter, ratio)`` reproducing geomloss's eps-scaling for our solver: geomloss starts at the
    bounding box's diameter (here the largest cost inside the box of both clouds, exact for
    ``||.||_p^p``), lowers the blur by ``geomloss_scaling`` per iteration (the temperature by its
    p-th power) and stops at lambda, one update per temperature. One host sync per solve."""
    assert spec.geomloss_scaling is not None
    with torch.no_grad():
        lo = torch.minimum(x.detach().amin(0), y.amin(0))
        hi = torch.maximum(x.detach().amax(0), y.amax(0))
        cmax = float(spec.cost(lo[None], hi[None]).reshape(()))
    ratio = spec.geomloss_scaling ** spec.p
    if cmax <= spec.temperature:
        return 1, ratio
    return int(math.ceil(math.log(cmax / spec.temperature) / math.log(1.0 / ratio))) + 1, ratio


def ewgan_loss(x: Tensor, y: Tensor, spec: LossSpec) -> Tensor:
    """Scalar loss between generated ``x`` (B, D) (differentiable) and privatized ``y`` (M, D).

    ``entropic`` and ``exact`` return ``<plan, C>`` with the plan computed without autograd
    (so the gradient is ``sum_ij plan_ij grad C_ij``, Algorithm 1); ``sinkhorn_divergence``
    is the debiased S_lambda with the envelope-theorem gradient of ``dpsynth.ot``. Above
    ``DENSE_MAX_ENTRIES`` cost entries (seed 003's full batches of 400,000 points) the entropic
    losses run the blockwise solver of ``dpsynth.ot.online``: the same values and gradients,
    memory O(block x M) instead of O(B x M).
    """
    cost = spec.cost
    n_iter, scaling = spec.n_iter, spec.scaling
    if spec.geomloss_scaling is not None and spec.loss != "exact":
        n_iter, scaling = geomloss_schedule(x, y, spec)
    big = x.shape[0] * y.shape[0] > DENSE_MAX_ENTRIES
    if spec.loss == "exact" and x.shape[0] * y.shape[0] > EXACT_MAX_ENTRIES:
        raise ConfigError(f"hparams.batch_size: the exact loss solves a network simplex on a {x.shape[0]} x "
                          f"{y.shape[0]} cost matrix, beyond {EXACT_MAX_ENTRIES:,} entries (hours per step); use "
                          "a batch of at most 5000 or an entropic loss")
    if big and spec.loss != "exact":
        from dpsynth.ot.online import online_entropic_loss, online_sinkhorn_divergence

        fn = online_entropic_loss if spec.loss == "entropic" else online_sinkhorn_divergence
        return fn(x, y, spec.temperature, cost=cost, n_iter=n_iter, scaling=scaling,
                  block=max(1, DENSE_MAX_ENTRIES // max(x.shape[0], y.shape[0])))
    if spec.loss == "sinkhorn_divergence":
        # S = W(x, y) - W(x, x)/2 - W(y, y)/2; the data-data term has no generator gradient, so it
        # is dropped (saves a third of the solves; the gradient is that of S).
        kw: dict[str, Any] = {"eps": spec.temperature, "cost": cost, "n_iter": n_iter,
                              "scaling": scaling, "validate": False}
        return entropic_ot(x, y, **kw) - 0.5 * entropic_ot(x, x, **kw)
    c = cost(x, y)
    a = torch.full((x.shape[0],), 1.0 / x.shape[0], dtype=c.dtype, device=c.device)
    b = torch.full((y.shape[0],), 1.0 / y.shape[0], dtype=c.dtype, device=c.device)
    if spec.loss == "entropic":
        f, g = sinkhorn_potentials(c, a, b, spec.temperature, n_iter=n_iter, scaling=scaling)
        plan = transport_plan(c.detach(), a, b, f, g, spec.temperature)
    else:
        import ot  # POT: exact network-simplex solver

        c64 = c.detach().to("cpu", torch.float64).numpy()
        w = np.full(x.shape[0], 1.0 / x.shape[0]), np.full(y.shape[0], 1.0 / y.shape[0])
        plan_np = ot.emd(w[0], w[1], c64, numItermax=max(100_000, 50 * c64.size))
        plan = torch.from_numpy(plan_np).to(device=c.device, dtype=c.dtype)
    return (plan.detach() * c).sum()


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


class EWGANTrainer:
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

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.gen.state_dict(), "optimizer": self.opt.state_dict(),
                "rng": rng_state(self.rng_generators)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.gen.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])
        set_rng_state(state["rng"], self.rng_generators)


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
        mechanism=f"local_{local.mechanism}", sigma=noise["noise_scale"], delta=noise["delta"],
        epsilon={"sound": noise["epsilon"], "paper_convention": noise["epsilon_paper_convention"]},
        headline="sound", dataset_size=n_records,
        noise=ctx.noise.describe(),
        extra={"local": {**noise, "dct": local.dct, "dct_quantile": local.dct_quantile if local.dct else None},
               "note": "epsilon-LDP of each record from the privatize stage; training is post-processing "
                       "of the privatized records, so no accountant is involved (seed 003, Remark 1)"},
    )


class EWGANStepper:
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

    def state_dict(self) -> dict[str, Any]:
        return {**self.trainer.state_dict(), "spec": asdict(self.spec), "arch": self.arch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.trainer.load_state_dict(state)
        self.steps_done = int(state["step"])

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
    # No accountant: the records were privatized once, before training (seed 003, Remark 1).
    return run_training(ctx, stepper, total_steps=total, guard=None, sigma=None, epsilon_spent=stepper.epsilon,
                        extra={"method": ctx.experiment.method})


def _record_shape(ctx: TrainContext) -> tuple[int, ...]:
    """Shape of one clean record (images (C, H, W), points (D,)) from the dataset registry."""
    from dpsynth.data.registry import get_spec

    return tuple(get_spec(ctx.experiment.dataset).shape)


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
