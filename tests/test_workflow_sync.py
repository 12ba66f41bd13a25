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
        _report_deps_patch(p, dest)
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


def _two_datasets(p: dict) -> None:
    p["datasets"] = ["digits", "manifold2d_ellipse"]
    p["targets"], p["privatize"] = {}, {}
    p["evaluation"]["real_datasets"] = []


def test_report_stage_depends_on_every_target():
    """DVC cannot expand a list of deps from params: the report stage's list is written out and
    must name exactly the targets' metrics and sample grids and the real-data rows."""
    from dpsynth.config import load_params

    params = load_params(REPO / "params.yaml")
    dvc = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]["report"]["deps"]
    want = {f"results/{t}/{f}" for t in params.targets for f in ("metrics.json", "samples.png")}
    want |= {f"results/real_{d}/metrics.json" for d in params.evaluation.real_datasets}
    assert {d for d in dvc if d.startswith("results/")} == want


def _report_deps_patch(p: dict, d: Path) -> None:
    dv = yaml.safe_load((d / "dvc.yaml").read_text())
    deps = ["src/dpsynth/report"]
    deps += [f"results/{t}/{f}" for t in p["targets"] for f in ("metrics.json", "samples.png")]
    deps += [f"results/real_{x}/metrics.json" for x in p["evaluation"]["real_datasets"]]
    dv["stages"]["report"]["deps"] = deps
    (d / "dvc.yaml").write_text(yaml.safe_dump(dv, sort_keys=False))


def test_changing_datasets_changes_both_dags(tmp_path):
    d = copy_workflow(tmp_path / "w", _two_datasets)
    sm, dv = snakemake_outputs(d), dvc_stages(d)
    want = {f"data/processed/{n}.{ext}" for n in ("digits", "manifold2d_ellipse") for ext in ("npz", "json")}
    assert sm["prepare_data"] == want == dv["prepare_data"][0]


def test_lint_and_dry_runs_on_shipped_params():
    """`snakemake --lint`, `snakemake -n` and DVC's view of the shipped pipeline.

    `dvc repro --dry` hashes every stage's dependencies, so on a fresh tree it fails at the
    first stage whose input an upstream stage has not produced yet (treeverse/dvc#9021);
    here it is run for the stages whose inputs exist, `dvc dag` checks the whole graph, and
    the full `dvc repro --dry` is checked after a real run (test below)."""
    out = subprocess.run([venv_bin("snakemake"), "--lint"], cwd=REPO, capture_output=True, text=True,
                         timeout=120, env=_env())
    assert out.returncode == 0, out.stdout + out.stderr
    dry = run([venv_bin("snakemake"), "-n", "--forceall"], REPO)
    for rule in ("prepare_data", "train", "sample", "evaluate", "evaluate_real"):
        assert re.search(rf"^{rule}\s+\d+$", dry, re.M), f"rule {rule} missing from the DAG"
    run([venv_bin("dvc"), "repro", "--dry", "prepare_data"], REPO)
    dag = run([venv_bin("dvc"), "dag", "--md"], REPO)
    assert "evaluate@dps_fmnist" in dag and "train@dps_fmnist" in dag


def smoke_patch(p: dict) -> None:
    p["scale"] = "smoke"
    p["datasets"] = ["fashion_mnist"]
    p["targets"] = {"dps_fmnist": {"dataset": "fashion_mnist", "data": "processed/fashion_mnist"}}
    p["privatize"] = {}
    p["evaluation"]["real_datasets"] = ["fashion_mnist"]


@pytest.mark.slow
def test_snakemake_and_dvc_really_run_the_smoke_pipeline(tmp_path, fashion_dir):
    """A real `snakemake` run and a real `dvc repro` (temporary git repo, no remote) of the whole
    smoke pipeline give the same generator and the same synthetic data; DVC is then clean."""
    sm_dir = copy_workflow(tmp_path / "sm", smoke_patch)
    run([venv_bin("snakemake"), "--cores", "2"], sm_dir, timeout=1200)
    dvc_dir = copy_workflow(tmp_path / "dvc", smoke_patch)
    run([venv_bin("dvc"), "repro"], dvc_dir, timeout=1200)
    status = run([venv_bin("dvc"), "status"], dvc_dir)
    assert "up to date" in status.lower(), status
    run([venv_bin("dvc"), "repro", "--dry"], dvc_dir)  # everything exists now: nothing to run
    import numpy as np
    import torch

    ga = torch.load(sm_dir / "models/dps_fmnist/generator.pt", weights_only=True)["state_dict"]
    gb = torch.load(dvc_dir / "models/dps_fmnist/generator.pt", weights_only=True)["state_dict"]
    assert all(torch.equal(ga[k], gb[k]) for k in ga)
    with np.load(sm_dir / "data/synthetic/dps_fmnist/seed0.npz") as a, \
            np.load(dvc_dir / "data/synthetic/dps_fmnist/seed0.npz") as b:
        assert np.array_equal(a["x"], b["x"]) and np.array_equal(a["y"], b["y"])
    import json

    for d in (sm_dir, dvc_dir):
        m = json.loads((d / "results/dps_fmnist/metrics.json").read_text())
        assert m["scale"] == "smoke" and set(m["classifiers"]) == {"logreg", "mlp", "cnn"}
        assert m["privacy"]["epsilon"]["rdp_classic"] <= 10.0
        assert m["train"]["scale_overrides"]["lr"] == {"paper": 1e-5, "this_scale": 1e-3}  # recorded, not silent
        assert m["fid"]["available"] in (True, False) and (m["fid"]["fid"] is None) != m["fid"]["available"]
        real = json.loads((d / "results/real_fashion_mnist/metrics.json").read_text())
        assert real["classifiers"]["logreg"]["mean"] > 0.7
