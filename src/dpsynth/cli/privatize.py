"""`dpsynth privatize EXPERIMENT`: local DP, once per record, before training (Reshetova et al.
(arXiv:2306.09547)); the stage is ``dpsynth.stages.privatize``."""

from __future__ import annotations

import argparse

from dpsynth.cli.common import (
    add_json_arg,
    add_ledger_moved_arg,
    add_params_arg,
    params_from_args,
    params_path,
    refuse_ledger_moved,
)
from dpsynth.stages.privatize import run_privatize


def _handle(args: argparse.Namespace) -> int:
    refuse_ledger_moved(args, "privatize")
    params = params_from_args(args)
    assert params is not None
    return run_privatize(params, args.experiment, params_path(args), as_json=args.json)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("privatize", help="apply an experiment's local DP mechanism once per record")
    p.add_argument("experiment")
    add_params_arg(p)
    add_json_arg(p)
    add_ledger_moved_arg(p)
    p.set_defaults(func=_handle)
