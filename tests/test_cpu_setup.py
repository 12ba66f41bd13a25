"""A compute stage keeps freed memory for reuse (stages.common.keep_freed_memory).

Without it glibc maps every large tensor afresh and the kernel zero-fills it page by page: the
fresh-clone quick pipeline spent 21 % of its CPU time there. Measured here in child processes (the
allocator setting is process-wide): the page faults of the last 10 of 20 allocate/free cycles of a 64 MB tensor.
"""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

CYCLES = """
import resource, sys, torch
from dpsynth.stages.common import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
faults = []
for _ in range(20):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t = torch.empty(16 * 2**20)  # 64 MB of float32
    t.fill_(1.0)
    del t
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(sum(faults[10:]))  # the steady state: the last 10 cycles
"""


def _faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", CYCLES, mode], capture_output=True, text=True, check=True, timeout=120)
    return int(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt only")
def test_freed_tensors_are_reused_instead_of_mapped_and_faulted_again() -> None:
    # Default malloc: each 64 MB tensor is a new mapping, 16,384 pages faulted per cycle (~164 k over the
    # last 10). Kept: the heap grows over the first few cycles (measured: 5-6), then every cycle reuses
    # the same pages (0 faults measured). The bound, a tenth of the default, leaves room for torch's
    # own bookkeeping and fails if the setting is lost (then both counts are equal).
    default, kept = _faults("default"), _faults("keep")
    assert default > 10 * 16_000, default  # the cost exists on this machine
    assert kept * 10 < default, (kept, default)



POOLS = """
import sys, json
from threadpoolctl import threadpool_info
import numpy  # loads OpenBLAS: its pool exists before the stage pins it
import torch, yaml
from dpsynth.config import parse_params
from dpsynth.stages.common import prepare_cpu
raw = yaml.safe_load(open(sys.argv[1]))
seen = {"default": [p["num_threads"] for p in threadpool_info()]}
for threads in (2, 1):
    prepare_cpu(parse_params({**raw, "threads": threads}, source="test"))
    seen[threads] = {"pools": [p["num_threads"] for p in threadpool_info()], "torch": torch.get_num_threads()}
print(json.dumps(seen))
"""


def test_a_stage_pins_the_blas_and_openmp_pools_to_its_threads() -> None:
    """Two single-thread jobs side by side on two cores must not run four BLAS threads (their spin-waits
    made a smoke job's logistic regression 16x slower). The child starts without the variables the test
    workers set, as a job that Snakemake starts from a shell does."""
    import json
    import os

    from tests.conftest import REPO

    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                            "MKL_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", POOLS, str(REPO / "params.yaml")], env=env,
                         capture_output=True, text=True, check=True, timeout=120)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    if (os.cpu_count() or 1) > 1:
        assert max(seen["default"]) > 1, seen  # the libraries' default: every core
    for threads in (2, 1):
        assert seen[str(threads)] == {"pools": [threads] * len(seen["default"]), "torch": threads}, seen
