"""Helpers shared by the CLI stage modules."""

from __future__ import annotations

import argparse
from pathlib import Path

from dpsynth.config import Params, load_params
from dpsynth.data.prepare import Sources

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
