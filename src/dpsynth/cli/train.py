"""`dpsynth train EXPERIMENT`: train one experiment's generator (resumes from its checkpoint);
`dpsynth train-sweep SWEEP`: a sweep's cells together. The stage is ``dpsynth.stages.train``."""

from __future__ import annotations

import argparse

from dpsynth.cli.common import DEVICE_HELP, add_json_arg, add_params_arg, params_path, positive_int, seed_arg
from dpsynth.stages.train import run_train, run_train_sweep


def _train(args: argparse.Namespace) -> int:
    return run_train(args.experiment, out=args.out, private_out=args.private_out, params_file=params_path(args),
                     scale=args.scale, seed=args.seed, device=args.device, progress=not args.no_progress,
                     checkpoint_every=args.checkpoint_every, max_steps_this_run=args.max_steps_this_run,
                     as_json=args.json)


def _train_sweep(args: argparse.Namespace) -> int:
    return run_train_sweep(args.sweep, out=args.out, private_out=args.private_out, params_file=params_path(args),
                           scale=args.scale, device=args.device, progress=not args.no_progress,
                           forward_mode=args.forward_mode, as_json=args.json)


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
    add_json_arg(p)
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
    add_json_arg(s)
    s.set_defaults(func=_train_sweep)
