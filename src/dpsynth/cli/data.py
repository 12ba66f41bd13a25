"""`dpsynth data prepare|list`: the data stage (``dpsynth.stages.data``)."""

from __future__ import annotations

import argparse

from dpsynth.cli.common import add_params_arg, params_from_args
from dpsynth.stages.data import run_prepare


def _prepare(args: argparse.Namespace) -> int:
    return run_prepare(params_from_args(args, required=False), args.dataset, root=args.root,
                       source_dirs=args.source_dir)


def _list(args: argparse.Namespace) -> int:
    from dpsynth.data.registry import DATASETS

    for name, spec in sorted(DATASETS.items()):
        print(f"{name:24s} {spec.num_classes:3d} classes  {str(spec.shape):12s} {spec.description}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help="prepare datasets")
    ds = p.add_subparsers(dest="data_cmd", metavar="<prepare|list>")
    ds.required = True
    prep = ds.add_parser("prepare", help="download/verify/convert to data/processed/{dataset}.npz")
    prep.add_argument("dataset", nargs="+", help="registered dataset name(s); see `dpsynth data list`")
    add_params_arg(prep)
    prep.add_argument("--root", default=None, help="data root (default: params data.root or ./data)")
    prep.add_argument("--source-dir", action="append", default=[], metavar="DIR",
                      help="extra local directory holding raw files (searched before downloading)")
    prep.set_defaults(func=_prepare)
    ls = ds.add_parser("list", help="list registered datasets")
    ls.set_defaults(func=_list)
