"""`dpsynth <stage> ...`: one subcommand per pipeline stage.

Each stage lives in its own module under ``dpsynth.cli`` exposing
``register(subparsers)``; the handler it installs receives the parsed namespace.
Handlers raise ``DpsynthError`` for user mistakes: ``main`` prints the message
(no traceback) and exits with code 2, so Snakemake/DVC logs show the reason.

Building the parser imports every stage module, so those modules import nothing heavy
(torch, numpy, pydantic, dp_accounting, the data layer) at module level: ``dpsynth --help``
stays well under a second. tests/test_cli_startup.py checks.
"""

from __future__ import annotations

import argparse
import ast
import errno
import os
import importlib
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

from dpsynth.errors import DpsynthError, did_you_mean
from dpsynth.locations import UNWRITABLE

# Stage modules, in the order they appear in --help. A module that is missing
# (a stage not built yet) is simply not offered.
_STAGES = ("config", "experiments", "data", "privacy", "privatize", "warmstart", "train", "sample", "evaluate",
           "w2noise", "report", "workflow", "bench")

_INVALID_CHOICE = re.compile(r"invalid choice: (?P<value>.+?) \(choose from (?P<choices>.*)\)$")


def _choices(text: str) -> list[str]:
    """argparse lists choices as reprs joined by ', ' (Python 3.11), or as plain strings (later)."""
    try:
        parsed = ast.literal_eval(f"[{text}]")
        if all(isinstance(c, str) for c in parsed):
            return parsed
    except (ValueError, SyntaxError):
        pass
    return [c.strip().strip("'\"") for c in text.split(",")]


def suggest_choice(message: str) -> str:
    """argparse's ``invalid choice: 'trian' (choose from ...)`` plus ``; did you mean 'train'?``
    when a choice is close (``errors.did_you_mean``); the message unchanged otherwise."""
    m = _INVALID_CHOICE.search(message)
    if m is None:
        return message
    return message + did_you_mean(_choices(m.group("value"))[0], _choices(m.group("choices")))


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose ``invalid choice`` errors (a misspelt stage, sub-command or
    option value) suggest the closest choice. Sub-parsers inherit the class."""

    def error(self, message: str) -> NoReturn:
        super().error(suggest_choice(message))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="dpsynth",
        description="Differentially private generative models of images: one subcommand per pipeline stage.",
    )
    parser.add_argument("--record-settings", metavar="FILE", default=None,
                        help="once the stage has succeeded, write the settings it read from the parameters file to "
                        "FILE, results/settings/<stage>/<name>.json (each Snakemake job does: its rule declares "
                        "the file as an output, and DVC's stages depend on it)")
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
        if args.record_settings:  # a wrong or unwritable file is refused before the stage runs, not after
            from dpsynth.cli.settings_file import check_settings_file

            check_settings_file(args)
        rc = args.func(args)
        if not rc and args.record_settings:
            from dpsynth.cli.settings_file import record

            record(args)
    except DpsynthError as exc:
        print(f"dpsynth: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # `dpsynth experiments list | head`: the reader left; stop quietly, as other Unix tools do
        # (stdout is pointed at /dev/null so the interpreter's final flush cannot fail again).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            print(f"dpsynth: error: {disk_full_message(exc)}", file=sys.stderr)
        elif exc.errno in UNWRITABLE and exc.filename:
            print(f"dpsynth: error: {unwritable_message(exc)}", file=sys.stderr)
        else:
            raise  # anything else is not the user's environment: keep the traceback
        return 2
    except KeyboardInterrupt:
        print("dpsynth: interrupted", file=sys.stderr)
        return 130
    return int(rc or 0)


def unwritable_message(exc: OSError) -> str:
    """A read-only folder (or one without write permission) is the user's environment too: name it."""
    what = "read-only file system" if exc.errno == errno.EROFS else "permission denied"
    return (f"cannot write {exc.filename}: {what}; choose a writable folder (or make it writable) and run the "
            "command again (existing outputs were left as they were)")


def disk_full_message(exc: OSError) -> str:
    """A full disk (or quota) is the user's environment, not a bug: say which output did not fit.
    Every output is written to a temporary and renamed, so the finished ones are intact."""
    what = "no space left on device" if exc.errno == errno.ENOSPC else "no space left on device (disk quota exceeded)"
    where = f" while writing {exc.filename}" if exc.filename else ""
    return f"{what}{where}; free some space and run the command again (existing outputs were left as they were)"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
