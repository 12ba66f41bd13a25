# Shared helpers: validated parameters, the configuration file every job reads, fingerprints.
import fcntl
import hashlib
import os
import sys
from pathlib import Path

import yaml

from dpsynth.config import parse_params, table_targets
from dpsynth.config.run import check_sweep_at_scale
from dpsynth.data.registry import DATASETS
from dpsynth.errors import DpsynthError
from dpsynth.fingerprint import fingerprint
from dpsynth.workflow.dvc import refuse_stale_release_flags
from dpsynth.workflow.settings import settings_path


def _gpus_switch(value) -> bool:
    """`--config gpus=false` (or 0, no): no job asks for a GPU. For a cluster without GPUs, which refuses
    a job asking for one at submission ("Invalid generic resource"); the jobs then run on the CPU
    (`--device auto` finds none). Default true: the paper-scale rows of workflow/resources.yaml ask."""
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    raise ValueError(f"--config gpus={value!r}: use gpus=false (a cluster without GPUs) or gpus=true (the default)")


# Where the jobs run, not what they compute: taken out of `config` before validation (params.yaml's
# loader refuses keys it does not know), so the jobs' parameter snapshot and fingerprints are the same
# with or without it and switching re-runs nothing. A SLURM job step re-reads this file with the same
# --config, so it sees the same value.
GPUS = _gpus_switch(config.pop("gpus", True))

# `config` is params.yaml plus any --config overrides; validate it exactly as the CLI does.
PARAMS = parse_params(config, source="params.yaml (as seen by Snakemake)")
# A dvc.yaml beside it whose push flags would send what these parameters keep here (a dataset added to
# `datasets`, or dropped from `data.public`, without regenerating it): refused before any job, as DVC's
# `settings` stage refuses, so a later `dvc commit` + `dvc push` of this run cannot send it.
refuse_stale_release_flags(Path("dvc.yaml"), "checked by Snakemake")
EXPERIMENTS = PARAMS.all_experiments()
# pipeline.experiments + every cell of pipeline.sweeps, and the runs of the targets pipeline.tables lists
# (editing a sweep's lists edits this).
TARGETS = list(PARAMS.pipeline_targets())
# The build targets, one per paper table (params.yaml `tables:`, each table's `target`): `snakemake <name>`
# runs exactly its runs and renders it (workflow/rules/targets.smk).
TABLE_TARGETS = table_targets(PARAMS)
# The sweeps whose train_sweep job a build may run: the pipeline's, and those a target trains together.
BUILT_SWEEPS = list(dict.fromkeys([*PARAMS.pipeline_sweeps(),
                                   *(s for t in TABLE_TARGETS.values() for s in t.train_sweeps(PARAMS))]))


class _PlainDumper(yaml.SafeDumper):
    """YAML without anchors: the snapshot's text, and so its name, depends on the values alone, not
    on which of them Snakemake's config shares (it copies params.yaml's mappings, not its lists)."""

    def ignore_aliases(self, data):
        return True


def _resolved(cfg: dict) -> tuple[Path, str]:
    """Every job reads exactly the configuration validated above -- params.yaml plus --config and
    --configfile overrides -- from a snapshot named by its content: a later edit of params.yaml, or
    another `snakemake --config ...` in this directory, cannot change what a running pipeline's
    jobs read. It reaches the jobs as the `run_params` param, a Path: Snakemake's params trigger
    ignores values it cannot represent (not str, int, list, ...), so jobs re-run on their
    fingerprint, not on the snapshot's name (tests/test_dvc.py holds it to that). Returns the
    snapshot's path and text; `onstart` below writes it."""
    # params.yaml's own order (not sorted): the report lists its tables in that order (Table 1 first)
    text = yaml.dump(cfg, Dumper=_PlainDumper, sort_keys=False)
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    header = ("# Written by Snakemake: params.yaml plus any --config/--configfile overrides, as validated\n"
              "# for this run. Every job of the run reads this file; edit params.yaml, not this.\n")
    return Path(".snakemake/dpsynth") / f"params-{digest}.yaml", f"{header}{text}"


