"""The README's and docs' numbers that the code can give, held to the code (issue 46): the job count of
`make run`, how many of those ask for a GPU, the runs of the pipeline, the methods an experiment may
name, and the privacy mutations. Read from params.yaml, the method registry and the mutation script's
own list -- no pipeline runs (tests/test_workflow_sync.py keeps `pipeline_jobs` equal to Snakemake's DAG)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import yaml

from dpsynth.config import load_params
from dpsynth.config.methods import METHOD_SPECS
from dpsynth.workflow.settings import pipeline_jobs
from tests.conftest import REPO

README = (REPO / "README.md").read_text()
ARCHITECTURE = (REPO / "docs" / "architecture.md").read_text()


@pytest.fixture(scope="module")
def jobs() -> list[tuple[str, str]]:
    return pipeline_jobs(load_params(REPO / "params.yaml"))


def test_the_job_counts_are_the_pipelines(jobs: list[tuple[str, str]]) -> None:
    """Every "N jobs" of the pipeline (not the history's "over N jobs" of earlier commits) is its job
    count: one per (stage, name) plus Snakemake's `all`."""
    said = {int(m.group(1)) for m in re.finditer(r"(?<!over )\b(\d+) jobs\b", README)}
    assert said == {len(jobs) + 1}, said
    # the rules whose paper row in workflow/resources.yaml asks for a GPU, as the README lists them
    table = yaml.safe_load((REPO / "workflow" / "resources.yaml").read_text())
    gpu_rules = [rule for rule, row in table.items() if row.get("paper", {}).get("gpu")]
    listed = r",\s+".join(f"`{rule}`" for rule in gpu_rules[:-1]) + rf"\s+and\s+`{gpu_rules[-1]}`"
    gpu = re.search(rf"the (\d+) {listed}\s+jobs ask for one GPU", README)
    assert gpu and int(gpu.group(1)) == sum(stage in gpu_rules for stage, _ in jobs), listed
    runs = re.search(r"the (\d+) runs of the pipeline", README)
    assert runs and int(runs.group(1)) == len(load_params(REPO / "params.yaml").pipeline_targets())


def test_the_method_list_is_the_registry() -> None:
    m = re.search(r"each with `method` \(([^)]*)\)", README)
    assert m and re.findall(r"`(\w+)`", m.group(1)) == list(METHOD_SPECS)


def test_the_mutation_count_is_the_scripts() -> None:
    listed = subprocess.run([sys.executable, str(REPO / "scripts" / "privacy-mutations.py"), "--list"],
                            capture_output=True, text=True, timeout=60, cwd=REPO)
    assert listed.returncode == 0, listed.stderr
    n = len(listed.stdout.splitlines())
    for name, text in (("README.md", README), ("docs/architecture.md", ARCHITECTURE)):
        said = [int(x) for x in re.findall(r"applies (\d+) mutations", text)]
        assert said == [n], f"{name} says {said} mutations; scripts/privacy-mutations.py --list has {n}"
