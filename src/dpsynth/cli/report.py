"""`dpsynth report`: every table (md/csv/tex) and figure from the runs' metrics.json."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from dpsynth.cli.common import add_params_arg, params_from_args


def _report(args: argparse.Namespace) -> int:
    from dpsynth.report.figures import make_figures
    from dpsynth.report.ledger import LEDGER, build_ledger
    from dpsynth.report.tables import BuiltTable, build_tables, write_index, write_table

    t0 = time.perf_counter()
    params = params_from_args(args)
    assert params is not None
    results = Path(args.results)
    tables_dir = Path(args.tables) if args.tables else results / "tables"
    figures_dir = Path(args.figures) if args.figures else results / "figures"
    built = build_tables(params, results)  # every table validated before anything is written
    frame, notes = build_ledger(results)
    built[LEDGER] = BuiltTable(LEDGER, "Privacy ledger: every released model per dataset, composed",
                               "ours (no paper counterpart)", frame, notes)
    for b in built.values():
        write_table(b, tables_dir, params.scale)
        print(f"report: {b.name}: {len(b.frame)} rows ({len(b.runs)} with our runs) -> {tables_dir / b.name}.{{md,csv,tex}}")
    write_index(built, tables_dir, params.scale)
    figures = make_figures(params, {k: b for k, b in built.items() if k != LEDGER}, results, figures_dir)
    print(f"report: {len(figures)} figure files -> {figures_dir} ({time.perf_counter() - t0:.1f} s)")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="tables (md/csv/tex) and figures: ours beside the papers' numbers")
    add_params_arg(p)
    p.add_argument("--results", default="results", help="folder holding runs/{experiment}/metrics.json")
    p.add_argument("--tables", default=None, metavar="DIR", help="output folder (default: RESULTS/tables)")
    p.add_argument("--figures", default=None, metavar="DIR", help="output folder (default: RESULTS/figures)")
    p.set_defaults(func=_report)
