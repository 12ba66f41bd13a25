"""K DP-Sinkhorn configurations as one packed step (the batched sweep), from a sweep's settings.

The step is :class:`~dpsynth.methods.dp_sinkhorn.step.PackedStep` -- THE step, whose K = 1 is a run
(``FastStep``) -- so a sweep member is stepped by exactly the code of a run: its generator's forward
(one grouped ``vmap`` forward on CUDA, each member's own forward in turn on a CPU, where oneDNN's
grouped transposed convolutions are slower: 0.45x measured on 2 cores), one stacked Sinkhorn solve
for all K x 2 OT problems, one backward, and on CUDA the whole step of all K in one CUDA graph. This
module only builds the members as ``dp_sinkhorn.train`` builds a run. What stays per member, so each
is its own run:

* its seed: the same initialisation (``nets.build_seeded_generator``) and the same three
  torch.Generators as ``dp_sinkhorn.train`` (latents+labels, Poisson sampling, sanitizer noise),
  each consumed in the trainer's order;
* its cost mix ``m``, clip ``C``, noise multiplier ``sigma``, optimizer and learning rate: its image
  gradient is clipped as one tensor to its ``C`` and noised from ITS noise generator;
* its accountant: a :class:`~dpsynth.privacy.report.BudgetGuard` per private member, charged every
  step and refusing (PrivacyError) before a step past its target (:meth:`BatchedSweep.step` here;
  the one loop, ``methods/loop.py``, in the pipeline's train-sweep job).

Shared by construction (one tensor shape): the architecture, the batch size and ``p`` (they fix the
generated batch ``n + floor(p n)``), the temperature, the Sinkhorn iterations, Adam's betas and the
weight decay. A ``p`` grid runs as one batched sweep per ``p`` value (``together.group_by_shape``).
:func:`train_one` trains a member alone with :class:`~dpsynth.methods.dp_sinkhorn.step.FastStep`, and
tests/test_batched_sweep.py holds every member of a sweep to it.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from dpsynth.errors import ConfigError
from dpsynth.methods.dp_sinkhorn.plan import latent_generator
from dpsynth.methods.dp_sinkhorn.step import FastStep, Member, PackedStep, StepSpec
from dpsynth.methods.dp_sinkhorn.tuning import StepTuning
from dpsynth.methods.optim import make_optimizer
from dpsynth.nets import build_seeded_generator
from dpsynth.privacy.report import BudgetGuard

__all__ = ["SweepShared", "SweepMember", "BatchedSweep", "member_guard", "member_setup", "train_one"]


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


def member_guard(shared: SweepShared, mem: SweepMember) -> BudgetGuard | None:
    """The member's accountant (None: non-private, or no target, as in the benchmarks)."""
    if mem.sigma is None or shared.target_epsilon is None:
        return None
    return BudgetGuard(mem.sigma, shared.q, shared.delta, shared.target_epsilon, sampling="poisson")


def member_setup(shared: SweepShared, mem: SweepMember, device: torch.device, capturable: bool = False,
                 fused: bool = False) -> tuple[nn.Module, torch.optim.Optimizer, dict[str, torch.Generator]]:
    """Generator, optimizer and generators exactly as ``dp_sinkhorn.train`` builds them for ``mem.seed``."""
    G = build_seeded_generator(shared.arch, mem.seed, device).to(dtype=shared.dtype)
    return G, mem.optimizer_for(G.parameters(), shared, capturable=capturable, fused=fused), _gens(mem.seed, device)


def train_one(shared: SweepShared, mem: SweepMember, x_all: Tensor, y_all: Tensor, steps: int) -> nn.Module:
    """The one-at-a-time reference: ``mem`` alone, ``steps`` FastSteps (eager), its own guard."""
    G, opt, gens = member_setup(shared, mem, x_all.device)
    step = FastStep(G, opt, x_all.to(shared.dtype), y_all, mem.spec(shared, getattr(G, "num_classes", None)), gens,
                    cuda_graph=False)
    guard = member_guard(shared, mem)
    for _ in range(steps):
        if guard is not None:
            guard.step()
        step()
    step.check()
    return G


class BatchedSweep(PackedStep):
    """K configurations as one :class:`~dpsynth.methods.dp_sinkhorn.step.PackedStep`, built from the
    sweep's settings as ``dp_sinkhorn.train`` builds each run (:func:`member_setup`), each member
    under its own budget guard (``shared.target_epsilon``) charged by :meth:`step`."""

    def __init__(self, shared: SweepShared, members: Sequence[SweepMember], x_all: Tensor, y_all: Tensor,
                 forward_mode: str = "auto", gens: Sequence[dict[str, torch.Generator]] | None = None,
                 cuda_graph: bool | None = None, tuning: StepTuning | None = None) -> None:
        """``gens``: each member's {"model", "data", "noise"} generators; the pipeline passes the
        run's (secret Poisson sampling and sanitizer noise from ``NoiseSource``); None: seeded
        from the member's seed as ``train_one`` (benchmarks and the equality tests).
        ``cuda_graph`` (default: on CUDA): the whole step of all K members in one CUDA graph.
        ``tuning``: the GPU speed levers of the one run's step (``tuning.py``), applied to every member
        (``fused_adam`` builds each Adam member's optimizer fused); ``self.tuning`` says which ran."""
        if gens is not None and len(gens) != len(members):
            raise ConfigError(f"BatchedSweep: {len(gens)} generator sets for {len(members)} members")
        self.shared, self.sweep_members = shared, list(members)
        x_all, dev = x_all.to(shared.dtype), x_all.device
        graph = (dev.type == "cuda") if cuda_graph is None else cuda_graph
        fused = (tuning or StepTuning()).fused_adam
        packed = []
        for i, mem in enumerate(self.sweep_members):
            # (SGD without momentum keeps no state: its update is device ops alone, capturable as it is)
            G, opt, seeded = member_setup(shared, mem, dev, capturable=graph and dev.type == "cuda", fused=fused)
            packed.append(Member(G, opt, mem.spec(shared, getattr(G, "num_classes", None)),
                                 seeded if gens is None else gens[i], name=mem.name or str(mem.seed)))
        super().__init__(packed, x_all, y_all, forward_mode=forward_mode, cuda_graph=cuda_graph, tuning=tuning)
        self.guards = [member_guard(shared, mem) for mem in self.sweep_members]
        self.steps = 0

    @property
    def opts(self) -> list[torch.optim.Optimizer]:
        return [m.opt for m in self.members]

    @property
    def gens(self) -> list[dict[str, torch.Generator]]:
        return [m.gens for m in self.members]

    @property
    def member_params(self) -> list[dict[str, Tensor]]:
        return [dict(m.G.named_parameters()) for m in self.members]

    def step(self) -> Tensor:
        """One step of every member, each member's accountant charged first (each may refuse before
        anything is computed); returns the K losses (device tensor, no host sync)."""
        for guard in self.guards:
            if guard is not None:
                guard.step()
        losses, _ = self()
        self.steps += 1
        return losses

    def generator(self, i: int) -> nn.Module:
        """A copy of member ``i``'s generator (trained weights and BN statistics)."""
        return copy.deepcopy(self.members[i].G)

    def epsilons(self) -> list[float]:
        """Each member's spent epsilon (math.inf for non-private members)."""
        from dpsynth.privacy import accounting as acc

        out = []
        for mem in self.sweep_members:
            if mem.sigma is None:
                out.append(math.inf)
            else:
                out.append(acc.epsilon(mem.sigma, self.shared.q, self.steps, self.shared.delta,
                                       sampling="poisson")["rdp_classic"] if self.steps else 0.0)
        return out
