"""`dpsynth report`: every table (md/csv/tex) and figure from the runs' metrics.json; the stage is
``dpsynth.stages.report``."""

from __future__ import annotations

import argparse

from dpsynth.cli.common import add_ledger_moved_arg, add_params_arg, params_from_args, refuse_ledger_moved
from dpsynth.stages.report import run_report


def _report(args: argparse.Namespace) -> int:
    refuse_ledger_moved(args, "report")
    params = params_from_args(args)
    assert params is not None
    return run_report(params, results=args.results, models=args.models, tables=args.tables, figures=args.figures,
                      private_out=args.private_root)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="tables (md/csv/tex) and figures: ours beside the papers' numbers")
    add_params_arg(p)
    p.add_argument("--results", default="results", help="folder holding runs/{experiment}/metrics.json")
    p.add_argument("--models", default="models", help="folder holding {experiment}/train_log.csv (training curves)")
    p.add_argument("--tables", default=None, metavar="DIR",
                   help="output folder, replaced as a whole (default: RESULTS/tables)")
    p.add_argument("--figures", default=None, metavar="DIR",
                   help="output folder, replaced as a whole (default: RESULTS/figures)")
    p.add_argument("--private-root", default="private", metavar="DIR",
                   help="the private root the evaluate jobs wrote to: GS-WGAN's training-split "
                        "IS and FID are read from there for a dataset data.public declares public (default: private)")
    add_ledger_moved_arg(p)
    p.set_defaults(func=_report)
