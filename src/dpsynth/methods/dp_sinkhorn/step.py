"""THE DP-Sinkhorn step, for K members at once: a run is K = 1, a batched sweep K > 1.

One step, per member: draw the real batch (Poisson at q = B / N, or one fixed partition for the
adversarial variant), generate a FIXED batch of n + n' images (n = B, n' = floor(p n); the n' extra images take the first
n' generated labels, :func:`generated_labels`), embed
(image, alpha_c * onehot), compute the semi-debiased loss ``2 W(X[:n], Y) - W(X[:n], X[n':n+n'])``
and back-propagate through the sanitizer, which clips the gradient w.r.t. the first n images as one
tensor to C and adds N(0, (2 C sigma)^2) noise (the n' images, which never meet real data, are
clipped only). The ``param`` ablation instead clips and noises the whole parameter gradient. An
empty Poisson batch still counts as a step: the real term contributes no gradient, the sanitizer
still releases noise, and the accountant charges it.

Why one class with a member axis: a batched sweep repeated this sequence for K runs. Now each
member is a run's own objects (:class:`Member`: its generator module, its optimizer over that
module's parameters, its spec's m, clip and sigma, its three torch.Generators), and the step runs
them together -- one forward (:mod:`~dpsynth.methods.dp_sinkhorn.forward`), one stacked Sinkhorn
solve, one backward, each member's optimizer -- while each member's image gradient passes through
ITS :class:`~dpsynth.privacy.sanitizers.WholeBatchSanitizer` (the one the audit checks) noising
from ITS noise generator. With K = 1 the step is exactly the one run's: the same draws in the same
order, the loss solved without a member axis (a batched solve of one problem rounds its gradient
differently), so a run's numbers do not depend on whether it was ever packed.

What keeps it fast, and why each choice keeps the math:

* **The loss** is :func:`dpsynth.ot.losses.semi_debiased_loss`: one stacked Sinkhorn solve for
  both OT terms of every member, never reading the host; equal cost mixes ``m`` (a run, or a sweep
  over other settings) use the plain cost, mixed ones weigh each member's problem by its own ``m``.
* **The sanitizer's check is deferred**: a release never syncs with the host, :meth:`check` reads
  the flags (one sync) and refuses with PrivacyError naming the member. On CPU the check runs
  inside every step, before any optimizer moves.
* **On CUDA** (untested on hardware here: no GPU in the development environment) each member's
  real batch has a fixed capacity, filled without host syncs (cumsum + scatter), and the whole step
  of all K members -- forward, loss, every sanitizer, backward, every optimizer -- is captured in
  ONE CUDA graph; latents, labels, the Poisson draws and the noise are drawn outside the graph into
  static buffers from each member's generators, in the eager step's order.

Nothing here knows about accountants, checkpoints or logs: the one loop (``methods/loop.py``)
charges each member's guard before each step and keeps each member's checkpoint and log
(``run.py``, ``together.py``). tests/reference_dp_sinkhorn.py holds this step to an independent,
plain float64 formula; tests/test_batched_sweep.py holds each packed member to its run alone.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from dpsynth.errors import ConfigError, PrivacyError
from dpsynth.methods.dp_sinkhorn.batch import poisson_batch, poisson_capacity, poisson_fixed
from dpsynth.methods.dp_sinkhorn.forward import StackedForward, fast_forward
from dpsynth.methods.dp_sinkhorn.graph import capture_step
from dpsynth.methods.dp_sinkhorn.tuning import StepTuning
from dpsynth.ot.costs import MixedL2L1Cost
from dpsynth.ot.losses import semi_debiased_loss
from dpsynth.ot.sinkhorn import check_solver_args
from dpsynth.privacy.sanitizers import WholeBatchSanitizer

__all__ = ["StepSpec", "StepTuning", "Member", "PackedStep", "FastStep", "FORWARD_MODES",
           "fast_forward", "embed_points", "step_loss", "generated_labels", "draw_generated"]

FORWARD_MODES = ("auto", "vmap", "loop")


@dataclass(frozen=True)
class StepSpec:
    """Everything one DP-Sinkhorn step needs besides tensors (``run.py`` builds it from the plan).
    Packed members share all but ``m``, ``clip`` and ``sigma`` (they fix the tensors' shapes and the solve)."""

    n: int  # generated points that meet real data (= batch_size)
    n_extra: int  # n' = floor(p n)
    num_classes: int | None  # None: unconditional (no label embedding)
    alpha_c: float
    eps: float  # entropic temperature, in the cost's units
    n_iter: int
    scaling: float | None
    m: float  # L1 weight of the ground cost (0: pure squared L2)
    clip: float
    sigma: float | None  # None: non-private (no sanitizer)
    q: float  # Poisson sampling rate

    def __post_init__(self) -> None:
        check_solver_args(self.eps, self.n_iter, self.scaling, None)
        if self.n < 1 or self.n_extra < 0 or self.n_extra > self.n:
            raise ConfigError(f"StepSpec: need n >= 1 and 0 <= n' <= n, got n={self.n}, n'={self.n_extra}")
        if not (0.0 < self.q <= 1.0):
            raise ConfigError(f"StepSpec: sampling rate q must lie in (0, 1], got q={self.q}")
        if not (self.m >= 0 and math.isfinite(self.m)):
            raise ConfigError(f"StepSpec: cost mixing weight m must be finite and >= 0, got m={self.m}")
        if self.sigma is not None and not (self.sigma >= 0 and self.clip > 0):
            raise ConfigError(f"StepSpec: need sigma >= 0 and clip > 0, got sigma={self.sigma}, clip={self.clip}")

    def shared(self) -> StepSpec:
        """What packed members must have in common (their own m, clip and sigma blanked)."""
        return dataclasses.replace(self, m=0.0, clip=1.0, sigma=None)


@dataclass
class Member:
    """One run inside a packed step: its generator (its own parameters and BN statistics), its
    optimizer over them, its spec and its ``gens`` -- ``model`` (latents and labels, seeded),
    ``data`` (the batch draw, secret) and ``noise`` (its sanitizer's noise, secret)."""

    G: nn.Module
    opt: torch.optim.Optimizer
    spec: StepSpec
    gens: dict[str, torch.Generator]
    name: str = ""


def generated_labels(G: nn.Module, n: int, n_extra: int, gen: torch.Generator) -> Tensor | None:
    """The labels of one step's n + n' generated images: n uniform labels (Alg. 1), then the n' extra
    images of the semi-debiased loss take the FIRST n' of them, as the authors' training script does
    (``nv-tlabs/DP-Sinkhorn_code``, ``sinkhorn_poisson.py``: the extra images are generated with the
    first n' generated labels). The self term OT(X[:n], X[n':n+n']) then compares two clouds with the
    same labels, so it moves no mass across classes. None for an unconditional generator. The labels
    are generated, never private: the extra images still meet only generated data."""
    labels = G.sample_labels(n, gen)
    if labels is None or n_extra == 0:
        return labels
    return torch.cat([labels, labels[:n_extra]])


def draw_generated(G: nn.Module, n: int, n_extra: int, gen: torch.Generator) -> tuple[Tensor, Tensor | None]:
    """One step's n + n' latents, then their labels (:func:`generated_labels`), from ``gen``."""
    return G.sample_latent(n + n_extra, gen), generated_labels(G, n, n_extra, gen)


def embed_points(points: Tensor, labels: Tensor | None, num_classes: int | None, alpha_c: float) -> Tensor:
    """Joint (record, alpha_c * onehot(label)) space of (N, ...) records; unconditional: the record alone."""
    flat = points.reshape(points.shape[0], -1)
    if labels is None or num_classes is None:
        return flat
    onehot = (labels.unsqueeze(-1) == torch.arange(num_classes, device=labels.device)).to(flat.dtype)
    return torch.cat([flat, alpha_c * onehot], dim=-1)


def step_loss(spec: StepSpec, cost: MixedL2L1Cost, xg: Tensor, yr: Tensor, w: Tensor, fused: bool = False) -> Tensor:
    """The step's loss on embedded points: ``xg`` (..., n + n', D) generated, ``yr`` (..., M, D)
    real with weights ``w``; a leading axis holds packed members. ``fused``: the compiled solve."""
    return semi_debiased_loss(xg, yr, real_weights=w, n=spec.n, n_extra=spec.n_extra, eps=spec.eps, cost=cost,
                              n_iter=spec.n_iter, scaling=spec.scaling, validate=False, fused=fused)


class PackedStep:
    """One DP-Sinkhorn step of K members (see module docstring). Call it to take a step; it returns
    ``(losses, ks)``: each member's loss and real batch size, as (K,) device tensors (no host sync on
    CUDA). ``forward_mode``: ``"loop"`` (each member's own forward), ``"vmap"`` (one grouped forward,
    :class:`~dpsynth.methods.dp_sinkhorn.forward.StackedForward`) or ``"auto"`` (vmap on CUDA for
    K > 1). ``cuda_graph`` (default: on CUDA) captures the whole step in one graph. ``tuning``: the
    GPU speed levers (``tuning.py``), the same for every member. ``param_sanitizer`` (K = 1, eager):
    the grad_theta ablation's, which clips and noises the parameter gradient instead. ``fused_solve``
    (default: with the CUDA graph): the Sinkhorn solve with each iteration compiled (``ot.sinkhorn.fused_solve``),
    once for the graph's fixed shapes. An eager step keeps the eager solve: its Poisson batch
    changes shape every step (a compiled solve would recompile), and on the CPU the eager floored
    solve measured as fast (docs/performance.md)."""

    def __init__(self, members: Sequence[Member], x_all: Tensor, y_all: Tensor, *, forward_mode: str = "auto",
                 cuda_graph: bool | None = None, capacity: int | None = None, param_sanitizer: Any = None,
                 tuning: StepTuning | None = None, fused_solve: bool | None = None) -> None:
        self.members = list(members)
        who = type(self).__name__
        if not self.members:
            raise ConfigError(f"{who} needs at least one member")
        if forward_mode not in FORWARD_MODES:
            raise ConfigError(f"{who}: forward_mode must be one of {', '.join(FORWARD_MODES)}, got {forward_mode!r}")
        self.spec = self.members[0].spec
        if any(m.spec.shared() != self.spec.shared() for m in self.members):
            raise ConfigError(f"{who}: packed members must share every setting but m, clip and sigma")
        self.x_all, self.y_all, self.device = x_all, y_all, x_all.device
        self.param_sanitizer = param_sanitizer
        if param_sanitizer is not None and (len(self.members) > 1 or self.spec.sigma is not None):
            raise ConfigError(f"{who}: a parameter sanitizer needs one member without the image sanitizer "
                              "(spec.sigma None): they are exclusive")
        self.cuda_graph = (self.device.type == "cuda") if cuda_graph is None else cuda_graph
        self.fused_solve = self.cuda_graph if fused_solve is None else fused_solve
        if self.cuda_graph and self.device.type != "cuda":
            raise ConfigError(f"{who}: cuda_graph=True needs CUDA tensors")
        if self.cuda_graph and param_sanitizer is not None:
            raise ConfigError(f"{who}: the parameter sanitizer runs on the host; use cuda_graph=False")
        k = len(self.members)
        self.forward_mode = forward_mode if forward_mode != "auto" else (
            "vmap" if self.device.type == "cuda" and k > 1 else "loop")
        tuning = tuning or StepTuning()
        if self.forward_mode == "vmap":
            # functorch batches the members' convolutions below autocast (measured on the CPU, torch 2.11: a
            # conv_transpose2d under vmap stays float32 with autocast on) and cannot query a channels_last
            # layout: under vmap those two levers would be a label, not a change -- nor is a compiled forward
            # (fast_forward compiles only outside vmap).
            tuning = dataclasses.replace(tuning, bf16=False, channels_last=False, compiled_generator=False)
        self.tuning = tuning  # the levers this step really runs with (summaries record them)
        self._stacked = StackedForward(self.members[0].G, tuning) if self.forward_mode == "vmap" else None
        self.capacity = capacity or poisson_capacity(x_all.shape[0], self.spec.q)
        self.conditional = getattr(self.members[0].G, "num_classes", None) is not None
        ms = [m.spec.m for m in self.members]  # m = 0: the pure squared L2 cost; equal m: no per-member weights
        self.cost = MixedL2L1Cost(ms[0]) if len(set(ms)) == 1 else MixedL2L1Cost(
            torch.tensor(ms, dtype=x_all.dtype, device=self.device))
        self.overflow = torch.zeros(k, dtype=torch.bool, device=self.device)
        # Each member's own WholeBatchSanitizer, noising from ITS noise generator (under the graph: into
        # its own buffer, drawn before each replay).
        n_priv = self.spec.n * math.prod(getattr(self.members[0].G, "output_shape", ()))
        self.sanitizers: list[WholeBatchSanitizer | None] = [
            None if m.spec.sigma is None else WholeBatchSanitizer(
                m.spec.clip, m.spec.sigma, self.spec.n, m.gens["noise"], defer_check=True,
                noise_buffer=torch.zeros((1, n_priv), dtype=torch.float64, device=self.device)
                if self.cuda_graph else None)
            for m in self.members]
        self.last_real: Any = [0] * k  # each member's last real batch size (a device tensor under the graph)
        self._graph: Any = None

    # -- the sequence, shared by the eager and captured paths (and the variants)
    def _draw(self, i: int) -> tuple[Tensor, Tensor | None]:
        """Member ``i``'s latents then labels, from ITS model generator."""
        G, g = self.members[i].G, self.members[i].gens["model"]
        return draw_generated(G, self.spec.n, self.spec.n_extra, g)

    def _batch(self, i: int) -> tuple[Tensor, Tensor, Tensor, int]:
        """Member ``i``'s real batch of an eager step: a Poisson sample (each record with probability q)."""
        return poisson_batch(self.x_all, self.y_all, self.spec.q, self.members[i].gens["data"])

    def _points(self, i: int, imgs: Tensor, labels: Tensor | None, xs: Tensor, ys: Tensor) -> tuple[Tensor, Tensor]:
        """Member ``i``'s generated and real points in the space the loss compares them in."""
        nc = self.spec.num_classes if self.conditional else None
        return (embed_points(imgs, labels, nc, self.spec.alpha_c),
                embed_points(xs, ys if self.conditional else None, nc, self.spec.alpha_c))

    def _forward(self, z: Sequence[Tensor], labels: Sequence[Tensor | None]) -> list[Tensor]:
        """Every member's float32 images, whatever the levers."""
        if self._stacked is not None:
            return list(self._stacked([m.G for m in self.members], z, labels).unbind(0))
        return [fast_forward(m.G, zi, li, self.tuning) for m, zi, li in zip(self.members, z, labels)]

    def _loss_backward(self, z: Sequence[Tensor], labels: Sequence[Tensor | None], xs: Any, ys: Any,
                       w: Any) -> Tensor:
        """Forward, each member's sanitizer, the stacked loss and one backward; the K losses.
        ``xs``, ``ys``, ``w``: each member's batch, of one size across members when K > 1."""
        with self.tuning.kernels():
            xg, yr = [], []
            for i, (imgs, san) in enumerate(zip(self._forward(z, labels), self.sanitizers)):
                if san is not None:  # member i's images pass through member i's sanitizer only
                    imgs = san.attach(imgs)
                a, b = self._points(i, imgs, labels[i], xs[i], ys[i])
                xg.append(a)
                yr.append(b)
            if len(xg) == 1:  # a run: no member axis (the one run's rounding, bit for bit)
                losses = step_loss(self.spec, self.cost, xg[0], yr[0], w[0], self.fused_solve).unsqueeze(0)
            else:
                losses = step_loss(self.spec, self.cost, torch.stack(xg), torch.stack(yr),
                                   w if isinstance(w, Tensor) else torch.stack(w), self.fused_solve)
            for m in self.members:
                m.opt.zero_grad(set_to_none=False)
            losses.sum().backward()  # members share no parameter: each gets its own gradient
        return losses.detach()

    def _optimizer_step(self) -> None:
        for m in self.members:
            m.opt.step()

    def _after_update(self) -> None:
        """What a variant does once the generators have moved (the adversary's turn)."""

    # -- eager (CPU, or CUDA without graphs)
    def _eager(self) -> tuple[Tensor, Tensor]:
        batches = [self._batch(i) for i in range(len(self.members))]
        self.last_real = [b[3] for b in batches]
        xs, ys, w = _one_size(batches)
        z, labels = zip(*(self._draw(i) for i in range(len(self.members))))
        losses = self._loss_backward(z, labels, xs, ys, w)
        if self.param_sanitizer is not None:
            self.param_sanitizer.sanitize_()  # refuses a non-finite gradient itself (PrivacyError)
        if self.device.type == "cpu":
            self.check()  # free on CPU: refuse before any optimizer moves
        self._optimizer_step()
        self._after_update()
        return losses, torch.tensor(self.last_real)

    # -- CUDA graph
    def _capture(self) -> None:
        """Warm up on a side stream (allocator, cuDNN plans, optimizer state), put every weight, BN
        statistic and moment back, then capture one step of all members (``graph.capture_step``)."""
        k, total = len(self.members), self.spec.n + self.spec.n_extra
        warm = [poisson_fixed(self.x_all, self.y_all, self.spec.q, torch.Generator(self.device).manual_seed(i),
                              self.capacity) for i in range(k)]
        st = self._static = {key: torch.stack([d[j] for d in warm]) for j, key in enumerate(("xs", "ys", "w", "k"))}
        st["z"] = [torch.zeros((total, m.G.latent_dim), dtype=next(m.G.parameters()).dtype, device=self.device)
                   for m in self.members]
        st["labels"] = [torch.zeros(total, dtype=torch.int64, device=self.device) if self.conditional else None
                        for _ in self.members]
        if any(g.get("capturable") is False for m in self.members for g in m.opt.param_groups):
            raise ConfigError(f"{type(self).__name__}(cuda_graph=True) needs optimizers built with capturable=True")

        def step() -> Tensor:
            losses = self._loss_backward(st["z"], st["labels"], st["xs"], st["ys"], st["w"])
            self._optimizer_step()
            return losses

        def reset() -> None:
            for san in self.sanitizers:
                if san is not None:
                    san.reset_check()

        self._graph, self._losses_out = capture_step(
            step, keep=[t for m in self.members for t in (*m.G.parameters(), *m.G.buffers())],
            optimizers=[m.opt for m in self.members], before_capture=reset)

    def _graphed(self) -> tuple[Tensor, Tensor]:
        if self._graph is None:
            self._capture()
        st = self._static
        drawn = [poisson_fixed(self.x_all, self.y_all, self.spec.q, m.gens["data"], self.capacity)
                 for m in self.members]
        for j, key in enumerate(("xs", "ys", "w", "k")):
            st[key].copy_(torch.stack([d[j] for d in drawn]))
        self.overflow |= torch.stack([d[4] for d in drawn])
        self.last_real = st["k"]  # read at log time only (one sync)
        for i in range(len(self.members)):
            z, labels = self._draw(i)
            st["z"][i].copy_(z)
            if labels is not None:
                st["labels"][i].copy_(labels)
        for san in self.sanitizers:
            if san is not None:
                san.draw_noise_()
        self._graph.replay()
        return self._losses_out, st["k"]

    def __call__(self) -> tuple[Tensor, Tensor]:
        return self._graphed() if self.cuda_graph else self._eager()

    def check(self) -> None:
        """Refuse (PrivacyError; naming the member when K > 1) a release that saw a non-finite gradient
        or a Poisson batch over the fixed capacity (graphed path)."""
        over = self.overflow.tolist()
        for m, san, spilled in zip(self.members, self.sanitizers, over):
            try:
                if san is not None:
                    san.check()
                if spilled:
                    raise PrivacyError(f"a Poisson batch exceeded the fixed capacity {self.capacity}; "
                                       "the step did not use the whole sample")
            except PrivacyError as exc:
                if len(self.members) == 1:
                    raise
                raise PrivacyError(f"sweep member {m.name}: {exc}") from None

    def log_row(self, i: int, stats: tuple[Tensor, Tensor]) -> dict[str, float]:
        """Member ``i``'s private diagnostics of the last step (host values: call at log time only)."""
        san = self.param_sanitizer if self.param_sanitizer is not None else self.sanitizers[i]
        last = san.last if san is not None else None
        return {"loss": float(stats[0][i]), "real_batch": int(stats[1][i]),
                "clean_norm": last.clean_norm if last else float("nan"), "noise_norm": last.noise_norm if last else 0.0}


def _one_size(batches: Sequence[tuple[Tensor, Tensor, Tensor, int]]) -> tuple[Any, Any, Any]:
    """The members' eager batches as (xs, ys, w), each indexable by member: one member's as drawn,
    several zero-weight padded to one size (K, size, ...) for the stacked solve."""
    if len(batches) == 1:
        return [batches[0][0]], [batches[0][1]], [batches[0][2]]
    size = max(b[0].shape[0] for b in batches)
    x0, y0 = batches[0][0], batches[0][1]
    xs = x0.new_zeros((len(batches), size, *x0.shape[1:]))
    ys, w = y0.new_zeros((len(batches), size)), x0.new_zeros((len(batches), size))
    for i, (bx, by, bw, _) in enumerate(batches):
        xs[i, : bx.shape[0]], ys[i, : by.shape[0]], w[i, : bw.shape[0]] = bx, by, bw
    return xs, ys, w


class FastStep(PackedStep):
    """One run's step: the packed step of one member (``G``, its optimizer ``opt``, ``spec``, ``gens``),
    returning ``(loss, k)`` as scalars (device tensors). ``gens``' generators are consumed in the same
    order every step, so a resumed run continues exactly."""

    def __init__(self, G: nn.Module, opt: torch.optim.Optimizer, x_all: Tensor, y_all: Tensor, spec: StepSpec,
                 gens: dict[str, torch.Generator], *, cuda_graph: bool | None = None,
                 capacity: int | None = None, param_sanitizer: Any = None, tuning: StepTuning | None = None,
                 fused_solve: bool | None = None) -> None:
        super().__init__([Member(G, opt, spec, gens)], x_all, y_all, forward_mode="loop", cuda_graph=cuda_graph,
                         capacity=capacity, param_sanitizer=param_sanitizer, tuning=tuning, fused_solve=fused_solve)

    G = property(lambda self: self.members[0].G)
    opt = property(lambda self: self.members[0].opt)
    gens = property(lambda self: self.members[0].gens)
    sanitizer = property(lambda self: self.sanitizers[0])

    def __call__(self) -> tuple[Tensor, Tensor]:
        losses, ks = self._graphed() if self.cuda_graph else self._eager()
        return losses[0], ks[0]

