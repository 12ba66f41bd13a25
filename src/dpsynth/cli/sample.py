"""`dpsynth sample EXPERIMENT`: K synthetic datasets (balanced labels) + a sample grid; the stage is
``dpsynth.stages.sample``."""

from __future__ import annotations

import argparse

from dpsynth.cli.common import add_params_arg, params_from_args, params_path
from dpsynth.stages.sample import run_sample


def _sample(args: argparse.Namespace) -> int:
    return run_sample(params_from_args(args), args.experiment, source=params_path(args), models=args.models,
                      out=args.out, results=args.results, private_out=args.private_out)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sample", help="sample synthetic datasets from a trained generator")
    p.add_argument("experiment")
    add_params_arg(p)
    p.add_argument("--models", default="models")
    p.add_argument("--out", default="data/synthetic")
    p.add_argument("--results", default="results")
    p.add_argument("--private-out", default="private", metavar="DIR",
                   help="the private root (checkpoints, diagnostics); --out and --results may not overlap it "
                        "(default: private)")
    p.set_defaults(func=_sample)
