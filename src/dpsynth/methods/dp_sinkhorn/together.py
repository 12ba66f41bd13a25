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
A group checkpoint (stacked state, every member's RNG, guard and log) makes the group
resumable after a kill.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dpsynth.errors import ConfigError
from dpsynth.methods.artifacts import TOGETHER_KEY
from dpsynth.methods.checkpoint import Checkpointer, config_fingerprint, rng_state, set_rng_state
from dpsynth.methods.context import TrainContext
from dpsynth.methods.dp_sinkhorn.plan import (
    DEFAULT_ITERS,
    LOG_EVERY,
    LOG_FIELDS,
    generator_arch,
    latent_generator,
    privacy_schedule,
    records_to_float,
    validate_data,
)
from dpsynth.methods.dp_sinkhorn.sweep import BatchedSweep, SweepMember, SweepShared
from dpsynth.methods.loop import drive
from dpsynth.methods.optim import make_optimizer
from dpsynth.methods.trainlog import TrainLog
from dpsynth.ot import num_extra
from dpsynth.privacy.report import BudgetGuard

__all__ = ["TOGETHER_KEY", "member_plan", "group_by_shape", "train_together", "cell_done"]

def member_plan(ctx: TrainContext) -> tuple[dict[str, Any], SweepMember]:
    """What must be equal across a group (``shared``) and what is the cell's own (its member),
    with an error naming the cell and the key for a cell the batched sweep cannot train."""
    validate_data(ctx)
    h = ctx.experiment.hparams
    if not ctx.experiment.spec.trains_together:
        raise ConfigError(f"{ctx.name}: method {ctx.experiment.method!r} cannot be trained together")
    if h.adversarial:
        raise ConfigError(f"{ctx.name}: hparams.adversarial: the adversarial variant cannot be trained together")
    if h.optimizer != "adam":
        raise ConfigError(f"{ctx.name}: hparams.optimizer {h.optimizer!r}: the batched sweep steps Adam only")
    q = h.batch_size / ctx.data.x_train.shape[0]
    sigma, steps = privacy_schedule(ctx, q, "poisson")
    if sigma is not None and h.sanitizer != "image":
        raise ConfigError(f"{ctx.name}: hparams.sanitizer {h.sanitizer!r}: the batched sweep has the image-gradient "
                          "sanitizer only")
    plan = ctx.privacy_plan
    shared = {"arch": generator_arch(ctx), "n": h.batch_size, "n_extra": num_extra(h.batch_size, h.p), "q": q,
              "alpha_c": h.alpha_c, "eps": h.temperature, "n_iter": h.sinkhorn_iters or DEFAULT_ITERS,
              "scaling": h.sinkhorn_scaling, "lr": h.lr, "betas": tuple(h.betas), "weight_decay": h.weight_decay,
              "delta": plan.delta if sigma is not None else 1e-5,
              "target_epsilon": plan.epsilon if sigma is not None else None, "steps": steps,
              "private": sigma is not None, "dataset": ctx.experiment.dataset, "device": str(ctx.device),
              # the records themselves (a seed sweep under a train_subset trains on other subsets)
              "records": hashlib.sha256(np.ascontiguousarray(ctx.data.x_train).tobytes()).hexdigest()}
    return shared, SweepMember(seed=ctx.seed, m=h.m, sigma=sigma, clip=h.clip, name=ctx.name)


def group_by_shape(ctxs: Sequence[TrainContext]) -> list[list[int]]:
    """Indices of the cells that can share one batched sweep (equal shared settings, e.g. one per
    ``p``), in first-seen order."""
    groups: dict[str, list[int]] = {}
    for i, ctx in enumerate(ctxs):
        shared, _ = member_plan(ctx)
        groups.setdefault(repr(sorted(shared.items())), []).append(i)
    return list(groups.values())


def cell_done(ctx: TrainContext) -> bool:
    """True when the cell has a finished checkpoint under its current configuration."""
    state = Checkpointer(ctx.checkpoint_path, config_fingerprint(ctx)).load()
    return bool(state is not None and state.get("done"))


def _member_optimizer_state(sweep: BatchedSweep, i: int, G: torch.nn.Module) -> dict[str, Any]:
    """Member ``i``'s Adam state as ``dpsynth train`` would hold it: the stacked Adam's slices
    (elementwise, so slicing IS the member's own Adam)."""
    opt = make_optimizer(G.parameters(), "adam", lr=sweep.shared.lr, betas=sweep.shared.betas,
                           weight_decay=sweep.shared.weight_decay)
    stacked = list(sweep.params.values())
    for p_stacked, p in zip(stacked, G.parameters()):
        st = sweep.opt.state.get(p_stacked)
        if st:
            opt.state[p] = {k: (v[i].clone() if torch.is_tensor(v) and v.dim() > 0 else
                                v.clone() if torch.is_tensor(v) else v) for k, v in st.items()}
    return opt.state_dict()


def train_together(ctxs: Sequence[TrainContext], group_dir: Path, group: str,
                   forward_mode: str = "auto") -> list[dict[str, Any]]:
    """Train ``ctxs`` (one shape group, see :func:`group_by_shape`) in lock-step and leave each
    cell's finished checkpoint where ``dpsynth train`` looks; returns one summary per cell."""
    plans = [member_plan(c) for c in ctxs]
    first = plans[0][0]
    for ctx, (shared, _) in zip(ctxs[1:], plans[1:]):
        diff = sorted(k for k in first if first[k] != shared[k])
        if diff:
            raise ConfigError(f"{ctx.name} and {ctxs[0].name} cannot share a batched sweep: they differ in "
                              f"{', '.join(diff)}")
    ref = ctxs[0].data.x_train
    for ctx in ctxs[1:]:
        if ctx.data.x_train.shape != ref.shape or not np.array_equal(ctx.data.x_train, ref):
            raise ConfigError(f"{ctx.name} and {ctxs[0].name} train on different records (a seed-dependent "
                              "train_subset?): they cannot share a batched sweep")
    dev = ctxs[0].device
    shared = SweepShared(arch=first["arch"], n=first["n"], n_extra=first["n_extra"], q=first["q"],
                         alpha_c=first["alpha_c"], eps=first["eps"], n_iter=first["n_iter"], scaling=first["scaling"],
                         lr=first["lr"], betas=first["betas"], weight_decay=first["weight_decay"],
                         delta=first["delta"], target_epsilon=first["target_epsilon"])
    members = [m for _, m in plans]
    total = int(first["steps"])
    # The cells' own randomness: seeded latents (as the trainer), secret sampling and noise.
    gens = [{"model": latent_generator(c.seed, dev),
             "data": c.noise.torch_generator(dev, 2), "noise": c.noise.torch_generator(dev, 3)} for c in ctxs]
    x_all = records_to_float(ref).to(dev)
    y_all = torch.from_numpy(ctxs[0].data.y_train).to(dev)
    sweep = BatchedSweep(shared, members, x_all, y_all, forward_mode=forward_mode, gens=gens)

    fingerprint = hashlib.sha256("|".join(config_fingerprint(c) for c in ctxs).encode()).hexdigest()
    ckpt = Checkpointer(Path(group_dir) / f"{group}.pt", fingerprint)
    state = ckpt.load()
    step = 0
    if state is not None:
        with torch.no_grad():
            for k, v in state["params"].items():
                sweep.params[k].copy_(v)
            for k, v in state["buffers"].items():
                sweep.buffers[k].copy_(v)
        sweep.opt.load_state_dict(state["optimizer"])
        for g, st in zip(sweep.gens, state["rng"]):
            set_rng_state(st, g)
        sweep.guards = [None if s is None else BudgetGuard.from_state_dict(s) for s in state["guards"]]
        step = sweep.steps = int(state["step"])
    logs = [TrainLog(c.log_path, LOG_FIELDS, resume_step=step if state is not None else None,
                     rows=state["member_log_rows"][i] if state is not None else None) for i, c in enumerate(ctxs)]

    def save(at: int) -> None:
        sweep.check()
        ckpt.save({"step": at, "params": sweep.params, "buffers": sweep.buffers,
                   "optimizer": sweep.opt.state_dict(), "rng": [rng_state(g) for g in sweep.gens],
                   "guards": [None if g is None else g.state_dict() for g in sweep.guards],
                   "member_log_rows": [log.snapshot() for log in logs]})  # ("log_rows" is the Checkpointer's)

    def rows(losses: torch.Tensor) -> list[dict[str, float]]:
        out = []
        for i, san in enumerate(sweep.sanitizers):
            last = san.last if san is not None else None
            out.append({"loss": float(losses[i]), "real_batch": int(sweep.last_real[i]),
                        "clean_norm": last.clean_norm if last else float("nan"),
                        "noise_norm": last.noise_norm if last else 0.0})
        return out

    def on_log(at: int, losses: torch.Tensor, eps: list[float], rate: float) -> None:
        if lead.progress:
            print(f"train-sweep {group}: step {at}/{total} ({rate:.2f} steps/s)", flush=True)

    lead = ctxs[0]
    # The one loop (methods/loop.py), over K logs. The members' guards live in the sweep, whose step
    # charges every one of them (each may refuse) before anything is computed.
    step, rate = drive(lead, sweep.step, sweep.check, step=step, total_steps=total, log_every=LOG_EVERY, logs=logs,
                       rows=rows, guards=[], save=save, on_log=on_log,
                       epsilons=lambda: [g.epsilon_spent() if g is not None else math.inf for g in sweep.guards])
    sweep.check()
    if step < total:  # a timed slice: resumable, nothing finished
        save(step)
        return [{"experiment": c.name, "steps": step, "total_steps": total, "finished": False} for c in ctxs]

    out = []
    for i, c in enumerate(ctxs):
        G = sweep.generator(i)
        cell = Checkpointer(c.checkpoint_path, config_fingerprint(c))
        cell.log = logs[i]
        guard = sweep.guards[i]
        cell.save({"step": step, "total_steps": total, "sigma": members[i].sigma, "arch": shared.arch,
                   "done": True, "release": None, TOGETHER_KEY: group, "generator": G.state_dict(),
                   "optimizer": _member_optimizer_state(sweep, i, G), "rng": rng_state(sweep.gens[i]),
                   "guard": guard.state_dict() if guard is not None else None, "adversary": None})
        out.append({"experiment": c.name, "steps": step, "finished": True, "sigma": members[i].sigma,
                    TOGETHER_KEY: group, "steps_per_s_this_run": round(rate, 3)})
    ckpt.remove()  # the cells' own checkpoints hold everything from here on
    return out
