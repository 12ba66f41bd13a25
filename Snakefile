# dpsynth workflow. Every rule calls a `dpsynth` CLI stage; no logic lives here.
# Local:    snakemake --cores 2
# Cluster:  snakemake --cores 8 --profile slurm
# One paper table: snakemake neurips_table4 --config scale=paper   (`dpsynth workflow targets` lists them)
# The parameters are validated by the same loader the CLI and the tests use.

# Before Snakemake's own YAML loader reads params.yaml (`configfile:` below) and any --configfile: a merge-key
# bomb would hang it and it keeps the last of two equal keys silently; the CLI's loader refuses both in one line.
from dpsynth.config import check_yaml_file as _check_yaml_file

for _configfile in dict.fromkeys(["params.yaml", *(getattr(workflow, "configfiles", None) or [])]):
    _check_yaml_file(_configfile)

configfile: "params.yaml"

# The jobs find `dpsynth` on PATH (workflow/rules/common.smk puts this environment's bin/ first).
envvars:
    "PATH"


# `snakemake --report report.html`: the tables (ours beside the papers'), figures, labelled
# sample grids and training curves, each with its caption (workflow/report/*.rst).
report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/privatize.smk"
include: "workflow/rules/warmstart.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/sample.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/reshetova.smk"
include: "workflow/rules/targets.smk"


localrules:
    report,


# A train_sweep job that trains nothing (no sweep a build may run has train_together: BUILT_SWEEPS, the
# pipeline's and the table targets') runs where Snakemake runs; one that trains is a cluster job with a
# training job's resources (a GPU at the paper scale: workflow/resources.yaml), and a marker-only job of
# the same rule then asks for no GPU (common.smk sweep_gpu).
if not any(PARAMS.sweeps[s].train_together for s in BUILT_SWEEPS):

    localrules:
        train_sweep,


rule all:
    default_target: True
    input:
        "results/tables",
        "results/figures",
        expand("data/processed/{dataset}.npz", dataset=PARAMS.datasets),
        expand("data/processed/{dataset}.json", dataset=PARAMS.datasets),
        expand("results/runs/{experiment}/metrics.json", experiment=TARGETS),
        expand("results/real/{dataset}/metrics.json", dataset=PARAMS.evaluation.real_datasets),
        expand("results/w2_noise/{dataset}.csv", dataset=list(PARAMS.w2_noise)),
        # every targeted sweep's train_sweep job, as in dvc.yaml (its cells wait for it only under train_together)
        expand("private/sweeps/{sweep}", sweep=PARAMS.pipeline_sweeps()),
