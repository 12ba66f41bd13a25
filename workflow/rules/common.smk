# Shared helpers: validated parameters and the CLI entry point.
import shlex
import sys

from dpsynth.config import parse_params
from dpsynth.data.registry import DATASETS

# `config` is params.yaml plus any --config overrides; validate it exactly as the CLI does.
PARAMS = parse_params(config, source="params.yaml (as seen by Snakemake)")

# The interpreter running Snakemake has dpsynth installed; calling it this way works
# whether or not the virtualenv's bin/ is on PATH (e.g. inside a SLURM job).
DPSYNTH = f"{shlex.quote(sys.executable)} -m dpsynth.cli"
ENV = "../envs/dpsynth.yaml"


wildcard_constraints:
    dataset="|".join(sorted(DATASETS)),