RUN_PARAMS, _RUN_PARAMS_TEXT = _resolved(config)
# This run's open snapshot: its read lock lasts while the descriptor stays open (a POSIX lock also
# ends when this process closes any other descriptor of the file: nothing here opens it again).
_HELD = []


def _same_file(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file open as ``fd`` (not removed, nor replaced, meanwhile)."""
    try:
        st, held = os.stat(path), os.fstat(fd)
    except FileNotFoundError:
        return False
    return (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino)


def _hold_snapshot(path: Path, text: str) -> None:
    """Write the run's snapshot (unless there) and read-lock it for as long as this process runs,
    so that no other Snakemake removes it while its jobs read it. A new file is locked before it
    gets its name, so a pruning run never sees it unlocked; an existing one, locked after it was
    opened, is written again if a pruning run removed it in between. `fcntl.lockf` as in
    dpsynth.locations: the kernel (or NFS server) drops it when the process dies."""
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_text(text)
            fd = os.open(tmp, os.O_RDONLY)
            fcntl.lockf(fd, fcntl.LOCK_SH)
            os.replace(tmp, path)
        else:
            fcntl.lockf(fd, fcntl.LOCK_SH)
        if _same_file(fd, path):
            _HELD.append(fd)
            return
        os.close(fd)


def _prune_snapshots(keep: Path) -> None:
    """Remove every other snapshot that no running Snakemake holds (a write lock is refused while
    one has it read-locked): those of earlier runs, of configurations no longer in use."""
    for old in keep.parent.glob("params-*.yaml"):
        if old == keep:
            continue
        try:
            fd = os.open(old, os.O_RDWR)
        except OSError:  # removed by another pruning run meanwhile, or not ours to write
            continue
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if _same_file(fd, old):
                old.unlink()
        except OSError:  # held: a running pipeline's jobs read it
            pass
        finally:
            os.close(fd)


# The snapshot is written, and the others pruned, by the main Snakemake process of a real run only.
# Where the Snakefile is parsed, Snakemake (9.x) cannot yet say whether this is a dry run:
# `workflow.dryrun` asks the executor plugin, which is set only after the Snakefile is read, so it
# is False during a dry run too. `onstart` is the documented hook for "this run executes jobs": it
# runs after the DAG is built, before the first job is scheduled, in real (and --touch) runs only
# ("dry-runs do not trigger any of the handlers"), never for --summary, --dag, --lint or --report,
# and not in the sub-processes that run jobs (a SLURM job step, `--mode remote`, re-reads this file
# and is started with --no-hooks; `workflow.is_main_process` checks that too). So a dry run writes
# nothing and removes nothing: it names the snapshot its jobs would read. Snakemake's own lock does
# not make a real run the only one (it locks the DAG's files, not the directory: runs on disjoint
# targets, or with --nolock, run side by side), hence the locks above. A real run with --no-hooks
# writes no snapshot: its jobs stop on the missing file, which they name. A workflow has one onstart
# handler (a second replaces the first): add to this one.
onstart:
    if workflow.is_main_process:
        _hold_snapshot(RUN_PARAMS, _RUN_PARAMS_TEXT)
        _prune_snapshots(RUN_PARAMS)


def fp(stage):
    """A rule's `fingerprint` param: a hash of the settings its job reads (dpsynth.fingerprint),
    so an edit to params.yaml or an override re-runs exactly the jobs it affects. The job also
    writes those settings to its `settings` output (`dpsynth --record-settings`), the file DVC's
    stage for the same job depends on: `dvc commit` then records what each job read."""
    return lambda wildcards: fingerprint(PARAMS, stage, next(iter(wildcards), ""))

# Each job runs `dpsynth ...` as a plain shell command found on PATH, as DVC's stages do, and no
# job's params hold an interpreter path. (Snakemake re-runs a job whose params change, so with the
# interpreter's absolute path as a param the same clone moved to another folder, or run through
# another path to the same venv, planned every job again.) The environment that runs Snakemake holds
# dpsynth (the README's .venv; with `--sdm conda`, workflow/envs/dpsynth.yaml, activated after this);
# its bin/ goes first on the jobs' PATH, so `.venv/bin/snakemake` works without activating the venv,
# on a SLURM node too. The Snakefile declares `envvars` PATH, as Snakemake's linter asks.
_ENV_BIN = str(Path(sys.executable).parent)
if _ENV_BIN not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = _ENV_BIN + os.pathsep + os.environ.get("PATH", "")
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


def gpu(rule):
    """GPUs for ``rule``'s job at this scale (unset: 0); 0 for every rule with `--config gpus=false`."""
    return RESOURCES[rule][PARAMS.scale].get("gpu", 0) if GPUS else 0


def _releases(experiment):
    """A cell of a sweep trained together: its train job only releases what the sweep's job trained."""
    sweep = SWEEP_OF.get(experiment)
    return sweep is not None and PARAMS.sweeps[sweep].train_together


def train_resource(key):
    """A train job's ``runtime``, ``mem_mb`` or ``gpu``: the `train` row of workflow/resources.yaml, or for a cell
    of a sweep trained together (its job only releases the checkpoint) the `release` row -- no GPU, minutes."""

    def value(wildcards, attempt=1):
        row = "release" if _releases(wildcards.experiment) else "train"
        if key == "gpu":
            return RESOURCES[row][PARAMS.scale].get("gpu", 0) if GPUS else 0
        return RESOURCES[row][PARAMS.scale][key] * (attempt if key == "mem_mb" else 1)

    return value


def sweep_gpu(wildcards):
    """A train_sweep job's GPUs: the table's for a sweep it trains (train_together), none for one whose
    job only writes its marker (its cells train in their own jobs)."""
    return gpu("train_sweep") if PARAMS.sweeps[wildcards.sweep].train_together else 0


def cpu_threads(rule):
    """CPU threads for ``rule``'s job (unset: 1); `params` is params.yaml's `threads`, the torch threads
    the stage runs, the same at every scale (workflow/resources.yaml)."""
    value = RESOURCES[rule].get("threads", 1)
    return PARAMS.threads if value == "params" else int(value)


wildcard_constraints:
    dataset="|".join(sorted(DATASETS)),
    experiment="|".join(sorted(EXPERIMENTS)) or "^$",
    sweep="|".join(sorted(BUILT_SWEEPS)) or "^$",


# sweep cell -> its sweep: a cell of a sweep trained together waits for its sweep's train_sweep job
SWEEP_OF = {cell: s for s in BUILT_SWEEPS for cell in PARAMS.cells_of(s)}


def sweep_data(wildcards):
    """A targeted sweep's training data (that of its base experiment); for a sweep of locally privatized cells
    trained together, every cell's own privatized records (each made by the cell's own privatize job)."""
    sweep = PARAMS.sweeps[wildcards.sweep]
    if sweep.train_together and EXPERIMENTS[sweep.base].local is not None:
        return expand("data/privatized/{cell}.npz", cell=PARAMS.cells_of(wildcards.sweep))
    return f"data/processed/{EXPERIMENTS[sweep.base].dataset}.npz"


def train_data(wildcards):
    """The training data, for GS-WGAN the warm-started critics it starts from, and for a cell of a
    sweep trained together (train_together) its sweep's train_sweep output: the cell's finished
    checkpoint is there by then. That job re-runs only when what every cell shares changes, not
    when a cell is added: a new cell trains alone and the others stay done. A cell of a sweep
    trained alone does not wait for (or re-run after) that job, which only writes its marker."""
    exp = EXPERIMENTS[wildcards.experiment]
    sweep = SWEEP_OF.get(wildcards.experiment)
    if exp.local is not None:  # its own privatized records (and, trained together, its sweep's job)
        together = sweep is not None and PARAMS.sweeps[sweep].train_together
        return [f"data/privatized/{wildcards.experiment}.npz", *([f"private/sweeps/{sweep}"] if together else [])]
    inputs = [f"data/processed/{exp.dataset}.npz"]
    if sweep is not None and PARAMS.sweeps[sweep].train_together:
        inputs.append(f"private/sweeps/{sweep}")
    warmstart = PARAMS.warmstart_for(wildcards.experiment)
    if warmstart is not None:
        inputs.append(f"private/warmstart/{warmstart}/critics.pt")
    return inputs


def evaluate_privatized(wildcards):
    """A run trained on locally privatized records (its method's takes_local_data, its local: block): those
    records, which its evaluate job fits the trivial private baselines to (evaluate.baselines.run_baselines);
    nothing for any other run."""
    exp = EXPERIMENTS[wildcards.experiment]
    return [f"data/privatized/{wildcards.experiment}.npz"] if exp.spec.takes_local_data and exp.local is not None \
        else []


def experiment_dataset(wildcards):
    return f"data/processed/{EXPERIMENTS[wildcards.experiment].dataset}.npz"


def require_w2_scale(target, dataset):
    """One line, before any job, when ``target`` needs the W2-vs-noise sweep of ``dataset`` at a scale where
    that sweep does not train (w2_noise.<dataset>.scales): its stage would write an empty result; and when
    params.yaml configures no such sweep."""
    if dataset not in PARAMS.w2_noise:
        raise WorkflowError(f"{target} needs the W2-vs-noise sweep w2_noise.{dataset} in params.yaml, which has "
                            f"none (configured: {sorted(PARAMS.w2_noise) or 'none'}); restore it from the shipped "
                            "params.yaml")
    scales = PARAMS.w2_noise[dataset].scales
    if scales is not None and PARAMS.scale not in scales:
        raise WorkflowError(f"{target} trains at the paper's settings: run it with --config "
                            f"scale={scales[-1]} (w2_noise.{dataset}.scales: {scales}; this run's scale is "
                            f"{PARAMS.scale!r})")


# The `reshetova_mnist` target's inputs (workflow/rules/reshetova.smk defines RESHETOVA_MNIST_RUNS).
def reshetova_mnist_inputs(wildcards):
    """The target's inputs; at a scale where w2_noise.mnist does not train, one line saying which to use."""
    require_w2_scale("reshetova_mnist", "mnist")
    return {"w2": "results/w2_noise/mnist.csv",
            "metrics": expand("results/runs/{experiment}/metrics.json", experiment=RESHETOVA_MNIST_RUNS)}


def table_target_inputs(name):
    """The input function of build target ``name`` (workflow/rules/targets.smk): every file the report reads
    of its runs -- metrics, training log, sample grid and synthetic sets, the privatized records a local-DP
    run's figure draws -- its real-data rows and W2 sweeps. A sweep this scale cannot honour (two swept values
    capped or set to one) or a W2 sweep that does not train here is one line naming the key, before any job."""

    def inputs(wildcards):
        target = TABLE_TARGETS[name]
        try:
            for sweep in target.sweeps:
                check_sweep_at_scale(PARAMS, sweep)
        except DpsynthError as exc:
            raise WorkflowError(f"{name}: {exc}") from None
        for dataset in target.w2_noise:
            require_w2_scale(name, dataset)
        runs = target.runs(PARAMS)
        local = [r for r in runs if EXPERIMENTS[r].local is not None]
        return {
            "metrics": expand("results/runs/{experiment}/metrics.json", experiment=runs),
            "train_logs": expand("models/{experiment}/train_log.csv", experiment=runs),
            "grids": expand("results/runs/{experiment}/samples.png", experiment=runs),
            "sets": expand("data/synthetic/{experiment}", experiment=runs),
            "privatized": expand("data/privatized/{experiment}.npz", experiment=local),
            "real": expand("results/real/{dataset}/metrics.json", dataset=target.real),
            "w2": expand("results/w2_noise/{dataset}.csv", dataset=target.w2_noise),
        }

    return inputs
