"""Train several DP-Sinkhorn configurations at once on one device (the batched sweep).

The K members' generators run as one: their parameters are stacked for the forward (each member's
are leaves of its own, under its own optimizer, so an optimizer x lr grid packs too), one stacked
Sinkhorn solve serves all K x 2 OT problems, and on CUDA the whole step of all K is one CUDA graph.
The generator forward is the one run's :func:`fast_forward` (under the run's GPU levers,
``tuning.py``) with two strategies (``forward_mode``): ``"vmap"`` -- ``vmap(functional_call(...))``, the
K members' convolutions grouped into one launch per layer (the point on a GPU, where one member's
small convolutions leave it idle); ``"loop"`` -- each member's own convolutions in turn (on a CPU oneDNN's grouped transposed convolutions are slower than K plain ones:
0.45x measured on 2 cores), so ``"auto"`` picks ``"loop"`` there and ``"vmap"`` on CUDA. Both compute
the same function of the same parameters (tested). What stays per member, so each is its own run:

* its seed: the same initialisation (``nets.build_seeded_generator``) and the same three
  torch.Generators as ``dp_sinkhorn.train`` (latents+labels, Poisson sampling, sanitizer noise),
  each consumed in the trainer's order;
* its cost mix ``m``, clip ``C``, noise multiplier ``sigma``, optimizer and learning rate: its image
  gradient is clipped as one tensor to its ``C`` and noised from ITS noise generator;
* its accountant: a :class:`~dpsynth.privacy.report.BudgetGuard` per private member, charged every
  step and refusing (PrivacyError) before a step past its target.

Shared by construction (one tensor shape): the architecture, the batch size and ``p`` (they fix the
generated batch ``n + floor(p n)``), the temperature, the Sinkhorn iterations, Adam's betas and the
weight decay. A ``p`` grid runs as one batched sweep per ``p`` value (``together.group_by_shape``). The step
is the one step's code run over members (``batch.poisson_batch``, each member's own
``WholeBatchSanitizer``, ``step.embed_points``, ``step.step_loss``); :func:`train_one` trains a member
alone with :class:`~dpsynth.methods.dp_sinkhorn.step.FastStep`, and tests/test_batched_sweep.py holds
every member of a sweep to it.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call, stack_module_state, vmap

from dpsynth.errors import ConfigError, PrivacyError
from dpsynth.methods.dp_sinkhorn.batch import poisson_batch, poisson_capacity, poisson_fixed
from dpsynth.methods.dp_sinkhorn.graph import capture_step
from dpsynth.methods.dp_sinkhorn.plan import latent_generator
from dpsynth.methods.optim import make_optimizer
from dpsynth.methods.dp_sinkhorn.step import FastStep, StepSpec, embed_points, fast_forward, step_loss
from dpsynth.methods.dp_sinkhorn.tuning import StepTuning
from dpsynth.ot.costs import MixedL2L1Cost
from dpsynth.nets import build_seeded_generator
from dpsynth.privacy.report import BudgetGuard
from dpsynth.privacy.sanitizers import WholeBatchSanitizer

__all__ = ["SweepShared", "SweepMember", "BatchedSweep", "member_setup", "train_one"]


@dataclass(frozen=True)
class SweepShared:
    """What every member of one batched sweep has in common (see module docstring)."""

    arch: dict[str, Any]  # {"name": ..., "kwargs": {...}} as dp_sinkhorn.generator_arch returns
    n: int
    n_extra: int
    q: float
    alpha_c: float = 15.0
    eps: float = 0.05
    n_iter: int = 30
    scaling: float | None = 0.5
    lr: float = 1e-5  # a member's own lr (SweepMember.lr) wins
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.0
    delta: float = 1e-5
    target_epsilon: float | None = None  # None: no budget guard (benchmarks)
    dtype: torch.dtype = torch.float32


@dataclass(frozen=True)
class SweepMember:
    """One configuration: its seed, cost mixing weight, clip and noise (sigma None: non-private), and
    its optimizer and learning rate (None: the shared lr) -- each member has an optimizer of its own
    over its own parameter tensors, so an optimizer x lr grid packs into one sweep."""

    seed: int
    m: float = 0.0
    sigma: float | None = 1.1
    clip: float = 0.5
    name: str = field(default="")
    optimizer: str = "adam"
    lr: float | None = None

    def optimizer_for(self, params: Any, shared: SweepShared, capturable: bool = False,
                      fused: bool = False) -> torch.optim.Optimizer:
        """This member's optimizer, exactly as ``dp_sinkhorn.train`` builds a run's (``fused``: the
        ``fused_adam`` lever, Adam members only)."""
        return make_optimizer(params, self.optimizer, lr=self.lr if self.lr is not None else shared.lr,
                              betas=shared.betas, weight_decay=shared.weight_decay, capturable=capturable,
                              fused=fused and self.optimizer == "adam")

    def spec(self, shared: SweepShared, num_classes: int | None) -> StepSpec:
        return StepSpec(n=shared.n, n_extra=shared.n_extra, num_classes=num_classes, alpha_c=shared.alpha_c,
                        eps=shared.eps, n_iter=shared.n_iter, scaling=shared.scaling, m=self.m, clip=self.clip,
                        sigma=self.sigma, q=shared.q)


def _gens(seed: int, device: torch.device) -> dict[str, torch.Generator]:
    """Seeded stand-ins for a run's three generators (benchmarks and the equality tests): its latent
    generator, and seed*1000 + 2, 3 for the batch draw and the noise (a real run's are secret)."""
    return {"model": latent_generator(seed, device),
            **{k: torch.Generator(device=device).manual_seed(seed * 1000 + i) for i, k in ((2, "data"), (3, "noise"))}}


def _guard(shared: SweepShared, mem: SweepMember) -> BudgetGuard | None:
    if mem.sigma is None or shared.target_epsilon is None:
        return None
    return BudgetGuard(mem.sigma, shared.q, shared.delta, shared.target_epsilon, sampling="poisson")


def member_setup(shared: SweepShared, mem: SweepMember, device: torch.device
                 ) -> tuple[nn.Module, torch.optim.Optimizer, dict[str, torch.Generator]]:
    """Generator, optimizer and generators exactly as ``dp_sinkhorn.train`` builds them for ``mem.seed``."""
    G = build_seeded_generator(shared.arch, mem.seed, device).to(dtype=shared.dtype)
    return G, mem.optimizer_for(G.parameters(), shared), _gens(mem.seed, device)


def train_one(shared: SweepShared, mem: SweepMember, x_all: Tensor, y_all: Tensor, steps: int) -> nn.Module:
    """The one-at-a-time reference: ``mem`` alone, ``steps`` FastSteps (eager), its own guard."""
    G, opt, gens = member_setup(shared, mem, x_all.device)
    step = FastStep(G, opt, x_all.to(shared.dtype), y_all, mem.spec(shared, getattr(G, "num_classes", None)), gens,
                    cuda_graph=False)
    guard = _guard(shared, mem)
    for _ in range(steps):
        if guard is not None:
            guard.step()
        step()
    step.check()
    return G


class _FastForward(nn.Module):
    """``fast_forward(G, ..., tuning)`` as a module, so ``functional_call`` can run it on given weights."""

    def __init__(self, G: nn.Module, tuning: StepTuning, vmapped: bool = False) -> None:
        super().__init__()
        self.G, self.tuning, self.vmapped = G, tuning, vmapped

    def forward(self, z: Tensor, labels: Tensor | None) -> Tensor:
        return fast_forward(self.G, z, labels, self.tuning, vmapped=self.vmapped)


FORWARD_MODES = ("auto", "vmap", "loop")


class BatchedSweep:
    """K members trained in lock-step (one forward, solve and backward; each member's optimizer)."""

    def __init__(self, shared: SweepShared, members: Sequence[SweepMember], x_all: Tensor, y_all: Tensor,
                 forward_mode: str = "auto", gens: Sequence[dict[str, torch.Generator]] | None = None,
                 cuda_graph: bool | None = None, tuning: StepTuning | None = None) -> None:
        """``gens``: each member's {"model", "data", "noise"} generators; the pipeline passes the
        run's (secret Poisson sampling and sanitizer noise from ``NoiseSource``); None: seeded
        from the member's seed as ``train_one`` (benchmarks and the equality tests).
        ``cuda_graph`` (default: on CUDA) captures the whole step of all K members -- forward, the
        stacked solve, every sanitizer, backward and Adam -- in one CUDA graph, as FastStep does for
        one run: each member's real batch fills a fixed capacity without host syncs, and its
        latents, labels, Poisson draw and noise are drawn outside the graph into static buffers
        from ITS generators, in the eager step's order. ``tuning``: the GPU speed levers of the one
        run's step (``tuning.py``), applied to every member: the forward of both modes is
        ``fast_forward`` under them (``bf16`` and ``channels_last`` in the loop only, see below), and
        ``fused_adam`` builds each Adam member's optimizer fused; ``self.tuning`` says which ran."""
        if not members:
            raise ConfigError("BatchedSweep needs at least one member")
        if forward_mode not in FORWARD_MODES:
            raise ConfigError(f"BatchedSweep: forward_mode must be one of {', '.join(FORWARD_MODES)}, "
                              f"got {forward_mode!r}")
        self.shared, self.members = shared, list(members)
        self.x_all, self.y_all, self.device = x_all.to(shared.dtype), y_all, x_all.device
        if gens is not None and len(gens) != len(self.members):
            raise ConfigError(f"BatchedSweep: {len(gens)} generator sets for {len(self.members)} members")
        models, self.gens = [], []
        for i, mem in enumerate(self.members):
            G, _, seeded = member_setup(shared, mem, self.device)
            models.append(G)
            self.gens.append(seeded if gens is None else gens[i])
        self.template = models[0]
        self.num_classes = getattr(self.template, "num_classes", None)
        # Each member's parameters are leaves of its own (stacked for the forward, every step, so the
        # stack's backward hands each member its gradient) under its own optimizer; the BatchNorm
        # statistics, updated in place by the forward, stay stacked.
        self.member_params = [{k: v.detach().clone().requires_grad_(True) for k, v in G.named_parameters()}
                              for G in models]
        self.buffers = {k: v.detach().clone() for k, v in stack_module_state(models)[1].items()}
        # (SGD without momentum keeps no state: its update is device ops alone, capturable as it is)
        self.cuda_graph = (self.device.type == "cuda") if cuda_graph is None else cuda_graph
        if self.cuda_graph and self.device.type != "cuda":
            raise ConfigError("BatchedSweep: cuda_graph=True needs CUDA tensors")
        self.forward_mode = forward_mode if forward_mode != "auto" else (
            "vmap" if self.device.type == "cuda" else "loop")
        tuning = tuning or StepTuning()
        if self.forward_mode == "vmap":
            # functorch batches the members' convolutions below autocast (measured on the CPU, torch 2.11: a
            # conv_transpose2d under vmap stays float32 with autocast on, inside or outside the vmap), and
            # cannot query a channels_last layout: under vmap those two levers would be a label, not a change.
            tuning = dataclasses.replace(tuning, bf16=False, channels_last=False)
        self.tuning = tuning  # the levers this sweep really runs with (its cells' summaries record them)
        self.opts = [mem.optimizer_for(list(mp.values()), shared, capturable=self.cuda_graph,
                                       fused=self.tuning.fused_adam)
                     for mem, mp in zip(self.members, self.member_params)]
        # One forward for both modes, the one run's (fast_forward, under the levers): vmap runs it on
        # a weightless copy with each member's stacked weights, the loop on a copy with its own.
        self._meta = _FastForward(copy.deepcopy(self.template).to("meta"), self.tuning, vmapped=True)
        self._loop_module = _FastForward(copy.deepcopy(self.template), self.tuning)
        # Each member's own WholeBatchSanitizer (the audited one), noising from ITS noise generator
        # (under the graph: into its own buffer, drawn before each replay).
        n_priv = shared.n * math.prod(getattr(self.template, "output_shape", ()))
        self.sanitizers: list[WholeBatchSanitizer | None] = [
            None if mem.sigma is None else WholeBatchSanitizer(
                mem.clip, mem.sigma, shared.n, g["noise"], defer_check=True,
                noise_buffer=torch.zeros((1, n_priv), dtype=torch.float64, device=self.device)
                if self.cuda_graph else None)
            for mem, g in zip(self.members, self.gens)]
        self.capacity = poisson_capacity(self.x_all.shape[0], shared.q)
        self.overflow = torch.zeros(len(self.members), dtype=torch.bool, device=self.device)
        self._graph: Any = None
        self.guards = [_guard(shared, mem) for mem in self.members]
        # The solver settings every member shares (n, n', eps, iterations), as a StepSpec.
        self.loss_spec = self.members[0].spec(shared, self.num_classes)
        # Each member's cost mix m weighs its own problem of the one stacked solve.
        self.cost = MixedL2L1Cost(torch.tensor([mem.m for mem in self.members], dtype=shared.dtype,
                                               device=self.device))
        self.steps = 0

    def _forward(self, z: Tensor, labels: Tensor | None) -> Tensor:
        if self.forward_mode == "loop":
            return self._forward_loop(z, labels)

        def one(p: dict[str, Tensor], b: dict[str, Tensor], zz: Tensor, ll: Tensor | None) -> Tensor:
            return functional_call(self._meta, (p, b), (zz, ll))

        params = {f"G.{k}": torch.stack([mp[k] for mp in self.member_params]) for k in self.member_params[0]}
        buffers = {f"G.{k}": v for k, v in self.buffers.items()}
        if labels is None:
            return vmap(lambda p, b, zz: one(p, b, zz, None))(params, buffers, z)
        return vmap(one)(params, buffers, z, labels)

    def _forward_loop(self, z: Tensor, labels: Tensor | None) -> Tensor:
        """Member by member on its own leaves; BN's in-place running-statistics updates write into the
        stacked buffers through ``unbind`` views."""
        buffers = {k: v.unbind(0) for k, v in self.buffers.items()}
        outs = []
        for i in range(len(self.members)):
            state = {**{f"G.{k}": v for k, v in self.member_params[i].items()},
                     **{f"G.{k}": v[i] for k, v in buffers.items()}}
            outs.append(functional_call(self._loop_module, state, (z[i], None if labels is None else labels[i])))
        return torch.stack(outs)

    def _latents(self) -> tuple[Tensor, Tensor | None]:
        """Each member's latents then labels, from ITS model generator (the trainer's order)."""
        total = self.shared.n + self.shared.n_extra
        z = torch.stack([self.template.sample_latent(total, g["model"]) for g in self.gens])
        if self.num_classes is None:
            return z, None
        return z, torch.stack([self.template.sample_labels(total, g["model"]) for g in self.gens])

    def _loss_backward(self, z: Tensor, labels: Tensor | None, xs: Tensor, ys: Tensor, w: Tensor) -> Tensor:
        """Every member's forward, sanitizer, loss and backward on (K, ...) batches; the K losses."""
        sh = self.shared
        with self.tuning.kernels():
            imgs = self._forward(z, labels)  # float32 images, whatever the levers (fast_forward)
        # Member k's slice of the stacked images passes through member k's sanitizer only.
        imgs = torch.stack([im if san is None else san.attach(im)
                            for im, san in zip(imgs.unbind(0), self.sanitizers)])
        nc = self.num_classes
        xg = torch.stack([embed_points(imgs[i], None if labels is None else labels[i], nc, sh.alpha_c)
                          for i in range(len(self.members))])
        yr = torch.stack([embed_points(xs[i], None if nc is None else ys[i], nc, sh.alpha_c)
                          for i in range(len(self.members))])
        losses = step_loss(self.loss_spec, self.cost, xg, yr, w)
        for opt in self.opts:
            opt.zero_grad(set_to_none=False)
        losses.sum().backward()  # members share no parameter: each gets its own gradient
        return losses.detach()

    def _optimizer_step(self) -> None:
        for opt in self.opts:
            opt.step()

    def step(self) -> Tensor:
        """One step of every member; returns the K losses (device tensor, no host sync)."""
        for guard in self.guards:  # every member's accountant, before anything is released
            if guard is not None:
                guard.step()
        losses = self._graphed() if self.cuda_graph else self._eager()
        self.steps += 1
        return losses

    def _eager(self) -> Tensor:
        sh = self.shared
        batches = [poisson_batch(self.x_all, self.y_all, sh.q, g["data"]) for g in self.gens]
        self.last_real: Sequence[Any] = [b[3] for b in batches]  # each member's batch size (its log's real_batch)
        size = max(b[0].shape[0] for b in batches)
        xs = torch.zeros((len(batches), size, *self.x_all.shape[1:]), dtype=sh.dtype, device=self.device)
        ys = torch.zeros((len(batches), size), dtype=self.y_all.dtype, device=self.device)
        w = torch.zeros((len(batches), size), dtype=sh.dtype, device=self.device)
        for i, (bx, by, bw, _) in enumerate(batches):
            xs[i, : bx.shape[0]], ys[i, : by.shape[0]], w[i, : bw.shape[0]] = bx, by, bw
        z, labels = self._latents()
        losses = self._loss_backward(z, labels, xs, ys, w)
        if self.device.type == "cpu":
            self.check()
        self._optimizer_step()
        return losses

    def _fixed_batches(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Each member's Poisson draw into the fixed capacity (no host sync); overflows recorded."""
        drawn = [poisson_fixed(self.x_all, self.y_all, self.shared.q, g["data"], self.capacity) for g in self.gens]
        self.overflow |= torch.stack([d[4] for d in drawn])
        return (torch.stack([d[0] for d in drawn]), torch.stack([d[1] for d in drawn]),
                torch.stack([d[2] for d in drawn]), torch.stack([d[3] for d in drawn]))

    def _capture(self) -> None:
        """Warm up on a side stream (allocator, cuDNN plans, Adam's state), put every weight, BN
        statistic and Adam moment back, then capture one step (FastStep._capture, for K members)."""
        warm = [torch.Generator(self.device).manual_seed(i) for i in range(len(self.members))]
        drawn = [poisson_fixed(self.x_all, self.y_all, self.shared.q, g, self.capacity) for g in warm]
        z, labels = self._latents_like()
        st = self._static = {"xs": torch.stack([d[0] for d in drawn]), "ys": torch.stack([d[1] for d in drawn]),
                             "w": torch.stack([d[2] for d in drawn]), "k": torch.stack([d[3] for d in drawn]),
                             "z": z, "labels": labels}

        def step() -> Tensor:
            losses = self._loss_backward(z, labels, st["xs"], st["ys"], st["w"])
            self._optimizer_step()
            return losses

        def reset() -> None:
            for san in self.sanitizers:
                if san is not None:
                    san.reset_check()

        self._graph, self._losses_out = capture_step(
            step, keep=[*(v for mp in self.member_params for v in mp.values()), *self.buffers.values()],
            optimizers=self.opts, before_capture=reset)

    def _latents_like(self) -> tuple[Tensor, Tensor | None]:
        total, k = self.shared.n + self.shared.n_extra, len(self.members)
        z = torch.zeros((k, total, self.template.latent_dim), dtype=self.shared.dtype, device=self.device)
        labels = None if self.num_classes is None else torch.zeros((k, total), dtype=torch.int64, device=self.device)
        return z, labels

    def _graphed(self) -> Tensor:
        if self._graph is None:
            self._capture()
        st = self._static
        xs, ys, w, k = self._fixed_batches()
        for key, value in (("xs", xs), ("ys", ys), ("w", w), ("k", k)):
            st[key].copy_(value)
        self.last_real = st["k"]  # read at log time only (one sync)
        z, labels = self._latents()
        st["z"].copy_(z)
        if labels is not None:
            st["labels"].copy_(labels)
        for san in self.sanitizers:
            if san is not None:
                san.draw_noise_()
        self._graph.replay()
        return self._losses_out

    def check(self) -> None:
        """Refuse (PrivacyError, naming the member) a release that saw a non-finite gradient or a
        Poisson batch over the fixed capacity (graphed path)."""
        over = self.overflow.tolist() if self.cuda_graph else [False] * len(self.members)
        for mem, san, spilled in zip(self.members, self.sanitizers, over):
            try:
                if san is not None:
                    san.check()
                if spilled:
                    raise PrivacyError(f"a Poisson batch exceeded the fixed capacity {self.capacity}; "
                                       "the step did not use the whole sample")
            except PrivacyError as exc:
                raise PrivacyError(f"sweep member {mem.name or mem.seed}: {exc}") from None

    def generator(self, i: int) -> nn.Module:
        """Member ``i``'s generator as a plain module (trained weights and BN statistics)."""
        G = copy.deepcopy(self.template)
        sd = {**{k: v.detach().clone() for k, v in self.member_params[i].items()},
              **{k: v[i].detach().clone() for k, v in self.buffers.items()}}
        G.load_state_dict(sd)
        return G

    def epsilons(self) -> list[float]:
        """Each member's spent epsilon (math.inf for non-private members)."""
        from dpsynth.privacy import accounting as acc

        out = []
        for mem, guard in zip(self.members, self.guards):
            if mem.sigma is None:
                out.append(math.inf)
            else:
                out.append(acc.epsilon(mem.sigma, self.shared.q, self.steps, self.shared.delta,
                                       sampling="poisson")["rdp_classic"] if self.steps else 0.0)
        return out
