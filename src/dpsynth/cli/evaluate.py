"""`dpsynth evaluate EXPERIMENT` (synthetic data) or `dpsynth evaluate --real DATASET` (the real-data row);
the stage is ``dpsynth.stages.evaluate``."""

from __future__ import annotations

import argparse

from dpsynth.cli.common import add_params_arg, params_from_args, params_path
from dpsynth.errors import DpsynthError
from dpsynth.stages.common import DEVICE_HELP, resolve_device
from dpsynth.stages.evaluate import run_evaluate


def _evaluate(args: argparse.Namespace) -> int:
    resolve_device(args.device)  # before params and data are read: a bad --device fails in a second
    return run_evaluate(params_from_args(args), args.experiment, real=args.real, source=params_path(args),
                        models=args.models, synthetic=args.synthetic, results=args.results,
                        private_out=args.private_out, device=args.device)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evaluate", help="classifiers + FID on synthetic data (or the real-data row)")
    p.add_argument("experiment", nargs="?")
    p.add_argument("--real", metavar="DATASET", help="evaluate the classifiers trained on the real training split")
    add_params_arg(p)
    p.add_argument("--models", default="models")
    p.add_argument("--synthetic", default="data/synthetic")
    p.add_argument("--results", default="results")
    p.add_argument("--device", default="auto",
                   help=f"{DEVICE_HELP}: the MLP/CNN classifiers, Inception (FID, KID, FID-infinity) and GS-WGAN's "
                        "IS network; logistic regression and the scikit-learn zoo stay on the CPU")
    p.add_argument("--private-out", default="private", metavar="DIR",
                   help="private root: the cached FID statistics of the real test split (default: private)")

    def dispatch(args: argparse.Namespace) -> int:
        if bool(args.real) == bool(args.experiment):
            raise DpsynthError("give exactly one of EXPERIMENT or --real DATASET")
        return _evaluate(args)

    p.set_defaults(func=dispatch)
