"""The train stage: train one experiment's generator (resuming from its checkpoint), or a sweep's
cells together on one device (``sweeps.<name>.train_together``).

Privacy-relevant order: every folder a run writes (``out`` when it releases, and ``private_out``) is
checked before the parameters are loaded and before any private record is read, and so is the release
ledger (``stages.train_ledger``: a ledger that cannot record, or a fresh run past its dataset's total
budget, is refused then); a run trains and releases under its per-run lock (``RunLock`` on its private run
directory), its release reserved in the ledger before the first step and confirmed after; the noise comes
from ``params.privacy_noise`` (secret OS entropy unless ``reproducible``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpsynth.errors import DpsynthError, did_you_mean
from dpsynth.locations import check_apart
from dpsynth.stages.common import CLEANED_FOLDERS, DEFAULT_PARAMS, finish, prepare_cpu, get_experiment, resolve_device

if TYPE_CHECKING:
    from dpsynth.methods.context import TrainContext
    from dpsynth.stages.train_ledger import RunLedger

#: Where `train` writes when no --out / --private-out is given (the pipeline's layout).
DEFAULT_OUT, DEFAULT_PRIVATE = "models", "private"


def resolve_output_roots(out: str | None, private_out: str | None) -> tuple[str, str]:
    """``(out, private_out)`` with the defaults filled in. A run released elsewhere (``--out``) must
    say where its private files go too: defaulting them to ./private would let its checkpoint
    replace that of the default run of the same name (and the other way round). The two may not
    overlap either way (``locations.check_apart``): the checkpoint holds the secret noise state."""
    if out is None:
        out = DEFAULT_OUT
    if private_out is None:
        if Path(out) != Path(DEFAULT_OUT):
            raise DpsynthError(f"--out {out} needs --private-out DIR as well: this run's checkpoint and "
                               f"diagnostics would otherwise go to ./{DEFAULT_PRIVATE}, replacing those of the "
                               "default run of the same name")
        private_out = DEFAULT_PRIVATE
    check_apart(("--private-out", private_out), ("--out", out))
    return out, private_out


def build_context(experiment: str, *, out: str, private_out: str, params_file: str = DEFAULT_PARAMS,
                  scale: str | None = None, seed: int | None = None, device: str = "auto", progress: bool = True,
                  checkpoint_every: int | None = None, max_steps_this_run: int | None = None,
                  releases: bool = True) -> TrainContext:
    """The run's TrainContext. Every folder it will write (``out`` when it ``releases``, and
    ``private_out``) is checked before the parameters file is read and before any private record is.
    ``params_file`` (with ``scale``, the scale override) is loaded here, after those checks;
    ``checkpoint_every`` None keeps the method's interval. A run that ``releases`` reserves its release in the
    release ledger before its first step (``TrainContext.before_release``)."""
    return context_and_ledger(experiment, out=out, private_out=private_out, params_file=params_file, scale=scale,
                              seed=seed, device=device, progress=progress, checkpoint_every=checkpoint_every,
                              max_steps_this_run=max_steps_this_run, releases=releases)[0]


def context_and_ledger(experiment: str, *, out: str, private_out: str, params_file: str = DEFAULT_PARAMS,
                       scale: str | None = None, seed: int | None = None, device: str = "auto",
                       progress: bool = True, checkpoint_every: int | None = None,
                       max_steps_this_run: int | None = None,
                       releases: bool = True) -> tuple[TrainContext, RunLedger | None]:
    """:func:`build_context`, and the run's place in the release ledger (None when it does not ``release``),
    checked after the parameters are loaded and before any record is read."""
    import numpy as np
    import torch

    from dpsynth.config import load_params, resolve_run
    from dpsynth.data.dataset import Dataset, load_processed
    from dpsynth.locations import check_writable_dir
    from dpsynth.methods.context import CHECKPOINT_FILE, GENERATOR_FILE, TrainContext
    from dpsynth.paths import private_run_dir, warmstart_dir
    from dpsynth.privacy.randomness import NoiseSource

    device_ = resolve_device(device)  # before any work: a bad --device fails in a second, clearly
    if releases:
        check_writable_dir(out, "--out")
    check_writable_dir(private_out, "--private-out")
    params = load_params(params_file, scale=scale)
    prepare_cpu(params)
    get_experiment(params, experiment, params_file)  # an unknown name: the closest configured ones
    run = resolve_run(params, experiment, seed=seed)
    ledger = None
    if releases:  # before any record is read: a ledger that cannot record, or a fresh run past its budget
        from dpsynth.privacy.ledger_store import ReleaseLedger
        from dpsynth.stages.train_ledger import RunLedger

        private_dir = private_run_dir(private_out, experiment)
        ledger = RunLedger(ReleaseLedger.configured(params.ledger_dir), params, run, experiment, private_dir,
                           Path(out) / experiment / GENERATOR_FILE)
        ledger.check(private_dir / CHECKPOINT_FILE, ("--out", out), ("--private-out", private_out),
                     ("data.root", params.data.root), *CLEANED_FOLDERS, workspace=Path(params_file).resolve().parent,
                     private_roots=(private_out,))
    if run.experiment.local is not None and not run.data.is_file():
        raise DpsynthError(f"{run.data}: privatized data not found (run `dpsynth privatize {experiment}`)")
    full = load_processed(run.data)
    idx = run.train_indices(len(full.x_train))  # the scale's subset, then the first train_size (sweep key n)
    x, y = (full.x_train, full.y_train) if idx is None else (full.x_train[idx], full.y_train[idx])
    # The trainer never sees the test split: it is for the evaluation stage only.
    data = Dataset(full.name, x, y, full.x_test[:0], full.y_test[:0], full.num_classes)
    np.random.seed(run.seed)
    torch.manual_seed(run.seed)
    ctx = TrainContext(
        name=experiment, experiment=run.experiment, preset=run.preset, scale=run.scale, seed=run.seed,
        data=data, out_dir=Path(out) / experiment, privacy_plan=run.privacy,
        device=device_, progress=progress, scale_overrides=run.overrides,
        warmstart_dir=warmstart_dir(private_out, run.warmstart) if run.warmstart is not None else None,
        noise=NoiseSource(params.privacy_noise, run.seed if params.privacy_noise == "reproducible" else None),
        private_dir=private_run_dir(private_out, experiment),
        **({} if checkpoint_every is None else {"checkpoint_every": checkpoint_every}),
        max_steps_this_run=max_steps_this_run,
        processed_path=(Path(params.data.root) / "processed" / f"{run.experiment.dataset}.npz"
                        if run.experiment.local is not None else None),
        before_release=None if ledger is None else ledger.reserve,
    )
    return ctx, ledger


def run_train(experiment: str, *, out: str | None, private_out: str | None, params_file: str = DEFAULT_PARAMS,
              scale: str | None = None, seed: int | None = None, device: str = "auto", progress: bool = True,
              checkpoint_every: int | None = None, max_steps_this_run: int | None = None,
              as_json: bool = False) -> int:
    """The stage: train ``experiment`` (or find it done) under its lock, release it, and say what
    happened in one line (``as_json``: the summary as JSON)."""
    from dpsynth.locations import RunLock
    from dpsynth.methods.context import SUMMARY_FILE
    from dpsynth.paths import private_run_dir
    from dpsynth.privacy.ledger_store import settled

    out, private_out = resolve_output_roots(out, private_out)
    RunLock(private_run_dir(private_out, experiment), f"experiment {experiment}").check()  # before any record is read
    ctx, ledger = context_and_ledger(experiment, out=out, private_out=private_out, params_file=params_file,
                                     scale=scale, seed=seed, device=device, progress=progress,
                                     checkpoint_every=checkpoint_every, max_steps_this_run=max_steps_this_run)
    assert ledger is not None
    # run_train writes the summary after the method returns: a finished run lacking it is not done
    ctx.also_released = (ctx.out_dir / SUMMARY_FILE,)
    trainer = ctx.experiment.spec.load_trainer()
    with RunLock(ctx.private_dir, f"experiment {ctx.name}"):
        # a failure after the reservation marks it failed: still counted (its noise may have been drawn)
        with settled(ledger.ledger, ledger.held, lambda: True):
            summary = _run_locked(ctx, trainer)
        if summary["finished"] and not summary["already_done"]:
            ledger.confirm(ctx)
        elif summary["already_done"] and ledger.record_found(ctx):
            summary["recorded"] = str(ledger.ledger.path)
    finish(train_message(ctx, summary), summary, as_json)
    return 0


def train_message(ctx: TrainContext, summary: dict) -> str:
    """The one line a person reads at the end of `dpsynth train`: released, already done, or a
    slice that kept its checkpoint and released nothing."""
    from dpsynth.methods.context import SUMMARY_FILE
    from dpsynth.progress import format_duration

    name, steps, total = ctx.name, summary["steps"], summary["total_steps"]
    if summary.get("already_done"):
        recorded = (f"; it was missing from the release ledger: recorded it in {summary['recorded']}"
                    if summary.get("recorded") else "")
        return (f"train {name}: already done ({steps} steps; {ctx.generator_path} matches its checkpoint), "
                f"nothing trained{recorded}")
    took = f"{summary['steps_this_run']} steps in {format_duration(summary['wall_seconds'])}"
    if not summary["finished"]:
        return (f"train {name}: stopped as asked after {took} (--max-steps-this-run), at step {steps}/{total}; "
                f"checkpoint kept in {ctx.checkpoint_path}, nothing released; run the same command to go on")
    resumed = f", resumed from step {summary['resumed_from']}" if summary.get("resumed_from") else ""
    return (f"train {name}: done, {took}{resumed} ({steps}/{total}) -> {ctx.generator_path}, "
            f"{ctx.privacy_path.name} and {SUMMARY_FILE} beside it")


def _run_locked(ctx: TrainContext, trainer: Any) -> dict:
    """Train (or find done) and write the summary, under the run's lock."""
    from dpsynth.io import write_json
    from dpsynth.methods.artifacts import writing_to
    from dpsynth.methods.context import SUMMARY_FILE

    t0 = time.perf_counter()
    summary = trainer(ctx)
    summary["wall_seconds"] = round(time.perf_counter() - t0, 2)
    summary["scale"] = ctx.scale
    # the hyperparameters the scale changed, plus what a method reports it cut (GS-WGAN's critics)
    summary["scale_overrides"] = {**ctx.scale_overrides, **summary.get("scale_overrides", {})}
    summary["hparams"] = ctx.experiment.hparams.model_dump(mode="json")  # as run, after the scale's overrides
    if summary["finished"] and not summary["already_done"]:  # every method returns loop.TrainResult
        with writing_to(ctx.out_dir / SUMMARY_FILE):
            write_json(ctx.out_dir / SUMMARY_FILE, summary)
    return summary


