"""Each pipeline job's settings as a file, so DVC re-runs exactly what Snakemake re-runs.

Snakemake compares a hash of what each job reads (``dpsynth.fingerprint.stage_settings``) with the
hash of its last run. DVC's own mechanism, a stage's ``params:`` list of params.yaml keys, cannot
say the same thing: it can only name keys that exist (a key added later, say an experiment's
``seed``, would go unseen), and it cannot leave out a part of a key (an experiment's
``description``, a label for people) or the presets of the scales not running. So DVC gets the
very dictionaries Snakemake hashes, as files: one ``settings`` stage, depending on all of
params.yaml, writes ``results/settings/<stage>/<name>.json`` for every job of the pipeline, and
each stage depends on its own file. An edit re-runs the (cheap) settings stage; a file whose
content did not change does not re-run its stage (DVC compares content), so both tools re-run
the same jobs by construction (tests/test_dvc.py edits several keys and compares them).

Each job also writes its own file once it has succeeded (``dpsynth --record-settings FILE <stage>
...``: ``record_settings``), in both tools. In Snakemake the file is the rule's declared output, and
no hook writes the others': ``dvc commit`` after a run records what each job really read, and a
targeted run (another scale, a few targets) rewrites the files of the jobs it ran and no other's.
"""

from __future__ import annotations

import json
from pathlib import Path

from dpsynth.config import Params
from dpsynth.fingerprint import STAGES, stage_settings
from dpsynth.io import atomic_open

SETTINGS_DIR = "results/settings"
#: the stages with one job per run (an experiment or a sweep cell)
RUN_STAGES = ("train", "sample", "evaluate")


def settings_path(stage: str, name: str = "") -> str:
    """Where job ``stage``/``name`` finds its settings (``name`` may be a DVC template like ``${key}``)."""
    return f"{SETTINGS_DIR}/{stage}/{name or stage}.json"


def pipeline_jobs(params: Params) -> list[tuple[str, str]]:
    """(stage, name) of every job the pipeline declares, as dvc.yaml's stages expand."""
    jobs = [("prepare_data", d) for d in params.datasets]
    jobs += [("privatize", e) for e in params.privatized_targets()]
    jobs += [("warmstart", w) for w in params.warm_starts()]
    jobs += [("train_sweep", s) for s in params.pipeline_sweeps()]
    jobs += [(stage, run) for run in params.pipeline_targets() for stage in RUN_STAGES]
    jobs += [("evaluate_real", d) for d in params.evaluation.real_datasets]
    jobs += [("w2_noise", d) for d in params.w2_noise]
    jobs.append(("report", ""))
    return jobs


def settings_text(params: Params, stage: str, name: str = "") -> str:
    """The job's settings as the file holds them (sorted keys: the same dictionary, the same text)."""
    return json.dumps(stage_settings(params, stage, name), sort_keys=True, indent=1, default=str) + "\n"


def job_of(path: str | Path) -> tuple[str, str]:
    """(stage, name) of the job whose settings file is ``path`` (``settings_path``'s inverse);
    ValueError for a path that is not ``results/settings/<stage>/<name>.json`` of a known stage."""
    parts = Path(path).as_posix().removesuffix(".json").split("/")
    if Path(path).suffix != ".json" or len(parts) < 2 or "/".join(parts[:-2]) != SETTINGS_DIR:
        raise ValueError(f"{path}: not a job's settings file ({SETTINGS_DIR}/<stage>/<name>.json)")
    stage, name = parts[-2:]
    if stage not in STAGES:
        raise ValueError(f"{path}: unknown stage {stage!r}; one of {', '.join(STAGES)}")
    return stage, "" if stage == "report" else name


def _write_if_changed(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` unless it already holds it (its file, and so its timestamp and
    DVC's hard link to the cache, then stay as they are). Whether it wrote."""
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    with atomic_open(path) as f:
        f.write(text)
    return True


def record_settings(params: Params, path: str | Path) -> None:
    """Write the settings job ``job_of(path)`` read to ``path``: what a job does once it has
    succeeded. In Snakemake the file is the job's declared output; in DVC the job's dependency, which
    the `settings` stage wrote with the same text before the job ran. Written even when unchanged: the
    file's time is then the job's end, after its inputs', which is what Snakemake checks (after a
    ``dvc repro``, the settings stage's earlier times made Snakemake plan every job again)."""
    stage, name = job_of(path)
    with atomic_open(Path(path)) as f:
        f.write(settings_text(params, stage, name))


def write_settings(params: Params, root: Path = Path(".")) -> list[str]:
    """Write every job's settings file under ``root`` (DVC's ``settings`` stage); rewrite only those
    whose text changed (DVC then sees the others untouched) and remove files of jobs no longer in
    the pipeline. Returns the paths written."""
    wanted = {settings_path(stage, name): settings_text(params, stage, name) for stage, name in pipeline_jobs(params)}
    written = [rel for rel, text in wanted.items() if _write_if_changed(root / rel, text)]
    folder = root / SETTINGS_DIR
    for path in sorted(folder.glob("*/*.json")) if folder.is_dir() else []:
        if path.relative_to(root).as_posix() not in wanted:
            path.unlink()
    return written
