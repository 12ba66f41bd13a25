"""Train the cells of an entropic-WGAN sweep together (``sweeps.<name>.train_together``): Reshetova et al.'s
Fig. 11 (arXiv:2306.09547) cells -- one per training-set size n and seed -- packed on one device.

Each cell stays its own run, as with DP-Sinkhorn's batched sweep (``dp_sinkhorn/together.py``):

* its records are its own privatized ones (``data/privatized/<cell>.npz``: its own privatize stage, its own
  release-ledger entry); the pack never opens the clean records;
* its checkpoint is written exactly where ``dpsynth train CELL`` keeps it, in the per-run stepper's format
  (``run.EWGANStepper``: generator, Adam moments, random streams, loss spec, architecture), tied to that cell's
  configuration fingerprint, with its own log (``methods/loop.py``: ``RunRecord``);
* nothing is released here: ``dpsynth train CELL`` finds the finished checkpoint and releases the cell's
  generator, privacy report and log from it, so the downstream stages see what they always see.

The step is ``packed.PackedEWGAN`` (its own draws: a hash of the cell's seed and the step), so a cell trained
together does not reproduce the same cell trained alone draw for draw; the checkpoint says which
(``draws``). Cells of one group share the loss (but not its temperature), the batch, the optimizer and the
device; a cell with more steps goes on in a smaller group after the others finish.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np
import torch

from dpsynth.errors import ConfigError, DataError
from dpsynth.methods.artifacts import TOGETHER_KEY
from dpsynth.methods.checkpoint import Checkpointer, config_fingerprint, rng_state, set_rng_state
from dpsynth.methods.context import TrainContext, require_shared
from dpsynth.methods.entropic_wgan.fit import generator_arch
from dpsynth.methods.entropic_wgan.loss import local_noise, loss_spec_for
from dpsynth.methods.entropic_wgan.packed import Member, PackedEWGAN
from dpsynth.methods.loop import RunRecord, drive

__all__ = ["group_by_shape", "resume_step", "train_together"]


def _plan(ctx: TrainContext) -> tuple[dict[str, Any], Any, int]:
    """(what a group must share, the cell's loss spec, its step count)."""
    from dpsynth.methods.entropic_wgan.run import _record_shape, _total_steps

    shape = _record_shape(ctx)
    spec = loss_spec_for(ctx.experiment, shape)
    h = ctx.experiment.hparams
    shared = {"loss": spec.loss, "p": spec.p, "n_iter": spec.n_iter, "scaling": spec.scaling, "dct": spec.dct_shape,
              "generator": h.generator, "batch": min(int(h.batch_size), len(ctx.data.x_train)), "lr": h.lr,
              "optimizer": h.optimizer, "betas": tuple(h.betas), "weight_decay": h.weight_decay,
              "device": str(ctx.device), "shape": shape}
    return shared, spec, _total_steps(ctx)


def resume_step(ctx: TrainContext) -> int | None:
    """The step a cell's checkpoint resumes from (0: none; None: finished)."""
    state = Checkpointer(ctx.checkpoint_path, config_fingerprint(ctx)).load()
    return 0 if state is None else None if state.get("done") else int(state["step"])


def group_by_shape(ctxs: Sequence[TrainContext], steps: Sequence[int | None] | None = None) -> list[list[int]]:
    """Indices of the cells that can share one pack (equal shared settings and resume step), first-seen order."""
    steps = [resume_step(c) for c in ctxs] if steps is None else steps
    groups: dict[str, list[int]] = {}
    for i, (ctx, at) in enumerate(zip(ctxs, steps)):
        groups.setdefault(repr((sorted(_plan(ctx)[0].items()), at)), []).append(i)
    return list(groups.values())


class MemberCheckpoint:
    """Member ``k`` of a pack as its cell's checkpoint, in ``EWGANStepper``'s keys (model, optimizer, rng, spec,
    arch), so ``dpsynth train CELL`` releases -- or resumes -- it as its own run."""

    def __init__(self, pack: PackedEWGAN, k: int, ctx: TrainContext, spec: Any, arch: dict[str, Any]) -> None:
        self.pack, self.k, self.spec, self.arch = pack, k, spec, arch
        # the per-run trainer's streams (unused by the pack, whose draws are hashed): a checkpoint that the
        # per-run stepper loads as it loads its own
        self.streams = {"latent": torch.Generator(device=ctx.device).manual_seed(int(ctx.seed)),
                        "batch": torch.Generator().manual_seed(int(ctx.seed) + 1)}

    def state_dict(self) -> dict[str, Any]:
        st = self.pack.member_state(self.k)
        group = self.pack.opt.param_groups[0]
        moments = {int(j): m for j, m in st["moments"].items() if m}
        optimizer = {"state": moments, "param_groups": [{**{k: v for k, v in group.items() if k != "params"},
                                                         "params": list(range(len(group["params"])))}]}
        return {"model": st["model"], "optimizer": optimizer, "rng": rng_state(self.streams),
                "spec": asdict(self.spec), "arch": self.arch, "draws": st["draws"]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("draws") != self.pack.draws_kind:
            raise DataError(f"{self.pack.members[self.k].name}: its checkpoint was trained alone; finish it with "
                            "`dpsynth train CELL` (a pack resumes only the checkpoints it wrote)")
        m = self.pack.members[self.k]
        self.pack.load_member_state(self.k, {"seed": m.seed, "draws": state["draws"], "model": state["model"],
                                             "moments": state["optimizer"]["state"]})
        set_rng_state(state["rng"], self.streams)


def train_together(ctxs: Sequence[TrainContext], group: str, forward_mode: str = "auto") -> list[dict[str, Any]]:
    """Train ``ctxs`` (one group of :func:`group_by_shape`) in lock-step, leaving each cell's checkpoint where
    ``dpsynth train`` looks -- on the checkpoint cadence, on a stop and finished at the end; one summary per
    cell. ``forward_mode`` is DP-Sinkhorn's and ignored here."""
    plans = [_plan(c) for c in ctxs]
    first = plans[0][0]
    require_shared(ctxs, [shared for shared, _, _ in plans], "one pack")
    own_steps = [n for _, _, n in plans]
    total = min(own_steps)
    hp = ctxs[0].experiment.hparams
    dev = ctxs[0].device
    # each cell's privatized records (post-processing; the clean records are never opened here)
    members = [Member(c.name, int(c.seed), torch.as_tensor(np.asarray(c.data.x_train, dtype=np.float32), device=dev),
                      float(spec.temperature)) for c, (_, spec, _) in zip(ctxs, plans)]
    pack = PackedEWGAN(members, first["shape"], plans[0][1], hp, device=dev)
    arch = generator_arch(hp.generator, first["shape"])
    noises = [local_noise(c.experiment.local) for c in ctxs]  # type: ignore[arg-type]
    runs = [RunRecord(c, MemberCheckpoint(pack, k, c, plans[k][1], arch), total_steps=own_steps[k], guard=None,
                      sigma=None, log_fields=("loss",), marks={TOGETHER_KEY: group}) for k, c in enumerate(ctxs)]
    if any(r.state is not None for r in runs):
        steps = {r.step for r in runs if r.state is not None}
        if any(r.state is not None and r.state.get("done") for r in runs):
            raise ConfigError("a cell is already trained (a finished checkpoint); release it with `dpsynth train CELL`")
        if any(r.state is None for r in runs) or len(steps) != 1:
            raise ConfigError(f"{', '.join(c.name for c in ctxs)}: their checkpoints are at different steps "
                              f"({sorted(steps)}); train them in groups of one step each")
    step = runs[0].step
    for r in runs:
        r.resume()
    pack.steps_done = step
    eps = [n["epsilon"] if n["epsilon"] is not None else float("inf") for n in noises]

    def save(at: int) -> None:
        for r in runs:
            r.save(at, done=at >= r.total_steps)

    def on_log(at: int, stats: Any, e: Sequence[float], rate: float) -> None:
        if lead.progress:
            print(f"train-sweep {group}: step {at}/{total} ({rate * len(ctxs):.1f} member-steps/s)", flush=True)

    def rows(stats: torch.Tensor) -> list[dict[str, float]]:
        values = stats.tolist()  # the one host read, at log time
        bad = [c.name for c, v in zip(ctxs, values) if not np.isfinite(v)]
        if bad:
            raise DataError(f"{', '.join(bad)}: loss became non-finite; lower hparams.lr")
        return [{"loss": v} for v in values]

    lead = ctxs[0]
    step, rate = drive(lead, pack.step, lambda: None, step=step, total_steps=total, log_every=max(1, total // 200),
                       logs=[r.log for r in runs if r.log is not None], rows=rows, epsilons=lambda: eps, guards=[],
                       save=save, on_log=on_log)
    save(step)
    out = [{"experiment": c.name, "steps": step, "total_steps": n, "finished": False} if n > step else
           {"experiment": c.name, "steps": step, "finished": True, TOGETHER_KEY: group,
            "member_steps_per_s_this_run": round(rate * len(ctxs), 3)} for c, n in zip(ctxs, own_steps)]
    rest = [c for c, n in zip(ctxs, own_steps) if n > step]
    if step < total or not rest or lead.max_steps_this_run is not None:
        return out
    done = {s["experiment"]: s for s in out if s["finished"]}
    later = {s["experiment"]: s for s in train_together(rest, group, forward_mode)}  # from their checkpoints
    return [done.get(c.name) or later[c.name] for c in ctxs]
