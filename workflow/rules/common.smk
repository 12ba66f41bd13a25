# Shared helpers: validated parameters, the configuration file every job reads, fingerprints.
import hashlib
import os
import shlex
import sys
from pathlib import Path

import yaml

from dpsynth.config import check_yaml_file, parse_params
from dpsynth.data.registry import DATASETS
from dpsynth.fingerprint import fingerprint
from dpsynth.workflow.settings import write_settings

# Snakemake read params.yaml (and any --configfile) itself, with a YAML loader that silently keeps
# the last of two equal keys; refuse duplicates in those files as the CLI's loader does.
for _configfile in getattr(workflow, "configfiles", None) or ["params.yaml"]:
    check_yaml_file(_configfile)

# `config` is params.yaml plus any --config overrides; validate it exactly as the CLI does.
PARAMS = parse_params(config, source="params.yaml (as seen by Snakemake)")
EXPERIMENTS = PARAMS.all_experiments()
# pipeline.experiments + every cell of pipeline.sweeps (editing a sweep's lists edits this).
TARGETS = list(PARAMS.pipeline_targets())


def _write_resolved(cfg: dict) -> str:
    """Every job reads exactly the configuration validated above -- params.yaml plus --config and
    --configfile overrides -- from a snapshot named by its content: a later edit of params.yaml, or
    another `snakemake -n --config ...` in this directory, cannot change what a running pipeline's
    jobs read. It reaches the jobs as the `run_params` param, a Path: Snakemake's params trigger
    ignores values it cannot represent (not str, int, list, ...), so jobs re-run on their
    fingerprint, not on the snapshot's name (tests/test_dvc.py holds it to that)."""
    text = yaml.safe_dump(cfg, sort_keys=True)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = Path(".snakemake/dpsynth") / f"params-{digest}.yaml"
    if not path.is_file():  # a SLURM job re-reading the Snakefile finds it there (shared file system)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        header = ("# Written by Snakemake: params.yaml plus any --config/--configfile overrides, as validated\n"
                  "# for this run. Every job of the run reads this file; edit params.yaml, not this.\n")
        tmp.write_text(f"{header}{text}")
        os.replace(tmp, path)
    return path


RUN_PARAMS = _write_resolved(config)


def fp(stage):
    """A rule's `fingerprint` param: a hash of the settings its job reads (dpsynth.fingerprint),
    so an edit to params.yaml or an override re-runs exactly the jobs it affects."""
    return lambda wildcards: fingerprint(PARAMS, stage, next(iter(wildcards), ""))

# The interpreter running Snakemake has dpsynth installed; calling it this way works
# whether or not the virtualenv's bin/ is on PATH (e.g. inside a SLURM job).
DPSYNTH = f"{shlex.quote(sys.executable)} -m dpsynth.cli"
ENV = "../envs/dpsynth.yaml"

# Cluster resources per rule and scale, one table (workflow/resources.yaml).
with open(Path(workflow.basedir) / "workflow" / "resources.yaml") as _f:
    RESOURCES = yaml.safe_load(_f)


def runtime(rule):
    """Minutes for ``rule``'s job at this scale; times the attempt where the table says so."""
    table = RESOURCES[rule]
    minutes = table[PARAMS.scale]["runtime"]
    return (lambda wildcards, attempt: minutes * attempt) if table.get("retry_more_time") else minutes


def mem_mb(rule):
    """Memory (MB) for ``rule``'s job at this scale, times the attempt (a retry after running out)."""
    megabytes = RESOURCES[rule][PARAMS.scale]["mem_mb"]
    return lambda wildcards, attempt: megabytes * attempt


wildcard_constraints:
    dataset="|".join(sorted(DATASETS)),
    experiment="|".join(sorted(EXPERIMENTS)) or "^$",
    sweep="|".join(sorted(PARAMS.pipeline.sweeps)) or "^$",


# sweep cell -> its targeted sweep: the cell's train job comes after the sweep's train_sweep job
SWEEP_OF = {cell: s for s in PARAMS.pipeline.sweeps for cell in PARAMS.cells_of(s)}


def sweep_data(wildcards):
    """A targeted sweep's training data (that of its base experiment)."""
    return f"data/processed/{EXPERIMENTS[PARAMS.sweeps[wildcards.sweep].base].dataset}.npz"


def train_data(wildcards):
    """The training data, for GS-WGAN the warm-started critics it starts from, and for a sweep
    cell its sweep's train_sweep output (with train_together the cell's finished checkpoint is
    there by then). That job re-runs only when what every cell shares changes, not when a cell
    is added: a new cell trains alone and the others stay done."""
    exp = EXPERIMENTS[wildcards.experiment]
    if exp.local is not None:
        return [f"data/privatized/{wildcards.experiment}.npz"]
    inputs = [f"data/processed/{exp.dataset}.npz"]
    if wildcards.experiment in SWEEP_OF:
        inputs.append(f"private/sweeps/{SWEEP_OF[wildcards.experiment]}")
    warmstart = PARAMS.warmstart_for(wildcards.experiment)
    if warmstart is not None:
        inputs.append(f"private/warmstart/{warmstart}/critics.pt")
    return inputs


def experiment_dataset(wildcards):
    return f"data/processed/{EXPERIMENTS[wildcards.experiment].dataset}.npz"
