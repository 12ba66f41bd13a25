"""Workflow copies and the smoke pipeline, built once per test session and shared.

A real run of the whole smoke pipeline takes minutes; running it once with Snakemake and once with
`dvc repro` per test session replaces the six runs the suite used to make (twice each in
test_workflow_sync, test_dvc and test_slurm). Both start in the background as the session starts
(when a selected test needs them; conftest.py) and the tests wait for the runner they read
(fixtures ``smoke_pipelines``, ``smoke_snakemake``), so the other tests use the cores meanwhile. The two workspaces are read-only by convention: a test that changes one (edits
params.yaml, `dvc exp run`, `dvc commit`) works on its own copy (``copy_workspace``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO, venv_bin

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
    # the clone's cache type (hard links: `dvc commit` keeps each output's time, so Snakemake still sees a
    # run as up to date); the rest of .dvc/config (autostage) would change what the tests' git commands see
    run([venv_bin("dvc"), "config", "cache.type", dvc_cache_type()], d)


def dvc_cache_type() -> str:
    """`cache.type` of the repository's .dvc/config, as a clone has it."""
    import configparser

    config = configparser.ConfigParser()
    config.read(REPO / ".dvc" / "config")
    return config["cache"]["type"].strip('"')


def copy_workspace(src: Path, dest: Path) -> Path:
    """A copy of a finished workspace (git, DVC cache, Snakemake's records, outputs), timestamps
    kept, for a test that changes it: Snakemake and DVC see the copy exactly as the original."""
    subprocess.run(["cp", "-a", str(src), str(dest)], check=True)
    return dest


def smoke_patch(p: dict) -> None:
    """One DP-Sinkhorn target, one sweep cell, the real-data row and a one-level W2 sweep. Reproducible
    noise: the tests compare the generators two runners made bit for bit (not private, and labelled so).
    No dataset declared public (a curator's own data): nothing computed on the training records without noise
    may reach a released file (tests/test_workflow_sync.py reads every one)."""
    p["scale"] = "smoke"
    p["privacy_noise"] = "reproducible"
    p["datasets"] = ["fashion_mnist"]
    p["data"]["public"] = []
    # the shipped list also targets MNIST's cells
    p["pipeline"] = {"experiments": ["dps_fmnist"], "sweeps": ["pm_fmnist_quick"]}
    p["sweeps"]["pm_fmnist_quick"]["grid"] = {"p": [1.0], "m": [1]}
    # the paper's image setting, 5 steps; W2 measured on 200 records a side (the default 1,000 made the
    # four entropic-W2 evaluations, 1,000 x 1,000 Sinkhorn problems, ~20 s of this job's ~24 s of CPU)
    p["w2_noise"] = {"fashion_mnist": {"noise_levels": [0.5], "n_eval": 200}}
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


#: each runner's command in its workspace; the DVC one commits its run as the baseline the tests go back to
RUNNERS = {"snakemake": f"{venv_bin('snakemake')} --cores 2",
           "dvc": f"{venv_bin('dvc')} repro && git add -A && git -c user.email=t@t -c user.name=t commit -q -m baseline"}


def smoke_base(session_dir: Path) -> Path:
    """Where this session's smoke runs live (DPSYNTH_TEST_PIPELINES: a developer's folder that keeps
    them between sessions, keyed on the code; CI leaves it unset)."""
    cache = os.environ.get("DPSYNTH_TEST_PIPELINES")
    return Path(cache) / _inputs_key() if cache else session_dir / "smoke-pipelines"


def start_smoke_runs(base: Path) -> None:
    """Start both runs in the background, once: the first caller (of any xdist worker) copies the
    workspaces and starts them, later callers find them started. Each run writes its log and, when it
    ends, its exit status (``<runner>.rc``); their process groups are kept in ``pgids``."""
    import fcntl

    base.mkdir(parents=True, exist_ok=True)
    with open(base / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (base / "started").is_file() and not _failed_or_stopped(base):
            return
        for r in RUNNERS:
            shutil.rmtree(base / r, ignore_errors=True)
            (base / f"{r}.rc").unlink(missing_ok=True)
        started = []
        for r, cmd in RUNNERS.items():
            d = copy_workflow(base / r, smoke_gswgan_patch)
            (d / ".gitignore").write_text(GITIGNORE)
            proc = subprocess.Popen(["bash", "-c", f"({cmd}) > ../{r}.log 2>&1; echo $? > ../{r}.rc.tmp; "
                                                   f"mv ../{r}.rc.tmp ../{r}.rc"],
                                    cwd=d, env=env(), start_new_session=True)
            started.append(str(proc.pid))
        (base / "pgids").write_text(" ".join(started))
        (base / "started").write_text("")


def _failed_or_stopped(base: Path) -> bool:
    """A run that failed, or that ended without its status (stopped with an earlier session: only
    with DPSYNTH_TEST_PIPELINES, whose folder outlives the session): start both again."""
    if any((base / f"{r}.rc").is_file() and (base / f"{r}.rc").read_text().strip() != "0" for r in RUNNERS):
        return True
    if all((base / f"{r}.rc").is_file() for r in RUNNERS):
        return False
    for pgid in (base / "pgids").read_text().split():
        try:
            os.killpg(int(pgid), 0)
            return False  # still running
        except ProcessLookupError:
            continue
    return True


def stop_smoke_runs(base: Path) -> None:
    """Stop the runs of ``base`` that have not finished (no ``<runner>.rc``): the session ended without them."""
    import signal

    if not (base / "pgids").is_file() or all((base / f"{r}.rc").is_file() for r in RUNNERS):
        return
    for pgid in (base / "pgids").read_text().split():
        try:
            os.killpg(int(pgid), signal.SIGTERM)
        except ProcessLookupError:
            pass


def wait_for_smoke_run(base: Path, runner: str, timeout: float = 2400) -> tuple[Path, str]:
    """(workspace, log) of one runner's finished run; fails with its log's tail if it failed."""
    import time

    rc, deadline = base / f"{runner}.rc", time.monotonic() + timeout
    while not rc.is_file():
        assert (base / "started").is_file(), f"the smoke runs were never started in {base}"
        assert time.monotonic() < deadline, f"`{RUNNERS[runner]}` still running after {timeout:.0f} s"
        time.sleep(2)
    log = (base / f"{runner}.log").read_text()
    assert rc.read_text().strip() == "0", f"`{RUNNERS[runner]}` failed:\n{log[-5000:]}"
    return base / runner, log


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
