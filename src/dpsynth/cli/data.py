"""`dpsynth data prepare|list`: the data stage."""

from __future__ import annotations

import argparse

from dpsynth.cli.common import add_params_arg, params_from_args, sources_from
from dpsynth.errors import DataError
from dpsynth.locations import check_writable_dir


def _prepare(args: argparse.Namespace) -> int:
    from dpsynth.data.prepare import prepare, processed_paths
    from dpsynth.data.registry import DATASETS, unknown_dataset_message

    params = params_from_args(args, required=False)
    src = sources_from(params, root=args.root, extra_dirs=args.source_dir)
    unknown = [name for name in args.dataset if name not in DATASETS]
    if unknown:  # fail on every typo at once, before any work, with the closest registered names
        raise DataError("; ".join(unknown_dataset_message(name) for name in unknown))
    check_writable_dir(src.root, "--root" if args.root else "data root (params data.root)")
    for name in args.dataset:
        info = prepare(name, src)
        npz, _ = processed_paths(src.root, name)
        print(f"{name}: {info['n_train']} train + {info['n_test']} test records of shape "
              f"{tuple(info['record_shape'])} -> {npz} ({info['seconds']:.1f} s)")
    return 0


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