def run_train_sweep(sweep_name: str, *, out: str | None, private_out: str | None,
                    params_file: str = DEFAULT_PARAMS, scale: str | None = None, device: str = "auto",
                    progress: bool = True, forward_mode: str = "auto", as_json: bool = False) -> int:
    """Train a sweep's cells together (``sweeps.<name>.train_together``): every cell without a
    finished checkpoint, one batched sweep per shape group, each cell's finished checkpoint left
    where its own `dpsynth train` job releases it from. Writes PRIVATE/sweeps/<name>/group.json,
    the output both DAGs order the cells' train jobs after. Without train_together it only
    writes that file, saying the cells train alone; their jobs do not wait for it.

    A stopped group resumes from its cells' own checkpoints (PRIVATE/runs/<cell>/checkpoint.pt,
    outside the job's output folder, which workflow managers empty before (re-)running a job)."""
    from contextlib import ExitStack

    from dpsynth.config import load_params
    from dpsynth.errors import ConfigError
    from dpsynth.io import write_json
    from dpsynth.locations import RunLock
    from dpsynth.paths import private_run_dir

    out, private_out = resolve_output_roots(out, private_out)
    params = load_params(params_file, scale=scale)
    prepare_cpu(params)
    if sweep_name not in params.sweeps:
        raise ConfigError(f"sweeps.{sweep_name}: no such sweep{did_you_mean(sweep_name, params.sweeps)}")
    sweep, cells = params.sweeps[sweep_name], params.cells_of(sweep_name)
    summaries: dict[str, dict] = {}
    with ExitStack() as locks:
        if sweep.train_together:  # each cell's run directory, as its own `dpsynth train` would lock it
            for cell in cells:
                locks.enter_context(RunLock(private_run_dir(private_out, cell), f"experiment {cell}"))
        _train_cells_together(sweep_name, sweep, cells, summaries, out=out, private_out=private_out,
                              params_file=params_file, scale=scale, device=device, progress=progress,
                              forward_mode=forward_mode)
    group = Path(private_out) / "sweeps" / sweep_name / "group.json"
    trained = sorted(k for k, v in summaries.items() if "trained_together" in v)
    write_json(group, {"sweep": sweep_name, "mode": "together" if sweep.train_together else "alone",
                       "trained_together": trained})
    if not sweep.train_together:
        line = f"train-sweep {sweep_name}: its {len(cells)} cells train alone (train_together is off) -> {group}"
    else:
        done = len(summaries) - len(trained)
        line = (f"train-sweep {sweep_name}: {len(trained)} of {len(cells)} cells trained together"
                + (f", {done} already trained" if done else "")
                + f"; their checkpoints in {Path(private_out) / 'runs'}/<cell>/, released by each cell's "
                  f"`dpsynth train` -> {group}")
    finish(line, {"sweep": sweep_name, "train_together": sweep.train_together, "cells": summaries or cells}, as_json)
    return 0


