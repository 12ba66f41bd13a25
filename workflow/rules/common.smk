# Shared helpers: validated parameters and the CLI entry point.
import shlex
import sys

from dpsynth.config import parse_params
from dpsynth.data.registry import DATASETS

# `config` is params.yaml plus any --config overrides; validate it exactly as the CLI does.
PARAMS = parse_params(config, source="params.yaml (as seen by Snakemake)")
EXPERIMENTS = PARAMS.all_experiments()
TARGETS = list(PARAMS.targets)

# The interpreter running Snakemake has dpsynth installed; calling it this way works
# whether or not the virtualenv's bin/ is on PATH (e.g. inside a SLURM job).
DPSYNTH = f"{shlex.quote(sys.executable)} -m dpsynth.cli"
ENV = "../envs/dpsynth.yaml"


wildcard_constraints:
    dataset="|".join(sorted(DATASETS)),
    experiment="|".join(sorted(EXPERIMENTS)) or "^$",


def train_data(wildcards):
    exp = EXPERIMENTS[wildcards.experiment]
    if exp.local is not None:
        return f"data/privatized/{wildcards.experiment}.npz"
    return f"data/processed/{exp.dataset}.npz"


def experiment_dataset(wildcards):
    return f"data/processed/{EXPERIMENTS[wildcards.experiment].dataset}.npz"
