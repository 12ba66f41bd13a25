"""Train the cells of a DP-Sinkhorn sweep together on one device (the batched sweep, sweep.py).

A sweep's cells differ in their cost mix ``m``, clip or noise, but share the generator, the
batch and the solver, so :class:`~dpsynth.methods.dp_sinkhorn.sweep.BatchedSweep` can step them
in lock-step with stacked parameters -- the point on a GPU, where one cell's small
convolutions leave the device idle. Cells with different ``p`` (a different generated batch)
form separate groups, trained one after another.

Each cell stays its own run:

* its Poisson sampling and sanitizer noise come from ITS ``NoiseSource`` (fresh OS entropy in
  the secret mode; only the latents are seeded, as in ``dp_sinkhorn.train``);
* its accountant (a ``BudgetGuard``) is charged every step and refuses before a step past
  its target;
* its log, and at the end its own finished checkpoint, written exactly where
  ``dpsynth train CELL`` keeps it and tied to that cell's configuration fingerprint.

Nothing is released here: ``dpsynth train CELL`` then finds the finished checkpoint and
releases the cell's generator, privacy report and logs from it without training, so the
per-cell outputs the downstream stages and DVC see are made by the same code as always.
There is no group checkpoint, and no checkpoint code here: the group is one packed step
(``step.PackedStep``) driven by the one loop (``methods/loop.py``: ``drive``), and each member's
checkpoint, accountant and log are a ``loop.RunRecord`` of its own cell, saving the member's
``run.MemberState`` -- its generator and optimizer moments, its random streams, guard and log, the
keys of its own run's checkpoint. At every checkpoint interval and on SIGTERM each cell's is written,
so a killed group resumes from its members' checkpoints and a cell could as well resume alone
through the one loop.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from dpsynth.errors import ConfigError
from dpsynth.methods.artifacts import TOGETHER_KEY
from dpsynth.methods.checkpoint import Checkpointer, config_fingerprint
from dpsynth.methods.context import TrainContext, require_shared
from dpsynth.methods.dp_sinkhorn.plan import (
    DEFAULT_ITERS,
    LOG_EVERY,
    STEP_LOG_FIELDS,
    generator_arch,
    latent_generator,
    privacy_schedule,
    records_to_float,
    validate_data,
)
from dpsynth.methods.dp_sinkhorn.run import MemberState
from dpsynth.methods.dp_sinkhorn.sweep import BatchedSweep, SweepMember, SweepShared, member_guard
from dpsynth.methods.dp_sinkhorn.tuning import StepTuning
from dpsynth.methods.loop import RunRecord, drive
from dpsynth.ot import num_extra

__all__ = ["TOGETHER_KEY", "member_plan", "group_by_shape", "train_together", "cell_done", "resume_step"]

def member_plan(ctx: TrainContext) -> tuple[dict[str, Any], SweepMember, int]:
    """What must be equal across a group (``shared``), what is the cell's own (its member) and its step
    count (its own: a cell whose sigma differs trains another number of steps), with an error naming
    the cell and the key for a cell the batched sweep cannot train."""
    validate_data(ctx)
    h = ctx.experiment.hparams
    if not ctx.experiment.spec.trains_together:
        raise ConfigError(f"{ctx.name}: method {ctx.experiment.method!r} cannot be trained together")
    if h.adversarial:
        raise ConfigError(f"{ctx.name}: hparams.adversarial: the adversarial variant cannot be trained together")
    q = h.batch_size / ctx.data.x_train.shape[0]
    sigma, steps = privacy_schedule(ctx, q, "poisson")
    if sigma is not None and h.sanitizer != "image":
        raise ConfigError(f"{ctx.name}: hparams.sanitizer {h.sanitizer!r}: the batched sweep has the image-gradient "
                          "sanitizer only")
    plan = ctx.privacy_plan
    shared = {"arch": generator_arch(ctx), "n": h.batch_size, "n_extra": num_extra(h.batch_size, h.p), "q": q,
              "alpha_c": h.alpha_c, "eps": h.temperature, "n_iter": h.sinkhorn_iters or DEFAULT_ITERS,
              "scaling": h.sinkhorn_scaling, "betas": tuple(h.betas), "weight_decay": h.weight_decay,
              "delta": plan.delta if sigma is not None else 1e-5,
              "target_epsilon": plan.epsilon if sigma is not None else None,
              "private": sigma is not None, "dataset": ctx.experiment.dataset, "device": str(ctx.device),
              "gpu_levers": tuple(h.gpu_levers),  # one step for the whole group, under one set of levers
              # the records themselves (a seed sweep under a train_subset trains on other subsets)
              "records": hashlib.sha256(np.ascontiguousarray(ctx.data.x_train).tobytes()).hexdigest()}
    return shared, SweepMember(seed=ctx.seed, m=h.m, sigma=sigma, clip=h.clip, name=ctx.name, optimizer=h.optimizer,
                               lr=h.lr), int(steps)


def group_by_shape(ctxs: Sequence[TrainContext], steps: Sequence[int | None] | None = None) -> list[list[int]]:
    """Indices of the cells that can share one batched sweep (equal shared settings, e.g. one per
    ``p``, and the same step to resume from: ``resume_step``, or ``steps`` when the caller has read
    them already), in first-seen order."""
    steps = [resume_step(c) for c in ctxs] if steps is None else steps
    groups: dict[str, list[int]] = {}
    for i, (ctx, at) in enumerate(zip(ctxs, steps)):
        shared, _, _ = member_plan(ctx)
        groups.setdefault(repr((sorted(shared.items()), at)), []).append(i)
    return list(groups.values())


def cell_done(ctx: TrainContext) -> bool:
    """True when the cell has a finished checkpoint under its current configuration."""
    return resume_step(ctx) is None


def resume_step(ctx: TrainContext) -> int | None:
    """The step a cell's checkpoint resumes from (0: none; None: finished). Cells train together only
    from a common step, so a cell added to a stopped sweep forms a group of its own."""
    state = Checkpointer(ctx.checkpoint_path, config_fingerprint(ctx)).load()
    return 0 if state is None else None if state.get("done") else int(state["step"])


def train_together(ctxs: Sequence[TrainContext], group: str, forward_mode: str = "auto") -> list[dict[str, Any]]:
    """Train ``ctxs`` (one shape group, see :func:`group_by_shape`) in lock-step and leave each
    cell's checkpoint where ``dpsynth train`` looks -- at every checkpoint interval, on a stop and
    finished at the end; returns one summary per cell.

    There is no group checkpoint: each member's state is its own run's checkpoint (weights, Adam's
    moments, every random stream, its guard and log), the format of ``methods/loop.py``, so a killed
    group resumes from its members' checkpoints (all at one step) and each cell could resume alone.
    Members train their own step counts (a cell whose sigma differs has another): the group steps to the
    smallest, those done there finish, and the rest go on as a smaller group from their checkpoints."""
    plans = [member_plan(c) for c in ctxs]
    first = plans[0][0]
    require_shared(ctxs, [shared for shared, _, _ in plans], "a batched sweep")
    ref = ctxs[0].data.x_train
    for ctx in ctxs[1:]:
        if ctx.data.x_train.shape != ref.shape or not np.array_equal(ctx.data.x_train, ref):
            raise ConfigError(f"{ctx.name} and {ctxs[0].name} train on different records (a seed-dependent "
                              "train_subset?): they cannot share a batched sweep")
    dev = ctxs[0].device
    shared = SweepShared(arch=first["arch"], n=first["n"], n_extra=first["n_extra"], q=first["q"],
                         alpha_c=first["alpha_c"], eps=first["eps"], n_iter=first["n_iter"], scaling=first["scaling"],
                         betas=first["betas"], weight_decay=first["weight_decay"],
                         delta=first["delta"], target_epsilon=first["target_epsilon"])
    members = [m for _, m, _ in plans]
    own_steps = [n for _, _, n in plans]
    total = min(own_steps)  # in lock-step to the first member's end
    # The cells' own randomness: seeded latents (as the trainer), secret sampling and noise.
    gens = [{"model": latent_generator(c.seed, dev),
             "data": c.noise.torch_generator(dev, 2), "noise": c.noise.torch_generator(dev, 3)} for c in ctxs]
    x_all = records_to_float(ref).to(dev)
    y_all = torch.from_numpy(ctxs[0].data.y_train).to(dev)
    tuning = StepTuning.for_run(first["gpu_levers"], dev)  # the cells' own levers (none on the CPU)
    # The packed step keeps no guard: the loop charges each member's (its RunRecord's) before each step.
    sweep = BatchedSweep(dataclasses.replace(shared, target_epsilon=None), members, x_all, y_all,
                         forward_mode=forward_mode, gens=gens, tuning=tuning)
    runs = [RunRecord(c, MemberState(sweep, i, shared.arch), total_steps=own_steps[i],
                      guard=member_guard(shared, members[i]), sigma=members[i].sigma, log_fields=STEP_LOG_FIELDS,
                      marks={TOGETHER_KEY: group}) for i, c in enumerate(ctxs)]
    if any(r.state is not None for r in runs):
        steps = {r.step for r in runs if r.state is not None}
        finished = [r.ctx.name for r in runs if r.state is not None and r.state.get("done")]
        if finished:
            raise ConfigError(f"{', '.join(finished)}: already trained (a finished checkpoint); release it with "
                              "`dpsynth train CELL` instead of training it again")
        if any(r.state is None for r in runs) or len(steps) != 1:  # group_by_shape groups cells by resume_step
            raise ConfigError(f"{', '.join(c.name for c in ctxs)}: their checkpoints are at different steps "
                              f"({sorted(steps)}); train them in groups of one step each")
    step = runs[0].step
    for r in runs:
        r.resume()  # each member's weights, moments, random streams and guard from its own checkpoint
    guards = [r.guard for r in runs if r.guard is not None]

    def save(at: int) -> None:
        """Every member's checkpoint, in the format (and place) of its own `dpsynth train` (finished at
        its own step count)."""
        sweep.check()
        for r in runs:
            r.save(at, done=at >= r.total_steps)

    def on_log(at: int, stats: Any, eps: Sequence[float], rate: float) -> None:
        if lead.progress:
            print(f"train-sweep {group}: step {at}/{total} ({rate:.2f} steps/s)", flush=True)

    lead = ctxs[0]
    # The one loop (methods/loop.py), over K logs; every member's guard charged (each may refuse) before
    # each step of the packed step.
    step, rate = drive(lead, sweep, sweep.check, step=step, total_steps=total, log_every=LOG_EVERY,
                       logs=[r.log for r in runs], rows=lambda stats: [sweep.log_row(i, stats) for i in range(len(runs))],
                       guards=guards, save=save, on_log=on_log, epsilons=lambda: [r.epsilon_spent() for r in runs])
    sweep.check()
    save(step)  # resumable; each member that reached its own step count finished
    rest = [c for c, n in zip(ctxs, own_steps) if n > step]
    out = [{"experiment": c.name, "steps": step, "total_steps": n, "finished": False} if n > step else
           {"experiment": c.name, "steps": step, "finished": True, "sigma": members[i].sigma, TOGETHER_KEY: group,
            "steps_per_s_this_run": round(rate, 3), "gpu_levers": list(tuning.levers)} for i, (c, n) in enumerate(zip(ctxs, own_steps))]
    if step < total or not rest or lead.max_steps_this_run is not None:
        return out  # a timed slice (the rest resumes on the next run), or every member finished
    done = {s["experiment"]: s for s in out if s["finished"]}
    later = {s["experiment"]: s for s in train_together(rest, group, forward_mode)}  # from their checkpoints
    return [done.get(c.name) or later[c.name] for c in ctxs]
