"""Snakemake and DVC declare the same stages, outputs and commands; both really run."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, venv_bin

pytestmark = pytest.mark.pipeline

WORKFLOW_FILES = ("Snakefile", "workflow", "params.yaml", "dvc.yaml", ".dvcignore", "src")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = str(Path(venv_bin("python")).parent) + os.pathsep + env.get("PATH", "")
    return env


def run(cmd: list[str], cwd: Path, timeout: float = 300) -> str:
    res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=_env())
    assert res.returncode == 0, f"{' '.join(cmd)} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res.stdout


def snakemake_outputs(cwd: Path) -> dict[str, set[str]]:
    """rule -> output files of the whole DAG (--forceall, so nothing is skipped as up to date)."""
    out = run([venv_bin("snakemake"), "--summary", "--forceall"], cwd)
    rules: dict[str, set[str]] = {}
    for line in out.splitlines()[1:]:
        cols = line.split("\t")
        if len(cols) >= 3:
            rules.setdefault(cols[2], set()).add(cols[0])
    return rules


def snakemake_commands(cwd: Path) -> set[str]:
    out = run([venv_bin("snakemake"), "-n", "-p", "--forceall"], cwd)
    cmds = set()
    for line in out.splitlines():
        m = re.search(r"-m dpsynth\.cli (.*?)(?: > \S+ 2>&1)?$", line.strip())
        if m:
            cmds.add(m.group(1).strip())
    return cmds


def dvc_stages(cwd: Path) -> dict[str, tuple[set[str], set[str]]]:
    """rule-like stage name (before '@') -> (outputs, commands without the `dpsynth` prefix)."""
    code = ("import json; from dvc.repo import Repo; r = Repo('.');"
            "print(json.dumps([[s.name, [o.def_path for o in s.outs], s.cmd] for s in r.index.stages]))")
    import json

    stages: dict[str, tuple[set[str], set[str]]] = {}
    for name, outs, cmd in json.loads(run([venv_bin("python"), "-c", code], cwd)):
        base = name.split("@")[0]
        o, c = stages.setdefault(base, (set(), set()))
        o.update(outs)
        c.add(cmd.removeprefix("dpsynth ").strip())
    return stages


def copy_workflow(dest: Path, params_patch=None) -> Path:
    """A copy of the workflow declarations in a fresh git + DVC repository."""
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
    _git_dvc_init(dest)
    return dest


def _git_dvc_init(d: Path) -> None:
    run(["git", "init", "-q"], d)
    run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "init"], d)
    run([venv_bin("dvc"), "init", "-q"], d)
    run([venv_bin("dvc"), "config", "core.analytics", "false"], d)


def test_same_stages_outputs_and_commands():
    sm = snakemake_outputs(REPO)
    dv = dvc_stages(REPO)
    sm.pop("all", None)
    assert set(sm) == set(dv), f"stages differ: snakemake {sorted(sm)} vs dvc {sorted(dv)}"
    for rule, outs in sm.items():
        assert outs == dv[rule][0], f"{rule}: outputs differ"
    dvc_cmds = set().union(*(c for _, c in dv.values()))
    assert snakemake_commands(REPO) == dvc_cmds


def test_changing_datasets_changes_both_dags(tmp_path):
    d = copy_workflow(tmp_path / "w", lambda p: p.__setitem__("datasets", ["digits", "manifold2d_ellipse"]))
    sm, dv = snakemake_outputs(d), dvc_stages(d)
    want = {f"data/processed/{n}.{ext}" for n in ("digits", "manifold2d_ellipse") for ext in ("npz", "json")}
    assert sm["prepare_data"] == want == dv["prepare_data"][0]


def test_lint_and_dry_runs_on_shipped_params():
    out = subprocess.run([venv_bin("snakemake"), "--lint"], cwd=REPO, capture_output=True, text=True,
                         timeout=120, env=_env())
    assert out.returncode == 0, out.stdout + out.stderr
    run([venv_bin("snakemake"), "-n"], REPO)
    run([venv_bin("dvc"), "repro", "--dry"], REPO)


def test_snakemake_and_dvc_really_run_the_data_stage(tmp_path):
    """A real `snakemake` run and a real `dvc repro` (temporary git repo, no remote) agree byte for byte."""
    patch = lambda p: p.__setitem__("datasets", ["digits", "manifold2d_half_circle"])  # noqa: E731
    sm_dir = copy_workflow(tmp_path / "sm", patch)
    run([venv_bin("snakemake"), "--cores", "2", "--config", "scale=smoke"], sm_dir)
    dvc_dir = copy_workflow(tmp_path / "dvc", patch)
    run([venv_bin("dvc"), "repro"], dvc_dir)
    status = run([venv_bin("dvc"), "status"], dvc_dir)
    assert "up to date" in status.lower(), status
    for name in ("digits", "manifold2d_half_circle"):
        a = (sm_dir / f"data/processed/{name}.npz").read_bytes()
        b = (dvc_dir / f"data/processed/{name}.npz").read_bytes()
        assert a == b, f"{name}: Snakemake and DVC produced different bytes"
