"""The `slurm` profile against a real single-node SLURM cluster (slurmctld + slurmd + munge).

The cluster is configured on 127.0.0.1 in a temporary directory by scripts/slurm-cluster.sh and
stopped at the end, leaving no daemon or job behind. The `smoke` pipeline runs through
`snakemake --cores 8 --profile slurm` (every non-local job an `sbatch`) and must produce what a
local run produces. A profile naming a missing partition, or a controller nobody answers on,
must fail with SLURM's own message within a bounded time instead of hanging.

The test cluster has no job accounting (slurmdbd needs a database), so the runs add
`--slurm-status-command squeue` (the cluster keeps finished jobs visible for MinJobAge=3600 s)
and poll after 2 s instead of the plugin's default 40 s; everything else is the shipped profile.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from tests.conftest import REPO, clear_pipeline, require, venv_bin
from tests.pipelines import copy_workflow, copy_workspace, smoke_patch

# xdist: one worker runs the cluster (group "slurm"); its pipeline test is scheduled first (conftest)
pytestmark = [pytest.mark.pipeline, pytest.mark.slow, pytest.mark.xdist_group("slurm"), pytest.mark.timeout(2400)]

SCRIPT = REPO / "scripts" / "slurm-cluster.sh"
DAEMONS = ("/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged", "/usr/sbin/mungekey", "/usr/bin/sbatch")
# Only what the test cluster needs on top of the shipped profile (see the module docstring).
TEST_CLUSTER_ARGS = ["--slurm-status-command", "squeue", "--slurm-init-seconds-before-status-checks", "2"]
# One experiment's chain -- train, sample, evaluate, one sbatch job of each kind -- is the smallest run that
# shows every kind of job goes through sbatch with the override; the whole smoke DAG (8 cluster jobs) took
# 12 minutes of a 2-core CI machine beside the session's other pipelines.
CLUSTER_TARGET = "results/runs/dps_fmnist/metrics.json"


@dataclass
class Cluster:
    dir: Path
    env: dict[str, str]  # os.environ + SLURM_CONF + PATH (the cluster's client wrappers, the venv)


def _cluster_env(exports: str) -> dict[str, str]:
    env = dict(os.environ)
    path = str(Path(venv_bin("python")).parent) + os.pathsep + env.get("PATH", "")
    for name, value in re.findall(r"^export (\w+)=(.*)$", exports, re.M):
        env[name] = value.replace("$PATH", path)
    assert "SLURM_CONF" in env and Path(env["SLURM_CONF"]).is_file(), exports
    return env


def _alive(pid: int) -> bool:
    """True for a running process (a zombie waiting for its reaper counts as gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return not re.search(r"^State:\s+Z", status, re.M)


def _processes_of(cluster_dir: Path) -> list[int]:
    """Processes started by this cluster: daemons, job steps and jobs all carry its SLURM_CONF."""
    marker = f"SLURM_CONF={cluster_dir}/etc/slurm.conf".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if marker in (proc / "environ").read_bytes().split(b"\0") and _alive(int(proc.name)):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.fixture(scope="module")
def slurm_cluster() -> Iterator[Cluster]:
    missing = [d for d in DAEMONS if not os.access(d, os.X_OK)]
    require(not missing, f"Debian packages slurm-wlm and munge not installed (missing {missing}; "
                         "scripts/system-packages.sh installs them)")
    require(os.geteuid() == 0, "a SLURM test cluster needs root: slurmd starts jobs as the submitting user")
    # A short path: unix sockets (munge's, slurmstepd's) are limited to 108 characters.
    d = Path(tempfile.mkdtemp(prefix="dpsynth-slurm-", dir="/tmp"))
    try:
        start = subprocess.run(["bash", str(SCRIPT), "start", str(d)], capture_output=True, text=True, timeout=180)
        assert start.returncode == 0, f"cluster did not start:\n{start.stdout}\n{start.stderr}"
        pids = [int((d / "run" / f"{n}.pid").read_text()) for n in ("munged", "slurmctld", "slurmd")]
        assert all(_alive(p) for p in pids)
        yield Cluster(d, _cluster_env(start.stdout))
    finally:
        stop = subprocess.run(["bash", str(SCRIPT), "stop", str(d)], capture_output=True, text=True, timeout=180)
        left = _processes_of(d)
        shutil.rmtree(d, ignore_errors=True)
    assert stop.returncode == 0, stop.stderr
    assert not any(_alive(p) for p in pids), "a SLURM/munge daemon outlived the fixture"
    assert not left, f"processes of the test cluster left running: {left}"


def _snakemake(cwd: Path, env: dict[str, str], *args: str, timeout: float) -> tuple[int, str, float]:
    t0 = time.monotonic()
    res = subprocess.run([venv_bin("snakemake"), *args], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=timeout)
    return res.returncode, res.stdout + res.stderr, time.monotonic() - t0


def _with_profile(d: Path, name: str = "slurm", **default_resources: str) -> Path:
    """Copy the shipped profile into a workflow copy (optionally as a site-edited variant)."""
    shutil.copytree(REPO / "slurm", d / name)
    if default_resources:
        cfg_path = d / name / "config.v8+.yaml"
        cfg = yaml.safe_load(cfg_path.read_text())
        cfg["default-resources"].update(default_resources)
        cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return d


@pytest.mark.smoke_runs
def test_smoke_pipeline_through_sbatch_equals_a_local_run(slurm_cluster, request, tmp_path):
    """Acceptance: `snakemake --cores 8 --profile slurm` completes the smoke pipeline on the
    cluster; generator, synthetic data and privacy report equal those of the session's local run
    (tests/pipelines.py). The cluster copy's params.yaml says `scale: quick` and the run passes
    `--config scale=smoke`: equal outputs show the override reached every job, through sbatch.
    The local run is asked for after the cluster's: it runs in the background meanwhile."""
    slurm_dir = _with_profile(copy_workflow(tmp_path / "slurm", lambda p: (smoke_patch(p), p.update(scale="quick"))))
    assert yaml.safe_load((slurm_dir / "params.yaml").read_text())["scale"] == "quick"
    env = dict(slurm_cluster.env)
    rc, out, _ = _snakemake(slurm_dir, env, "--cores", "8", "--profile", "slurm", *TEST_CLUSTER_ARGS,
                            "--config", "scale=smoke", "--", CLUSTER_TARGET, timeout=1200)
    assert rc == 0, out[-6000:]
    local_dir = request.getfixturevalue("smoke_snakemake")

    # Every cluster job really went through sbatch, and its SLURM log was kept (logs per job).
    submitted = dict(re.findall(r"Job \d+ has been submitted with SLURM jobid (\d+) \(log: (\S+)\)", out))
    # train, sample and evaluate of dps_fmnist (the data and settings jobs are local rules)
    assert len(submitted) == 3, out[-4000:]
    rules = sorted(part for log in submitted.values() for part in Path(log).parts if part.startswith("rule_"))
    assert rules == ["rule_evaluate", "rule_sample", "rule_train"], sorted(submitted.values())
    assert all(Path(log).is_file() for log in submitted.values())
    assert list((slurm_dir / "logs/slurm/rule_train").rglob("*.log")), "no per-job SLURM log for train"
    # SLURM's own record of the train job: no GPU at the smoke scale (workflow/resources.yaml: only the
    # paper scale asks; tests/test_workflow_resources.py checks every rule and scale), the rule's memory
    # and time limit.
    train_id = next(j for j, log in submitted.items() if "/rule_train/" in log)
    job = subprocess.run(["scontrol", "show", "job", train_id], env=env, capture_output=True, text=True,
                         timeout=60).stdout
    assert "JobState=COMPLETED" in job and not re.search(r"TresPerJob=\S*gpu", job), job
    assert "TimeLimit=00:20:00" in job and "mem=2000M" in job, job

    ga = torch.load(local_dir / "models/dps_fmnist/generator.pt", weights_only=True)["state_dict"]
    gb = torch.load(slurm_dir / "models/dps_fmnist/generator.pt", weights_only=True)["state_dict"]
    assert ga.keys() == gb.keys() and all(torch.equal(ga[k], gb[k]) for k in ga)
    sets = sorted((local_dir / "data/synthetic/dps_fmnist").glob("*.npz"))
    assert sets, "the local run sampled no synthetic set"
    for f in sets:
        with np.load(f) as a, np.load(slurm_dir / "data/synthetic/dps_fmnist" / f.name) as b:
            assert a.files == b.files and "provenance" in a.files
            assert all(np.array_equal(a[k], b[k]) for k in a.files if k != "provenance")
            # torch.save writes a random serialization id, so equal weights hash differently.
            pa, pb = (json.loads(str(z["provenance"])) for z in (a, b))
            assert pa.pop("generator_sha256") != "" and pb.pop("generator_sha256") != "" and pa == pb
    for rel in ("models/dps_fmnist/privacy.json",):
        assert json.loads((local_dir / rel).read_text()) == json.loads((slurm_dir / rel).read_text())
    m = json.loads((slurm_dir / CLUSTER_TARGET).read_text())
    assert m["scale"] == "smoke" and set(m["classifiers"]) == {"logreg", "mlp", "cnn"}


@pytest.fixture(scope="module")
def tiny_workflow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cluster job only (the real-data row on the bundled digits), its data prepared locally, once
    for the module: each test below works on its own copy (``copy_workspace``, timestamps and Snakemake's
    records kept, so the copy's data job stays done)."""
    def patch(p: dict) -> None:
        p["scale"] = "smoke"
        p["datasets"] = ["digits28"]
        clear_pipeline(p)
        p["evaluation"]["real_datasets"] = ["digits28"]

    d = copy_workflow(tmp_path_factory.mktemp("tiny") / "w", patch)
    res = subprocess.run([venv_bin("snakemake"), "--cores", "2", "data/processed/digits28.npz"], cwd=d,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return d


def test_missing_partition_fails_with_slurms_message(slurm_cluster, tiny_workflow, tmp_path):
    d = _with_profile(copy_workspace(tiny_workflow, tmp_path / "w"), "badsite", slurm_partition="nosuchpartition")
    rc, out, secs = _snakemake(d, slurm_cluster.env, "--cores", "8", "--profile", "badsite", *TEST_CLUSTER_ARGS,
                               timeout=600)
    assert rc != 0, out[-4000:]
    assert "SLURM sbatch failed" in out and re.search(r"invalid partition", out, re.I), out[-4000:]
    assert secs < 300, f"took {secs:.0f} s to give up"


def test_unreachable_controller_fails_with_slurms_message(slurm_cluster, tiny_workflow, tmp_path):
    """The same cluster's config with the controller moved to a port nobody listens on."""
    d = copy_workspace(tiny_workflow, tmp_path / "w")
    _with_profile(d)
    conf = Path(slurm_cluster.env["SLURM_CONF"]).read_text()
    dead = tmp_path / "dead-controller.conf"
    dead_conf = re.sub(r"^SlurmctldPort=\d+$", "SlurmctldPort=9", conf, flags=re.M)  # port 9: discard
    # a client retries the controller for MessageTimeout seconds per call, and the plugin retries: 2 s, not 10
    dead.write_text(re.sub(r"^MessageTimeout=\d+$", "MessageTimeout=2", dead_conf, flags=re.M))
    env = {**slurm_cluster.env, "SLURM_CONF": str(dead)}
    rc, out, secs = _snakemake(d, env, "--cores", "8", "--profile", "slurm", *TEST_CLUSTER_ARGS, timeout=600)
    assert rc != 0, out[-4000:]
    # The plugin's first call to SLURM (sinfo or sbatch) is the one that reports it.
    assert "Error in rule evaluate_real" in out and "Unable to contact slurm controller" in out, out[-4000:]
    assert secs < 300, f"took {secs:.0f} s to give up"
