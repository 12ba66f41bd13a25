"""Helpers shared by the CLI stage modules.

Importing this module (and every stage module) must stay cheap: ``dpsynth --help`` builds the
whole parser, so torch, numpy, pydantic (``dpsynth.config``), dp_accounting and the data layer
are imported inside the functions that use them, never at module level
(tests/test_cli_startup.py checks).
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from dpsynth.errors import ConfigError

if TYPE_CHECKING:
    import torch

    from dpsynth.config import Experiment, Params
    from dpsynth.data.prepare import Sources

DEFAULT_PARAMS = "params.yaml"


def add_params_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--params", default=None, metavar="FILE",
                   help=f"parameters file (default: ./{DEFAULT_PARAMS} when present)")
    p.add_argument("--scale", choices=("smoke", "quick", "paper"), default=None,
                   help="override the scale in the parameters file")


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


def did_you_mean(name: str, known: Iterable[str], n: int = 1) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``known`` (difflib), or ``""`` when none is close."""
    close = difflib.get_close_matches(name, [str(k) for k in known], n=n)
    if not close:
        return ""
    return f"; did you mean {' or '.join(repr(c) for c in close)}?"


def unknown_experiment_message(name: str, known: Iterable[str], source: str = DEFAULT_PARAMS) -> str:
    """``unknown experiment 'x' in params.yaml; did you mean 'y'? (dpsynth experiments list shows all)``."""
    return f"unknown experiment {name!r} in {source}{did_you_mean(name, known)} (dpsynth experiments list shows all)"


def get_experiment(params: Params, name: str, source: str = DEFAULT_PARAMS) -> Experiment:
    """The experiment (or sweep cell) called ``name``; a typo gets the closest configured names."""
    experiments = params.all_experiments()
    if name not in experiments:
        raise ConfigError(unknown_experiment_message(name, experiments, source))
    return experiments[name]


def sources_from(params: Params | None, root: str | None = None, extra_dirs: list[str] | None = None) -> Sources:
    from dpsynth.data.prepare import Sources

    data = params.data if params is not None else None
    return Sources(
        root=Path(root or (data.root if data else "data")),
        local_dirs=tuple(Path(d) for d in (extra_dirs or []) + (list(data.local_dirs) if data else [])),
        celeba_dir=Path(data.celeba_dir) if data and data.celeba_dir else None,
    )


def apply_threads(params: Params) -> None:
    """Pin torch's CPU threads to the configured count: results depend on it, so every runner
    (Snakemake, DVC, a shell) must use the same number, not whatever the machine offers."""
    import torch

    torch.set_num_threads(params.threads)


DEVICE_HELP = "auto (a GPU when there is one), cpu, cuda, cuda:N or mps"


def available_devices() -> list[str]:
    """The --device values that work on this machine."""
    import torch

    found = ["auto", "cpu"]
    if torch.cuda.is_available():
        found += ["cuda", *(f"cuda:{i}" for i in range(torch.cuda.device_count()))]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    return found


def resolve_device(value: str, option: str = "--device") -> torch.device:
    """Check a device option before any work: torch only fails on first use (a RuntimeError
    traceback mid-run). ``auto`` picks the first CUDA device when there is one, else the CPU."""
    import torch

    text = value.strip().lower()
    have = available_devices()
    if text == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    m = re.fullmatch(r"(cpu|cuda|mps)(?::(\d+))?", text)
    if m is None:
        raise ConfigError(f"{option} {value!r}: unknown device; use {DEVICE_HELP} "
                          f"(available here: {', '.join(have)})")
    kind, index = m.group(1), None if m.group(2) is None else int(m.group(2))
    if kind == "cpu" and index not in (None, 0):
        raise ConfigError(f"{option} {value!r}: there is one CPU device; use cpu (available here: {', '.join(have)})")
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"{option} {value!r}: CUDA is not available on this machine "
                              f"(available here: {', '.join(have)})")
        count = torch.cuda.device_count()
        if index is not None and index >= count:
            raise ConfigError(f"{option} {value!r}: no CUDA device {index}; this machine has {count} "
                              f"(available here: {', '.join(have)})")
    if kind == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise ConfigError(f"{option} {value!r}: Apple MPS is not available on this machine "
                              f"(available here: {', '.join(have)})")
        if index not in (None, 0):
            raise ConfigError(f"{option} {value!r}: there is one MPS device; use mps "
                              f"(available here: {', '.join(have)})")
    return torch.device(kind if index is None else f"{kind}:{index}")


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
