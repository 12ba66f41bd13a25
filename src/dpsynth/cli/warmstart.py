"""`dpsynth warmstart EXPERIMENT`: warm-start a GS-WGAN experiment's N_d critics (non-private); the
stage is ``dpsynth.stages.warmstart``.

Writes ``{private}/warmstart/{name}/critics.pt`` (+ ``warmstart.json``), ``name`` being the
experiment -- or, for a sweep cell that leaves the critics' settings alone (a sigma sweep), its
base, so the whole sweep reuses one warm start. The artifact records the settings and the data
fingerprint; training refuses a warm start that does not match. ``--print-path`` prints the
directory without training. The critics are trained WITHOUT noise on the private data, so they
live under the private root (default ``private/``) and are never released.
"""

from __future__ import annotations

import argparse

from dpsynth.cli.common import DEVICE_HELP, add_json_arg, add_params_arg, params_path, seed_arg
from dpsynth.stages.warmstart import run_warmstart


def _warmstart(args: argparse.Namespace) -> int:
    return run_warmstart(args.experiment, private_out=args.private_out, params_file=params_path(args),
                         scale=args.scale, seed=args.seed, device=args.device, progress=not args.no_progress,
                         chunk=args.chunk, compare_loop=args.compare_loop, print_path=args.print_path,
                         as_json=args.json)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("warmstart", help="warm-start a GS-WGAN experiment's critics (non-private, per shard)")
    p.add_argument("experiment")
    add_params_arg(p)
    p.add_argument("--seed", type=seed_arg, default=None, help="run seed: fixes the shards (default: first of params seeds)")
    p.add_argument("--private-out", default="private", metavar="DIR",
                   help="private directory the critics go to (default: private); never release it")
    p.add_argument("--device", default="auto", help=DEVICE_HELP)  # checked by stages.train.build_context
    p.add_argument("--chunk", type=int, default=None, help="critics trained at once (default: all; lower it to bound memory)")
    p.add_argument("--compare-loop", type=int, default=0, metavar="STEPS",
                   help="first time STEPS iterations batched vs one critic at a time (recorded in warmstart.json)")
    p.add_argument("--print-path", action="store_true", help="print the warm-start directory and exit")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_json_arg(p)
    p.set_defaults(func=_warmstart)
