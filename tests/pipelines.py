"""Workflow copies and the smoke pipeline, built once per test session and shared.

A real run of the whole smoke pipeline takes minutes; building it once for Snakemake and once for
`dvc repro` (``build_smoke_pipelines``, behind the session fixture ``smoke_pipelines`` in conftest.py)
replaces the six runs the suite used to make (twice each in test_workflow_sync, test_dvc and
test_slurm). The two workspaces are read-only by convention: a test that changes one (edits
params.yaml, `dvc exp run`, `dvc commit`) works on its own copy (``copy_workspace``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import FASHION_DIR, REPO, require, venv_bin

WORKFLOW_FILES = ("Snakefile", "workflow", "params.yaml", "dvc.yaml", ".dvcignore", "src")
# Not outputs of any stage: the resume checkpoint and Snakemake's bookkeeping stay out of git.
GITIGNORE = "checkpoint.pt\n/logs/\n/.snakemake/\n"
SMOKE_EXPERIMENTS = ("dps_fmnist", "gswgan_fmnist", "pm_fmnist_quick-p1.0-m1")


def env() -> dict[str, str]:
    """os.environ with the venv's console scripts (snakemake, dvc, dpsynth) first on PATH."""
    e = dict(os.environ)
    e["PATH"] = str(Path(venv_bin("python")).parent) + os.pathsep + e.get("PATH", "")
    return e


def run(cmd: list[str], cwd: Path, timeout: float = 300) -> str:
    """Run a command, demand success, return its stdout."""
    res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env())
    assert res.returncode == 0, f"{' '.join(cmd)} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res.stdout


def copy_workflow(dest: Path, params_patch=None) -> Path:
    """A copy of the workflow declarations in a fresh git + DVC repository; with ``params_patch``,
    its params.yaml edited and dvc.yaml regenerated from it, as a user does (`dpsynth workflow dvc`)."""
    import yaml

    dest.mkdir(parents=True, exist_ok=True)
    for name in WORKFLOW_FILES:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(src, dest / name)
    if params_patch:
        p = yaml.safe_load((dest / "params.yaml").read_text())
        params_patch(p)
        (dest / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
        run([venv_bin("python"), "-m", "dpsynth.cli", "workflow", "dvc", "--params", "params.yaml"], dest)
    _git_dvc_init(dest)
    return dest


def _git_dvc_init(d: Path) -> None:
    run(["git", "init", "-q"], d)
    run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "init"], d)
    run([venv_bin("dvc"), "init", "-q"], d)
    run([venv_bin("dvc"), "config", "core.analytics", "false"], d)


def git_commit(cwd: Path, message: str) -> None:
    run(["git", "add", "-A"], cwd)
    run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", message], cwd)


def copy_workspace(src: Path, dest: Path) -> Path:
    """A copy of a finished workspace (git, DVC cache, Snakemake's records, outputs), timestamps
    kept, for a test that changes it: Snakemake and DVC see the copy exactly as the original."""
    subprocess.run(["cp", "-a", str(src), str(dest)], check=True)
    return dest


def smoke_patch(p: dict) -> None:
    """One DP-Sinkhorn target, one sweep cell, the real-data row and a one-level W2 sweep. Reproducible
    noise: the tests compare the generators two runners made bit for bit (not private, and labelled so)."""
    p["scale"] = "smoke"
    p["privacy_noise"] = "reproducible"
    p["datasets"] = ["fashion_mnist"]
    # the shipped list also targets MNIST's cells
    p["pipeline"] = {"experiments": ["dps_fmnist"], "sweeps": ["pm_fmnist_quick"]}
    p["sweeps"]["pm_fmnist_quick"]["grid"] = {"p": [1.0], "m": [1]}
    p["w2_noise"] = {"fashion_mnist": {"noise_levels": [0.5]}}  # the paper's image setting, 5 steps
    p["tables"]["local_privacy_w2"]["dataset"] = "fashion_mnist"
    p["evaluation"]["real_datasets"] = ["fashion_mnist"]


def smoke_gswgan_patch(p: dict) -> None:
    """The smoke pipeline plus GS-WGAN (warm start stage -> training from it): the shared runs' params."""
    smoke_patch(p)
    p["pipeline"]["experiments"].append("gswgan_fmnist")


@dataclass(frozen=True)
class SmokePipelines:
    """The smoke pipeline with GS-WGAN (``smoke_gswgan_patch``), run to completion by each runner.
    Read-only: copy a workspace (``copy_workspace``) before changing it."""

    snakemake: Path  # `snakemake --cores 2`; nothing recorded in DVC
    dvc: Path  # `dvc repro`, then committed to git as "baseline" (dvc.lock and params.yaml)
    snakemake_log: str
    dvc_log: str


def build_smoke_pipelines(base: Path) -> SmokePipelines:
    """Both runs start together: on a shared 2-core machine they overlap each other's waits. A build
    finished in ``base`` (its marker file ``built`` written last) is reused; call this under a lock
    (conftest's ``smoke_pipelines`` holds one across xdist workers).

    With DPSYNTH_TEST_PIPELINES set to a folder (a developer's option; CI leaves it unset), a build
    of the same workflow files, code and this module is reused from there, and a new one kept there."""
    cache = os.environ.get("DPSYNTH_TEST_PIPELINES")
    if cache:
        base = Path(cache) / _inputs_key()
    if (base / "built").is_file():  # finished by another xdist worker of this session, or cached
        return SmokePipelines(base / "snakemake", base / "dvc", *json.loads((base / "built").read_text()))
    shutil.rmtree(base, ignore_errors=True)  # a build that did not finish
    require(FASHION_DIR.is_dir(), f"Debian package dataset-fashion-mnist not installed ({FASHION_DIR})")
    sm, dv = copy_workflow(base / "snakemake", smoke_gswgan_patch), copy_workflow(base / "dvc", smoke_gswgan_patch)
    for d in (sm, dv):
        (d / ".gitignore").write_text(GITIGNORE)
    procs = [subprocess.Popen(cmd, cwd=d, env=env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for d, cmd in ((sm, [venv_bin("snakemake"), "--cores", "2"]), (dv, [venv_bin("dvc"), "repro"]))]
    try:
        outs = [p.communicate(timeout=2000)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    for p, out in zip(procs, outs):
        assert p.returncode == 0, f"{' '.join(p.args)} failed:\n{out[-5000:]}"
    git_commit(dv, "baseline")
    (base / "built").write_text(json.dumps(outs))
    return SmokePipelines(sm, dv, *outs)


def _inputs_key() -> str:
    """A hash of everything a smoke build depends on that a developer edits: the workflow files
    copied into it, the code, and this module (the params patches)."""
    digest = hashlib.sha256()
    files = [Path(__file__)]
    for name in WORKFLOW_FILES:
        src = REPO / name
        files += sorted(f for f in src.rglob("*") if f.is_file() and "__pycache__" not in f.parts
                        and not any(part.endswith(".egg-info") for part in f.parts)) if src.is_dir() else [src]
    for f in files:
        digest.update(str(f.relative_to(REPO)).encode() + b"\0" + f.read_bytes() + b"\0")
    return digest.hexdigest()[:16]
