"""`dpsynth train EXPERIMENT`: train one experiment's generator (resumes from its checkpoint)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from dpsynth.cli.common import (
    DEVICE_HELP,
    add_params_arg,
    apply_threads,
    get_experiment,
    params_from_args,
    params_path,
    positive_int,
    resolve_device,
    seed_arg,
)
from dpsynth.errors import DpsynthError


#: Where `train` writes when no --out / --private-out is given (the pipeline's layout).
DEFAULT_OUT, DEFAULT_PRIVATE = "models", "private"


def resolve_output_roots(args: argparse.Namespace) -> None:
    """Fill ``--out`` / ``--private-out``. A run released elsewhere (``--out``) must say where its
    private files go too: defaulting them to ./private would let its checkpoint replace that of the
    default run of the same name (and the other way round)."""
    if args.out is None:
        args.out = DEFAULT_OUT
    if args.private_out is None:
        if Path(args.out) != Path(DEFAULT_OUT):
            raise DpsynthError(f"--out {args.out} needs --private-out DIR as well: this run's checkpoint and "
                               f"diagnostics would otherwise go to ./{DEFAULT_PRIVATE}, replacing those of the "
                               "default run of the same name")
        args.private_out = DEFAULT_PRIVATE


def build_context(args: argparse.Namespace, *, releases: bool = True):
    """The run's TrainContext. Every folder it will write (``--out`` when it ``releases``, and
    ``--private-out``) is checked before any private record is read."""
    import numpy as np
    import torch

    from dpsynth.config import resolve_run
    from dpsynth.data.dataset import Dataset, load_processed, subset_indices
    from dpsynth.locations import check_writable_dir
    from dpsynth.methods.context import TrainContext
    from dpsynth.paths import private_run_dir, warmstart_dir
    from dpsynth.privacy.randomness import NoiseSource

    device = resolve_device(args.device)  # before any work: a bad --device fails in a second, clearly
    if releases:
        check_writable_dir(args.out, "--out")
    check_writable_dir(args.private_out, "--private-out")
    params = params_from_args(args)
    apply_threads(params)
    get_experiment(params, args.experiment, params_path(args))  # an unknown name: the closest configured ones
    run = resolve_run(params, args.experiment, seed=args.seed)
    if run.experiment.local is not None and not run.data.is_file():
        raise DpsynthError(f"{run.data}: privatized data not found (run `dpsynth privatize {args.experiment}`)")
    full = load_processed(run.data)
    idx = subset_indices(len(full.x_train), run.preset.train_subset, run.seed)
    x, y = (full.x_train, full.y_train) if idx is None else (full.x_train[idx], full.y_train[idx])
    # The trainer never sees the test split: it is for the evaluation stage only.
    data = Dataset(full.name, x, y, full.x_test[:0], full.y_test[:0], full.num_classes)
    np.random.seed(run.seed)
    torch.manual_seed(run.seed)
    return TrainContext(
        name=args.experiment, experiment=run.experiment, preset=run.preset, scale=run.scale, seed=run.seed,
        data=data, out_dir=Path(args.out) / args.experiment, privacy_plan=run.privacy,
        device=device, progress=not args.no_progress, scale_overrides=run.overrides,
        warmstart_dir=warmstart_dir(args.private_out, run.warmstart) if run.warmstart is not None else None,
        noise=NoiseSource(params.privacy_noise, run.seed if params.privacy_noise == "reproducible" else None),
        private_dir=private_run_dir(args.private_out, args.experiment),
        **({} if args.checkpoint_every is None else {"checkpoint_every": args.checkpoint_every}),
        # getattr: `warmstart` and tests build this Namespace without the train-only flag
        max_steps_this_run=getattr(args, "max_steps_this_run", None),
    )


def _train(args: argparse.Namespace) -> int:
    from dpsynth.locations import RunLock
    from dpsynth.methods.context import SUMMARY_FILE

    resolve_output_roots(args)
    ctx = build_context(args)
    # _train writes the summary after the method returns: a finished run lacking it is not done
    ctx.also_released = (ctx.out_dir / SUMMARY_FILE,)
    trainer = ctx.experiment.spec.load_trainer()
    with RunLock(ctx.private_dir, f"experiment {ctx.name}"):
        summary = _run_locked(ctx, trainer)
    print(json.dumps(summary, indent=2, sort_keys=True, default=str))
    return 0


def _run_locked(ctx, trainer) -> dict:
    """Train (or find done) and write the summary, under the run's lock."""
    from dpsynth.io import write_json
    from dpsynth.methods.artifacts import writing_to
    from dpsynth.methods.context import SUMMARY_FILE

    t0 = time.perf_counter()
    summary = trainer(ctx)
    summary["wall_seconds"] = round(time.perf_counter() - t0, 2)
    summary["scale"] = ctx.scale
    summary["scale_overrides"] = ctx.scale_overrides
    summary["hparams"] = ctx.experiment.hparams.model_dump(mode="json")  # as run, after the scale's overrides
    if summary["finished"] and not summary["already_done"]:  # every method returns loop.TrainResult
        with writing_to(ctx.out_dir / SUMMARY_FILE):
            write_json(ctx.out_dir / SUMMARY_FILE, summary)
    return summary


