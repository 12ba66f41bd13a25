"""`dpsynth report`: every table (md/csv/tex) and figure from the runs' metrics.json; the stage is
``dpsynth.stages.report``."""

from __future__ import annotations

import argparse

from dpsynth.cli.common import add_ledger_moved_arg, add_params_arg, params_from_args, refuse_ledger_moved
from dpsynth.stages.report import run_report


def check_private_root(root: str) -> None:
    """Refuse, in one line naming what is wrong with it, a ``--private-root`` that cannot be read as a folder: a
    file, a symbolic-link loop or dangling link, an unreadable folder. (Read later, each of these surfaced as a
    kept statistic's "not readable JSON; re-run dpsynth evaluate", which sent the user the wrong way.) A folder
    that does not exist is fine: nothing was kept there, and the tables say so."""
    import errno
    import os

    from dpsynth.errors import DpsynthError

    why = None
    try:
        st = os.stat(root)
    except FileNotFoundError:
        why = None if not os.path.islink(root) else "a symbolic link that leads nowhere (dangling)"
    except OSError as exc:
        why = "a symbolic link loop" if exc.errno == errno.ELOOP else \
            f"cannot be read ({os.strerror(exc.errno) if exc.errno else exc})"
    else:
        import stat

        if not stat.S_ISDIR(st.st_mode):
            why = "a file, not a folder"
        else:
            try:
                os.listdir(root)
            except OSError as exc:
                why = f"a folder that cannot be read ({os.strerror(exc.errno) if exc.errno else exc})"
    if why is not None:
        raise DpsynthError(f"--private-root {root}: is {why}; give the folder the evaluate jobs wrote their private "
                           "files to (default: private), readable by you (nothing was read or written)")


def _report(args: argparse.Namespace) -> int:
    refuse_ledger_moved(args, "report")
    check_private_root(args.private_root)
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
