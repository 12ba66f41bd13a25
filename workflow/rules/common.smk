# Shared helpers: validated parameters and the CLI entry point.
import shlex
import sys

from dpsynth.config import check_yaml_file, parse_params
from dpsynth.data.registry import DATASETS

# Snakemake read params.yaml (and any --configfile) itself, with a YAML loader that silently keeps
# the last of two equal keys; refuse duplicates in those files as the CLI's loader does.
for _configfile in getattr(workflow, "configfiles", None) or ["params.yaml"]:
    check_yaml_file(_configfile)

# `config` is params.yaml plus any --config overrides; validate it exactly as the CLI does.
PARAMS = parse_params(config, source="params.yaml (as seen by Snakemake)")
EXPERIMENTS = PARAMS.all_experiments()
# targets + gswgan_targets + every cell of the sweep_targets (editing a sweep's lists edits this).
TARGETS = list(PARAMS.pipeline_targets())

# The interpreter running Snakemake has dpsynth installed; calling it this way works
# whether or not the virtualenv's bin/ is on PATH (e.g. inside a SLURM job).
DPSYNTH = f"{shlex.quote(sys.executable)} -m dpsynth.cli"
ENV = "../envs/dpsynth.yaml"


wildcard_constraints:
    dataset="|".join(sorted(DATASETS)),
    experiment="|".join(sorted(EXPERIMENTS)) or "^$",


def train_data(wildcards):
    """The training data, and for GS-WGAN the warm-started critics it starts from."""
    exp = EXPERIMENTS[wildcards.experiment]
    if exp.local is not None:
        return [f"data/privatized/{wildcards.experiment}.npz"]
    inputs = [f"data/processed/{exp.dataset}.npz"]
    if exp.method == "gs_wgan":
        name = PARAMS.warmstart_name(wildcards.experiment)
        inputs.append(f"private/warmstart/{name}/critics.pt")
    return inputs


def experiment_dataset(wildcards):
    return f"data/processed/{EXPERIMENTS[wildcards.experiment].dataset}.npz"