def _train_sweep(args: argparse.Namespace) -> int:
    """Train a sweep's cells together (``sweeps.<name>.train_together``): every cell without a
    finished checkpoint, one batched sweep per shape group, each cell's finished checkpoint left
    where its own `dpsynth train` job releases it from. Writes PRIVATE/sweeps/<name>/group.json,
    the output both DAGs order the cells' train jobs after. Without train_together it only
    writes that file (the cells train alone), so the DAG has one shape either way.

    The group checkpoints live in PRIVATE/sweep_groups/<name>/, outside the job's output folder,
    which workflow managers empty before (re-)running a job."""
    from contextlib import ExitStack

    from dpsynth.cli.common import did_you_mean
    from dpsynth.errors import ConfigError
    from dpsynth.io import write_json
    from dpsynth.locations import RunLock
    from dpsynth.paths import private_run_dir

    resolve_output_roots(args)
    params = params_from_args(args)
    apply_threads(params)
    if args.sweep not in params.sweeps:
        raise ConfigError(f"sweeps.{args.sweep}: no such sweep{did_you_mean(args.sweep, params.sweeps)}")
    sweep, cells = params.sweeps[args.sweep], params.cells_of(args.sweep)
    summaries: dict[str, dict] = {}
    with ExitStack() as locks:
        if sweep.train_together:  # each cell's run directory, as its own `dpsynth train` would lock it
            for cell in cells:
                locks.enter_context(RunLock(private_run_dir(args.private_out, cell), f"experiment {cell}"))
        _train_cells_together(args, sweep, cells, summaries)
    write_json(Path(args.private_out) / "sweeps" / args.sweep / "group.json", {
        "sweep": args.sweep, "mode": "together" if sweep.train_together else "alone",
        "trained_together": sorted(k for k, v in summaries.items() if "trained_together" in v)})
    print(json.dumps({"sweep": args.sweep, "train_together": sweep.train_together, "cells": summaries or cells},
                     indent=2, sort_keys=True, default=str))
    return 0


def _train_cells_together(args: argparse.Namespace, sweep, cells: list[str], summaries: dict[str, dict]) -> None:
    """With train_together: every cell without a finished checkpoint, one batched sweep per shape group."""
    if not sweep.train_together:
        return
    from dpsynth.methods.dp_sinkhorn.together import cell_done, group_by_shape, train_together

    ctxs = []
    for cell in cells:
        ns = argparse.Namespace(**{**vars(args), "experiment": cell, "seed": None, "checkpoint_every": None,
                                   "max_steps_this_run": None})
        ctxs.append(build_context(ns))
    todo = [c for c in ctxs if not cell_done(c)]
    for c in ctxs:
        if all(c is not t for t in todo):
            summaries[c.name] = {"experiment": c.name, "already_trained": True}
    for k, idx in enumerate(group_by_shape(todo) if todo else []):
        group = [todo[i] for i in idx]
        t0 = time.perf_counter()
        for s in train_together(group, Path(args.private_out) / "sweep_groups" / args.sweep, f"group{k}",
                                forward_mode=args.forward_mode):
            s["group_wall_seconds"] = round(time.perf_counter() - t0, 2)
            summaries[s["experiment"]] = s


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train an experiment's generator")
    p.add_argument("experiment")
    add_params_arg(p)
    p.add_argument("--seed", type=seed_arg, default=None,
                   help="training seed >= 0 (default: the experiment's seed, else the first of params seeds)")
    p.add_argument("--out", default=None, help="models directory, what may be released (default: models)")
    p.add_argument("--private-out", default=None, metavar="DIR",
                   help="private directory: checkpoints, diagnostics, warm starts; never release it (default: "
                        "private; required with --out, so no run can replace another's checkpoint)")
    p.add_argument("--device", default="auto", help=DEVICE_HELP)
    p.add_argument("--no-progress", action="store_true", help="no progress bar (logs only)")
    p.add_argument("--checkpoint-every", type=positive_int, default=None, metavar="N",
                   help="write a resume checkpoint every N steps (default: the method's)")
    p.add_argument("--max-steps-this-run", type=positive_int, default=None, metavar="N",
                   help="stop after N steps of this run, for timed slices and benchmarks: the run "
                        "checkpoints (nothing is released) and a later `dpsynth train` resumes it")
    p.set_defaults(func=_train)

    s = sub.add_parser("train-sweep", help="train a sweep's cells together on one device (sweeps.<name>.train_together)")
    s.add_argument("sweep")
    add_params_arg(s)
    s.add_argument("--out", default=None, help="models directory (each cell's `dpsynth train` releases there; "
                   "default: models)")
    s.add_argument("--private-out", default=None, metavar="DIR",
                   help="private directory: the cells' checkpoints, PRIVATE/sweeps/<sweep>/group.json (default: "
                        "private; required with --out)")
    s.add_argument("--device", default="auto", help=DEVICE_HELP)
    s.add_argument("--no-progress", action="store_true", help="no progress lines")
    s.add_argument("--forward-mode", choices=("auto", "vmap", "loop"), default="auto",
                   help="stacked generator forward: vmap (grouped convolutions, GPU) or loop (CPU); auto picks")
    s.set_defaults(func=_train_sweep)
