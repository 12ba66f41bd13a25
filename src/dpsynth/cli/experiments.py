"""`dpsynth experiments list`: every experiment a parameters file defines, sweep cells included.

One line per experiment: its name, method, dataset, whether the pipeline (Snakemake/DVC) trains it
(``Params.pipeline_targets()``: the targets, the GS-WGAN targets and every cell of a sweep target)
and the sweep it is a cell of. ``--json`` prints the same as a list of objects. These are the names
``dpsynth train|sample|evaluate|privatize|warmstart`` accept.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from dpsynth.cli.common import add_params_arg, params_from_args

if TYPE_CHECKING:
    from dpsynth.config import Params


def experiment_rows(params: Params) -> list[dict[str, Any]]:
    """One record per experiment (named ones first, then the sweep cells, in the file's order)."""
    targets = params.pipeline_targets()
    sweep_of = {cell: sname for sname in params.sweeps for cell in params.cells_of(sname)}
    return [{"name": name, "method": exp.method, "dataset": exp.dataset, "pipeline_target": name in targets,
             "sweep": sweep_of.get(name)}
            for name, exp in params.all_experiments().items()]


def _list(args: argparse.Namespace) -> int:
    params = params_from_args(args)
    assert params is not None
    rows = experiment_rows(params)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    header = {"name": "EXPERIMENT", "method": "METHOD", "dataset": "DATASET", "pipeline_target": "TARGET",
              "sweep": "SWEEP"}
    cells = [[r["name"], r["method"], r["dataset"], "target" if r["pipeline_target"] else "-", r["sweep"] or "-"]
             for r in rows]
    table = [[header[k] for k in ("name", "method", "dataset", "pipeline_target", "sweep")], *cells]
    widths = [max(len(row[i]) for row in table) for i in range(4)]
    for row in table:
        print("  ".join(f"{v:<{w}}" for v, w in zip(row[:4], widths)) + f"  {row[4]}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("experiments", help="list the experiments (and sweep cells) of a parameters file")
    es = p.add_subparsers(dest="experiments_cmd", metavar="<list>")
    es.required = True
    ls = es.add_parser("list", help="every experiment, with its method, dataset and whether the pipeline runs it",
                       description="Every experiment the parameters file defines, sweep cells included: "
                                   "name, method, dataset, 'target' when the pipeline trains it, and its sweep.")
    add_params_arg(ls)
    ls.add_argument("--json", action="store_true", help="machine-readable output: a JSON list of objects")
    ls.set_defaults(func=_list)
