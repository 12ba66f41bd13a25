"""Helpers shared by the CLI stage modules."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import TYPE_CHECKING

from dpsynth.config import Params, load_params
from dpsynth.data.prepare import Sources
from dpsynth.errors import ConfigError

if TYPE_CHECKING:
    import torch

DEFAULT_PARAMS = "params.yaml"


def add_params_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--params", default=None, metavar="FILE",
                   help=f"parameters file (default: ./{DEFAULT_PARAMS} when present)")
    p.add_argument("--scale", choices=("smoke", "quick", "paper"), default=None,
                   help="override the scale in the parameters file")


def params_from_args(args: argparse.Namespace, required: bool = True) -> Params | None:
    """Load the parameters file named by ``--params`` (or ./params.yaml)."""
    path = args.params or DEFAULT_PARAMS
    if args.params is None and not Path(path).is_file() and not required:
        return None
    return load_params(path, scale=getattr(args, "scale", None))


def sources_from(params: Params | None, root: str | None = None, extra_dirs: list[str] | None = None) -> Sources:
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
