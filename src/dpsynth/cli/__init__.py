"""`dpsynth <stage> ...`: one subcommand per pipeline stage.

Each stage lives in its own module under ``dpsynth.cli`` exposing
``register(subparsers)``; the handler it installs receives the parsed namespace.
Handlers raise ``DpsynthError`` for user mistakes: ``main`` prints the message
(no traceback) and exits with code 2, so Snakemake/DVC logs show the reason.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import sys
from collections.abc import Sequence

from dpsynth.errors import DpsynthError

# Stage modules, in the order they appear in --help. A module that is missing
# (a stage not built yet) is simply not offered.
_STAGES = ("config", "data", "privacy", "privatize", "warmstart", "train", "sample", "evaluate", "w2noise", "report",
           "bench")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dpsynth",
        description="Differentially private generative models of images: one subcommand per pipeline stage.",
    )
    sub = parser.add_subparsers(dest="command", metavar="<stage>")
    sub.required = True
    for name in _STAGES:
        try:
            module = importlib.import_module(f"dpsynth.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"dpsynth.cli.{name}":
                continue
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        rc = args.func(args)
    except DpsynthError as exc:
        print(f"dpsynth: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise  # anything else is not a full disk: keep the traceback
        print(f"dpsynth: error: {disk_full_message(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("dpsynth: interrupted", file=sys.stderr)
        return 130
    return int(rc or 0)


def disk_full_message(exc: OSError) -> str:
    """A full disk (or quota) is the user's environment, not a bug: say which output did not fit.
    Every output is written to a temporary and renamed, so the finished ones are intact."""
    what = "no space left on device" if exc.errno == errno.ENOSPC else "no space left on device (disk quota exceeded)"
    where = f" while writing {exc.filename}" if exc.filename else ""
    return f"{what}{where}; free some space and run the command again (existing outputs were left as they were)"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
