"""Helpers shared by the CLI stage modules: the options every stage takes and their argparse types.

What a stage does once its arguments are parsed lives in ``dpsynth.stages`` (the experiment a name
refers to, threads, devices: ``dpsynth.stages.common``).

Importing this module (and every stage module) must stay cheap: ``dpsynth --help`` builds the
whole parser, so torch, numpy, pydantic (``dpsynth.config``), dp_accounting and the data layer
are imported inside the functions that use them, never at module level
(tests/test_cli_startup.py checks).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from dpsynth.stages.common import DEFAULT_PARAMS, DEVICE_HELP

if TYPE_CHECKING:
    from dpsynth.config import Params

__all__ = ["DEFAULT_PARAMS", "DEVICE_HELP", "add_json_arg", "add_ledger_moved_arg", "add_params_arg", "int_at_least",
           "params_from_args", "params_path", "positive_int", "refuse_ledger_moved", "seed_arg"]


#: config.base.ScaleName's values, spelt out here so parsing a command imports no pydantic
#: (tests/test_config.py holds the two equal)
SCALE_CHOICES = ("smoke", "quick", "paper", "paper_cpu", "paper_gpu")


def add_params_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--params", default=None, metavar="FILE",
                   help=f"parameters file (default: ./{DEFAULT_PARAMS} when present)")
    p.add_argument("--scale", choices=SCALE_CHOICES, default=None,
                   help="override the scale in the parameters file")


def add_json_arg(p: argparse.ArgumentParser) -> None:
    """``--json``: the stage's record on stdout instead of its one human line (``stages.common.finish``)."""
    p.add_argument("--json", action="store_true",
                   help="print the stage's record as JSON instead of one line saying what was written where")


def add_ledger_moved_arg(p: argparse.ArgumentParser) -> None:
    """``--private-out``, which ``privatize`` and ``report`` took only to find the release ledger under it: the
    ledger now lives in one folder outside every workspace (``ledger_dir``), so the option is refused in one
    line saying where the ledger is, instead of being taken for a folder to write in (hidden from --help)."""
    p.add_argument("--private-out", dest="ledger_moved", default=None, help=argparse.SUPPRESS)


def refuse_ledger_moved(args: argparse.Namespace, stage: str) -> None:
    """Refuse ``--private-out`` (``add_ledger_moved_arg``) with one line, before anything is read."""
    if args.ledger_moved is None:
        return
    from dpsynth.errors import DpsynthError

    raise DpsynthError(f"--private-out {args.ledger_moved!r}: `dpsynth {stage}` takes no private folder; the release "
                       "ledger it used it for lives in one folder shared by every workspace (params.yaml ledger_dir, "
                       "or $DPSYNTH_LEDGER; see docs/privacy.md): drop the option")


def params_from_args(args: argparse.Namespace, required: bool = True) -> Params | None:
    """Load the parameters file named by ``--params`` (or ./params.yaml)."""
    from dpsynth.config import load_params

    path = params_path(args)
    if args.params is None and not Path(path).is_file() and not required:
        return None
    return load_params(path, scale=getattr(args, "scale", None))


def params_path(args: argparse.Namespace) -> str:
    """The parameters file a command reads: ``--params`` or ./params.yaml."""
    return getattr(args, "params", None) or DEFAULT_PARAMS


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number >= ``minimum``, refused in argparse's one line otherwise."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


#: A seed is >= 0 (numpy refuses a negative seed with a traceback).
seed_arg = int_at_least(0)
#: Step counts and intervals are >= 1 (an interval of 0 would never checkpoint; a slice of 0 steps times nothing).
positive_int = int_at_least(1)
