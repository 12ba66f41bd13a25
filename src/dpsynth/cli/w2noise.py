"""`dpsynth w2noise DATASET`: Reshetova et al. (arXiv:2306.09547) Fig. 5 as a pipeline stage; the stage
is ``dpsynth.stages.w2noise``."""

from __future__ import annotations

import argparse

from dpsynth.cli.common import add_params_arg, params_from_args
from dpsynth.stages.w2noise import run_w2noise


def _w2noise(args: argparse.Namespace) -> int:
    params = params_from_args(args)
    assert params is not None
    return run_w2noise(params, args.dataset, results=args.results, out=args.out, private_out=args.private_out)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("w2noise", help="Reshetova et al. (arXiv:2306.09547) Fig. 5: W2 to the clean data vs "
                                       "Gaussian noise, three losses")
    p.add_argument("dataset")
    add_params_arg(p)
    p.add_argument("--results", default="results", help="writes RESULTS/w2_noise/DATASET.csv (+ .json)")
    p.add_argument("--out", default=None, metavar="CSV", help="write the CSV here instead")
    p.add_argument("--private-out", default="private", metavar="DIR",
                   help="keeps each finished run's row under DIR/w2_noise/DATASET/ so an interrupted sweep resumes "
                        "(default: private)")
    p.set_defaults(func=_w2noise)
