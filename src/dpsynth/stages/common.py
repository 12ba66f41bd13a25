"""Helpers shared by the stage modules: the experiment a name refers to, how a compute stage sets
the CPU up (torch's thread count, malloc reusing freed memory), the device a ``--device`` value names.

Importing this module must stay cheap (the CLI imports it to build its parser): torch and
``dpsynth.config`` are imported inside the functions that use them.
"""

from __future__ import annotations

import ctypes
import json
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from dpsynth.errors import ConfigError, did_you_mean

if TYPE_CHECKING:
    import torch

    from dpsynth.config import Experiment, Params

#: The parameters file a stage reads when none is named.
DEFAULT_PARAMS = "params.yaml"
#: The workspace's folders (relative to where a stage runs) that re-runs and `make clean-results` empty: the
#: release ledger may lie in none of them (``ReleaseLedger.check``), nor in a stage's own output folders.
CLEANED_FOLDERS = (("results", "results"), ("private", "private"), ("models", "models"), ("logs", "logs"),
                   (".snakemake", ".snakemake"), ("benchmarks/jobs", "benchmarks/jobs"))


def finish(line: str, record: object, as_json: bool = False) -> None:
    """A stage's last output: one line a person reads, saying what was written where -- or, with
    ``--json``, the record as JSON for a script. The full record is also in the stage's own file
    (``train_summary.json``, ``warmstart.json``, ...): dozens of JSON lines on a terminal hid where
    the result went (issue 46)."""
    print(json.dumps(record, indent=2, sort_keys=True, default=str) if as_json else line, flush=True)


def unknown_experiment_message(name: str, known: Iterable[str], source: str = DEFAULT_PARAMS) -> str:
    """``unknown experiment 'x' in params.yaml; did you mean 'y'? (dpsynth experiments list shows all)``."""
    return f"unknown experiment {name!r} in {source}{did_you_mean(name, known)} (dpsynth experiments list shows all)"


def get_experiment(params: Params, name: str, source: str = DEFAULT_PARAMS) -> Experiment:
    """The experiment (or sweep cell) called ``name``; a typo gets the closest configured names."""
    experiments = params.all_experiments()
    if name not in experiments:
        raise ConfigError(unknown_experiment_message(name, experiments, source))
    return experiments[name]


def prepare_cpu(params: Params) -> None:
    """Set a compute stage up the same way under every runner (Snakemake, DVC, SLURM, a shell):
    torch's CPU threads pinned to the configured count (results depend on it, so not whatever the
    machine offers), the BLAS and OpenMP pools that numpy, SciPy and scikit-learn use pinned to it
    too, and freed memory kept for reuse (:func:`keep_freed_memory`).

    The pools matter because Snakemake runs ``--cores`` jobs of ``threads`` each side by side: left
    at OpenBLAS's default (every core) two jobs on two cores run four BLAS threads, which spin while
    their peers are descheduled. Measured on a loaded 2-core machine, the logistic regression of a
    smoke evaluate job (500 images): 3.9 s of CPU with one BLAS thread, 63 s with two."""
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(params.threads)
    threadpool_limits(limits=params.threads)  # applied for the rest of the process
    keep_freed_memory()


#: glibc mallopt(3) parameters (malloc.h): M_TRIM_THRESHOLD and M_MMAP_MAX.
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4


def keep_freed_memory() -> bool:
    """Ask glibc's malloc to serve every allocation from its heap and keep freed memory there.

    By default each large tensor (above malloc's mmap threshold, at most 32 MB) is a fresh mmap
    that the kernel zero-fills page by page and that free() unmaps: a CPU training or evaluation
    loop re-allocates the same activations every step, so the kernel faulted ~1.3 TB of pages in
    one quick pipeline (334 M minor faults, 21 % of its CPU time spent in the kernel). With
    mmap off and trimming at its largest, freed blocks are reused; the numbers computed do not
    change. Measured on one quick evaluate job (`dpsynth evaluate dps_mnist`, 2-core CPU):
    140 s -> 103 s, kernel time 29 s -> 4.8 s, 9.5 M -> 0.7 M page faults, identical metrics.
    Returns False (and changes nothing) where the C library is not glibc (macOS, musl)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


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