def _train_cells_together(sweep_name: str, sweep: Any, cells: list[str], summaries: dict[str, dict], *,
                          out: str, private_out: str, params_file: str, scale: str | None, device: str,
                          progress: bool, forward_mode: str) -> None:
    """With train_together: every cell without a finished checkpoint, one batched sweep per shape group (the
    method's own: DP-Sinkhorn's batched sweep, the entropic WGAN's packed trainer)."""
    if not sweep.train_together:
        return
    import importlib

    # both imported by name, so that the DAGs' code dependencies (workflow.dvc) see them; the cells' method picks
    from dpsynth.methods.dp_sinkhorn import together as _dp_sinkhorn  # noqa: F401
    from dpsynth.methods.entropic_wgan import together as _entropic_wgan  # noqa: F401
    from dpsynth.privacy.ledger_store import settled
    from dpsynth.stages.train_ledger import reserve_cells

    ctxs, ledgers = [], []
    for cell in cells:  # each cell as its own `dpsynth train CELL` would run it (its seed, the method's interval)
        ctx, ledger = context_and_ledger(cell, out=out, private_out=private_out, params_file=params_file,
                                         scale=scale, device=device, progress=progress)
        assert ledger is not None
        ctxs.append(ctx)
        ledgers.append(ledger)
    together = importlib.import_module(ctxs[0].experiment.spec.together)
    group_by_shape, resume_step, train_together = together.group_by_shape, together.resume_step, together.train_together
    at = [resume_step(c) for c in ctxs]  # each cell's checkpoint read once here (None: finished)
    todo = [(c, step) for c, step in zip(ctxs, at) if step is not None]
    summaries.update({c.name: {"experiment": c.name, "already_trained": True} for c, step in zip(ctxs, at)
                      if step is None})
    if not todo:
        return
    # every cell's release reserved at once, before the group's first step (each cell's `dpsynth train`
    # adopts its reservation when it releases the cell); a failure after it marks them failed, still counted
    held = reserve_cells(ledgers[0].ledger, [lg for lg, step in zip(ledgers, at) if step is not None],
                         [bool(step) for _, step in todo], sweep_name)
    todo_ctxs = [c for c, _ in todo]
    with settled(ledgers[0].ledger, held, lambda: True):
        for k, idx in enumerate(group_by_shape(todo_ctxs, [step for _, step in todo])):
            group = [todo_ctxs[i] for i in idx]
            t0 = time.perf_counter()
            for s in train_together(group, f"group{k}", forward_mode=forward_mode):
                s["group_wall_seconds"] = round(time.perf_counter() - t0, 2)
                summaries[s["experiment"]] = s
