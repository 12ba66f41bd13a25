"""What each job asks a cluster for (workflow/resources.yaml; issue 47): GPUs only at the paper scale and
only for the jobs that run on one, none at all with the CPU-only switch `--config gpus=false`, and as many
CPU threads as the job's stage runs. Read from real `snakemake -n -p --forceall` dry runs of the shipped
pipeline on a copy of the workflow: the resources Snakemake hands the SLURM plugin, no job run, no cluster.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

from tests.conftest import venv_bin
from tests.pipelines import copy_workflow, run

# The jobs that ask for a GPU at the paper scale (the `gpu: 1` rows of workflow/resources.yaml).
GPU_RULES = {"train", "train_sweep", "warmstart", "evaluate", "evaluate_real"}  # `--device auto` in each
# The rules whose stage pins torch to params.yaml's `threads` (dpsynth.stages.common.prepare_cpu): their
# jobs must ask for exactly that many CPUs. The data download and the report run one thread.
THREADED_RULES = {"privatize", "warmstart", "train_sweep", "train", "sample", "evaluate", "evaluate_real",
                  "w2_noise"}
# Every dry run sets `threads: 3` (params.yaml's is 1, which could not tell a job's threads from the default).
THREADS = "threads=3"
JOB_RE = re.compile(r"^(?:local)?rule (\w+):$")
SNAPSHOT_RE = re.compile(r"--params (\.snakemake/dpsynth/params-[0-9a-f]{12}\.yaml)")


@pytest.fixture(scope="module")
def workflow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_workflow(tmp_path_factory.mktemp("resources"))


@cache
def _dry_run(d: Path, config: tuple[str, ...]) -> str:
    """One dry run per configuration for the whole module (several tests read the same one)."""
    return run([venv_bin("snakemake"), "-n", "-p", "--forceall", "--cores", "64", "--config", *config], d)


def jobs(d: Path, *config: str) -> list[tuple[str, int, dict[str, str]]]:
    """(rule, threads, resources) of every job of the dry run: its `threads:` line (absent: 1) and its
    `resources:` line as name -> value."""
    found: list[tuple[str, int, dict[str, str]]] = []
    rule, threads, resources = None, 1, {}
    for line in _dry_run(d, config).splitlines() + [""]:
        if m := JOB_RE.match(line):
            rule, threads, resources = m.group(1), 1, {}
        elif rule and line.strip().startswith("threads:"):
            threads = int(line.split(":", 1)[1])
        elif rule and line.strip().startswith("resources:"):
            resources = dict(kv.strip().split("=", 1) for kv in line.split(":", 1)[1].split(","))
        elif rule and not line.strip():
            found.append((rule, threads, resources))
            rule = None
    assert found, _dry_run(d, config)[-3000:]
    return found


def gpus(d: Path, *config: str) -> dict[str, set[int]]:
    """rule -> the GPU counts its jobs ask for (no `gpu` resource: 0)."""
    asked: dict[str, set[int]] = {}
    for rule, _, resources in jobs(d, *config):
        asked.setdefault(rule, set()).add(int(resources.get("gpu", 0)))
    return asked


@pytest.mark.parametrize("scale", ["smoke", "quick"])
def test_no_job_asks_for_a_gpu_at_smoke_or_quick(workflow: Path, scale: str) -> None:
    """Minutes-long jobs on one CPU thread: a GPU request only queues them for a GPU node, or has a cluster
    without GPUs refuse them (before: every train, train_sweep and warmstart job asked for one)."""
    asked = gpus(workflow, f"scale={scale}", THREADS)
    assert GPU_RULES <= set(asked), sorted(asked)  # the jobs that could ask are there
    assert {rule: n for rule, n in asked.items() if n != {0}} == {}


def test_at_paper_exactly_the_gpu_jobs_ask_for_one(workflow: Path) -> None:
    """train, warmstart and both evaluations (`dpsynth evaluate --device auto`: classifiers and Inception on
    the GPU) ask for one GPU each, and train_sweep for a sweep it trains (train_together); sampling, the data,
    the W2 sweeps, privatization, the report and a train_sweep job that only writes its marker (the pipeline's
    quick sweeps train their cells alone) for none. Before `evaluate --device`, the evaluations asked for none."""
    asked = gpus(workflow, "scale=paper", THREADS)
    assert GPU_RULES <= set(asked), sorted(asked)
    trains = GPU_RULES - {"train_sweep"}
    assert {rule: n for rule, n in asked.items() if rule in trains} == {rule: {1} for rule in trains}
    assert {rule: n for rule, n in asked.items() if rule not in trains and n != {0}} == {}
    # a sweep trained together: its train_sweep job trains every cell on one GPU (NeurIPS Table 4's target)
    target = run([venv_bin("snakemake"), "-n", "-p", "--forceall", "neurips_table4", "--config", "scale=paper"],
                 workflow)
    sweep = target[target.index("rule train_sweep:"):].split("\n\n")[0]
    assert "wildcards: sweep=pm_mnist" in sweep and "gpu=1" in sweep, sweep


def test_the_cpu_only_switch_drops_every_gpu_request(workflow: Path) -> None:
    """`--config gpus=false` at the paper scale: the same jobs, none asking for a GPU; and the jobs read the
    same parameter snapshot (the switch is not a parameter: nothing re-runs when it is turned on or off)."""
    with_gpus, without = gpus(workflow, "scale=paper", THREADS), gpus(workflow, "scale=paper", THREADS, "gpus=false")
    assert set(without) == set(with_gpus)
    assert {rule: n for rule, n in without.items() if n != {0}} == {}
    snapshots = [set(SNAPSHOT_RE.findall(_dry_run(workflow, config)))
                 for config in (("scale=paper", THREADS), ("scale=paper", THREADS, "gpus=false"))]
    assert len(snapshots[0]) == 1 and snapshots[0] == snapshots[1], snapshots


def test_a_bad_switch_value_is_refused_naming_it(workflow: Path) -> None:
    import subprocess

    from tests.pipelines import env

    res = subprocess.run([venv_bin("snakemake"), "-n", "--config", "gpus=sometimes"], cwd=workflow,
                         capture_output=True, text=True, timeout=300, env=env())
    assert res.returncode != 0
    assert "--config gpus='sometimes': use gpus=false" in res.stdout + res.stderr, res.stderr[-3000:]


@pytest.mark.parametrize("scale", ["smoke", "quick", "paper"])
def test_each_job_asks_for_the_threads_it_runs(workflow: Path, scale: str) -> None:
    """With `threads: 3` every job whose stage pins torch to params.yaml's threads asks for 3 CPUs (before:
    privatize asked for 1 and ran 3), the others for 1; the same at every scale, because results depend on
    the thread count (it is in each job's fingerprint) and the smoke/quick results must not change."""
    asked: dict[str, set[int]] = {}
    for rule, threads, _ in jobs(workflow, f"scale={scale}", THREADS):
        asked.setdefault(rule, set()).add(threads)
    assert THREADED_RULES <= set(asked), sorted(asked)
    # a W2-vs-noise job trains its runs in `workers` processes of `threads` each (w2_noise.<dataset>.workers)
    from dpsynth.config import load_params

    sweeps = load_params(workflow / "params.yaml").w2_noise
    w2 = asked.pop("w2_noise")
    assert w2 <= {3 * s.workers for s in sweeps.values()} and 3 in w2, w2
    assert asked == {rule: {3} if rule in THREADED_RULES else {1} for rule in asked}
