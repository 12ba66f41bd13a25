"""The entropic WGAN's record space and its three losses (entropic plan, exact W_p, Sinkhorn
divergence), matched to the local mechanism's noise; see the package docstring for why the entropic
loss is not debiased."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import Tensor

from dpsynth.config import EntropicWGANHparams, Experiment, LocalMechanism
from dpsynth.data.dataset import images_to_signed
from dpsynth.errors import ConfigError, DataError
from dpsynth.ot import lp_power_cost, ot_value_from_potentials, sinkhorn_potentials, transport_plan, uniform_weights
from dpsynth.ot.costs import GroundCost
from dpsynth.privacy import mechanisms

LOSSES = ("entropic", "exact", "sinkhorn_divergence")
DEFAULT_SINKHORN_ITERS = 400  # Reshetova et al. §4.3-4.4: L = 400 Sinkhorn-Knopp iterations


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
    mechanism = mechanisms.local(local.mechanism)
    if mechanism.needs_delta and local.delta is None:
        raise ConfigError(f"local.delta: {mechanism.config_problem(None, False)}")
    _, rep = mechanism.privatize(np.zeros((1, 1)), radius=local.radius, epsilon=local.epsilon, delta=local.delta, rng=0)
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
    matched = mechanisms.local(exp.local.mechanism).matched_p  # f_N ~ exp(-||x||_p^p / (p s^p))
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


def ewgan_loss(x: Tensor, y: Tensor, spec: LossSpec, temperature: Tensor | None = None) -> Tensor:
    """Scalar loss between generated ``x`` (B, D) (differentiable) and privatized ``y`` (M, D).

    ``entropic`` and ``exact`` return ``<plan, C>`` with the plan computed without autograd
    (so the gradient is ``sum_ij plan_ij grad C_ij``, Algorithm 1); ``sinkhorn_divergence``
    is the debiased S_lambda with the envelope-theorem gradient of ``dpsynth.ot``. Above
    ``DENSE_MAX_ENTRIES`` cost entries (Reshetova et al.'s full batches of 400,000 points) the entropic
    losses run the blockwise solver of ``dpsynth.ot.online``: the same values and gradients,
    memory O(block x M) instead of O(B x M).

    A pack of K problems (``packed.PackedEWGAN``: x (K, B, D), y (K, M, D), ``temperature`` (K,), one per
    member) returns the SUM of the K losses: the members' parameters are disjoint, so each gets exactly its
    own gradient. :func:`ewgan_losses` gives them one by one (the same code).
    """
    losses = ewgan_losses(x, y, spec, temperature)
    return losses if losses.ndim == 0 else losses.sum()


def ewgan_losses(x: Tensor, y: Tensor, spec: LossSpec, temperature: Tensor | None = None, *,
                 whole_pack: bool | None = None) -> Tensor:
    """:func:`ewgan_loss` per problem: shape ``x.shape[:-2]`` (a 0-d tensor for one problem). ``temperature``
    (a tensor of that shape) replaces ``spec.temperature`` problem by problem (a pack's members each have their
    own noise level); only the dense solver takes a pack (no blockwise solve, no geomloss schedule).
    ``whole_pack``: solve the (K, B, M) pack at once without the cached kernel -- the path off the CPU (None: the
    device's own path); True on a CPU runs that path there (its tests)."""
    cost = spec.cost
    n_iter, scaling = spec.n_iter, spec.scaling
    packed = x.ndim > 2
    if packed and (temperature is None or tuple(temperature.shape) != tuple(x.shape[:-2])):
        raise ConfigError(f"a pack of problems {tuple(x.shape[:-2])} needs one temperature per problem")
    if packed and spec.geomloss_scaling is not None:
        raise ConfigError("hparams.geomloss_scaling: the packed trainer runs a fixed number of Sinkhorn iterations")
    on_cpu = x.device.type == "cpu" and not whole_pack
    if packed and on_cpu and spec.loss != "exact":
        # On the CPU each member solves alone, through the per-run code: the cached kernel (CachedKernelSoftmin)
        # is refreshed when ITS potentials drift, where one drift check for the whole pack refreshes every
        # member's kernel whenever any one drifts (measured: 16 members ran 2.6x slower per member than one).
        temps = temperature.tolist()  # type: ignore[union-attr]
        return torch.stack([ewgan_losses(x[k], y[k], replace(spec, temperature=float(t))) for k, t in enumerate(temps)])
    if spec.geomloss_scaling is not None and spec.loss != "exact":
        n_iter, scaling = geomloss_schedule(x, y, spec)
    big = x.shape[-2] * y.shape[-2] > DENSE_MAX_ENTRIES
    if spec.loss == "exact" and x.shape[-2] * y.shape[-2] > EXACT_MAX_ENTRIES:
        raise ConfigError(f"hparams.batch_size: the exact loss solves a network simplex on a {x.shape[-2]} x "
                          f"{y.shape[-2]} cost matrix, beyond {EXACT_MAX_ENTRIES:,} entries (hours per step); use "
                          "a batch of at most 5000 or an entropic loss")
    if big and spec.loss != "exact":
        if packed:
            raise ConfigError(f"the packed trainer solves dense {x.shape[-2]} x {y.shape[-2]} problems only "
                              f"(at most {DENSE_MAX_ENTRIES:,} entries); train this run alone")
        from dpsynth.ot.online import online_entropic_loss, online_sinkhorn_divergence

        fn = online_entropic_loss if spec.loss == "entropic" else online_sinkhorn_divergence
        return fn(x, y, spec.temperature, cost=cost, n_iter=n_iter, scaling=scaling,
                  block=max(1, DENSE_MAX_ENTRIES // max(x.shape[0], y.shape[0])))
    # A pack's temperatures: (K,) for the solver's schedule, (K, 1, 1) against a (K, B, M) cost.
    eps: float | Tensor = spec.temperature if temperature is None else temperature.to(x.dtype)
    eps_mat: float | Tensor = eps if temperature is None else eps[..., None, None]  # type: ignore[index]
    # On the CPU the solves reuse their kernel between iterations (``CachedKernelSoftmin``: the same
    # iterations, ~3.4x faster at 200 x 200; its host reads would stall a GPU stream).
    cache = on_cpu
    # Off the CPU the fixed-length solve runs fused (``ot.sinkhorn.fused_solve``: each iteration compiled once for
    # the step's fixed shapes): L = 200 iterations are otherwise ~6,000 kernel launches a step whatever K.
    fused = x.device.type != "cpu"
    if spec.loss == "sinkhorn_divergence":
        # S = W(x, y) - W(x, x)/2 - W(y, y)/2; the data-data term has no generator gradient, so it
        # is dropped (saves a third of the solves; the gradient is that of S).
        return (_entropic_value(x, y, eps, cost, n_iter, scaling, cache, fused)
                - 0.5 * _entropic_value(x, x, eps, cost, n_iter, scaling, cache, fused))
    c = cost(x, y)
    lead = tuple(c.shape[:-2])
    a = torch.full((*lead, x.shape[-2]), 1.0 / x.shape[-2], dtype=c.dtype, device=c.device)
    b = torch.full((*lead, y.shape[-2]), 1.0 / y.shape[-2], dtype=c.dtype, device=c.device)
    if spec.loss == "entropic":
        f, g = sinkhorn_potentials(c, a, b, eps, n_iter=n_iter, scaling=scaling, cache_kernel=cache, fused=fused)
        plan = transport_plan(c.detach(), a, b, f, g, eps_mat)  # type: ignore[arg-type]
    else:
        plan = _exact_plans(c.detach()).to(device=c.device, dtype=c.dtype)
    prod = plan.detach() * c
    return prod.sum() if prod.ndim == 2 else prod.sum((-2, -1))


def _entropic_value(x: Tensor, y: Tensor, eps: float | Tensor, cost: GroundCost, n_iter: int,
                    scaling: float | None, cache: bool, fused: bool = False) -> Tensor:
    """``OT_lambda`` between uniform clouds with its envelope gradient: ``dpsynth.ot.entropic_ot`` without its
    checks (which take one float temperature), so a pack's (K,) temperatures go through the same solve."""
    c = cost(x, y)
    a = uniform_weights(x.shape[-2], x, tuple(x.shape[:-2]))
    b = uniform_weights(y.shape[-2], y, tuple(y.shape[:-2]))
    _, g = sinkhorn_potentials(c, a, b, eps, n_iter=n_iter, scaling=scaling, cache_kernel=cache, fused=fused)
    return ot_value_from_potentials(c, a, b, g, eps if not isinstance(eps, Tensor) else eps[..., None])


def _emd_plan(c64: np.ndarray) -> np.ndarray:
    import ot  # POT: exact network-simplex solver

    w = np.full(c64.shape[0], 1.0 / c64.shape[0]), np.full(c64.shape[1], 1.0 / c64.shape[1])
    return ot.emd(w[0], w[1], c64, numItermax=max(100_000, 50 * c64.size))


def _exact_plans(c: Tensor) -> Tensor:
    """The unregularised W_p plan(s) of a (B, M) or (K, B, M) cost: POT's network simplex (``ot.emd``) in
    float64 on the host. A pack's K problems are spread over the host's cores in threads (POT's
    solver releases the GIL), so the exact loss of a pack costs about K / cores solves, not K."""
    c64 = c.to("cpu", torch.float64).numpy()
    if c64.ndim == 2:
        return torch.from_numpy(_emd_plan(c64))
    flat = c64.reshape(-1, *c64.shape[-2:])
    pool = _emd_pool()
    plans = list(pool.map(_emd_plan, flat)) if pool is not None and len(flat) > 1 else [_emd_plan(m) for m in flat]
    return torch.from_numpy(np.stack(plans).reshape(c64.shape))


_POOL: Any = None


def _emd_pool() -> Any:
    """One thread per core this process may use (None with one core); made once, kept for the process."""
    global _POOL
    import os

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if cores <= 1:
        return None
    if _POOL is None:
        from concurrent.futures import ThreadPoolExecutor

        _POOL = ThreadPoolExecutor(max_workers=cores, thread_name_prefix="emd")
    return _POOL
