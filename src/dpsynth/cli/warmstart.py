"""`dpsynth warmstart EXPERIMENT`: warm-start a GS-WGAN experiment's N_d critics (non-private).

Writes ``{private}/warmstart/{name}/critics.pt`` (+ ``warmstart.json``), ``name`` being the
experiment -- or, for a sweep cell that leaves the critics' settings alone (a sigma sweep), its
base, so the whole sweep reuses one warm start. The artifact records the settings and the data
fingerprint; training refuses a warm start that does not match. ``--print-path`` prints the
directory without training. The critics are trained WITHOUT noise on the private data, so they
live under the private root (default ``private/``) and are never released.
"""

from __future__ import annotations

import argparse
import json
import time

from dpsynth.cli.common import DEVICE_HELP, add_params_arg, seed_arg
from dpsynth.errors import ConfigError


def _warmstart(args: argparse.Namespace) -> int:
    from dpsynth.cli.train import build_context
    from dpsynth.methods.gs_wgan import validate, warmstart_location
    from dpsynth.methods.gswgan_critics import (
        compare_batched_vs_loop,
        data_fingerprint,
        make_shards,
        save_critics,
        warm_start,
    )
    from dpsynth.progress import Progress

    args.checkpoint_every = None  # build_context is shared with `train`; a warm start has no checkpoints
    args.out = "models"  # unused: a warm start writes only under --private-out
    ctx = build_context(args, releases=False)
    if not ctx.experiment.spec.needs_warm_start:
        raise ConfigError(f"experiment {args.experiment!r} uses method {ctx.experiment.method!r}, which trains "
                          "without a critic warm start")
    validate(ctx)
    settings, directory = warmstart_location(ctx)
    if args.print_path:
        print(directory)
        return 0
    if args.chunk is not None and args.chunk < 1:
        raise ConfigError(f"--chunk must be >= 1, got {args.chunk}")
    x, y = ctx.data.x_train, ctx.data.y_train
    shards = make_shards(len(x), settings["n_critics"], settings["batch_size"], settings["seed"])  # errors early
    info: dict = {}
    if args.compare_loop:
        info["batched_vs_loop"] = compare_batched_vs_loop(x, y, ctx.data.num_classes, settings, ctx.device,
                                                          steps=args.compare_loop)
        print(json.dumps({"batched_vs_loop": info["batched_vs_loop"]}), flush=True)
    total = settings["n_critics"] * settings["warmup_steps"]
    bar = Progress(total, f"warmstart {ctx.name}", unit="critic-step", bar=None if ctx.progress else False)
    t0 = time.perf_counter()
    try:
        bank, run = warm_start(x, y, ctx.data.num_classes, settings, ctx.device, chunk=args.chunk, progress=bar.update)
    finally:
        bar.close()
    info.update(run)
    path = save_critics(directory, bank, shards, settings, data_fingerprint(x, y), info)
    print(json.dumps({"experiment": ctx.name, "critics": str(path), "settings": settings,
                      "wall_seconds": round(time.perf_counter() - t0, 2), **info}, indent=2, default=str))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("warmstart", help="warm-start a GS-WGAN experiment's critics (non-private, per shard)")
    p.add_argument("experiment")
    add_params_arg(p)
    p.add_argument("--seed", type=seed_arg, default=None, help="run seed: fixes the shards (default: first of params seeds)")
    p.add_argument("--private-out", default="private", metavar="DIR",
                   help="private directory the critics go to (default: private); never release it")
    p.add_argument("--device", default="auto", help=DEVICE_HELP)  # checked by build_context
    p.add_argument("--chunk", type=int, default=None, help="critics trained at once (default: all; lower it to bound memory)")
    p.add_argument("--compare-loop", type=int, default=0, metavar="STEPS",
                   help="first time STEPS iterations batched vs one critic at a time (recorded in warmstart.json)")
    p.add_argument("--print-path", action="store_true", help="print the warm-start directory and exit")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_warmstart)
