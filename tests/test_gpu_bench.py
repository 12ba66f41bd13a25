"""`benchmarks/gpu.sh`: its CPU dry run end to end (the real script, the real CLI stages) and
its pre-flight refusal when the paper-scale data is missing (the GPU machine has no network)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "benchmarks" / "gpu.sh"
SUMMARY = REPO / "benchmarks" / "gpu_summary.py"
#: Settings a developer's shell may export; the tests set what they need explicitly.
SCRIPT_ENV = ("DEVICE", "OUT", "DATA_ROOT", "PARAMS", "SLICE_STEPS", "BENCH_STEPS", "BENCH_TRIALS", "BENCH_WARMUP",
              "SWEEP", "KEEP_WORK")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRIPT_ENV}
    env.update(extra)
    return env


def _results_listing() -> set[str]:
    """The repo's default results directory: a dry run must not write there."""
    root = REPO / "benchmarks" / "results"
    return {str(p.relative_to(root)) for p in root.rglob("*")} if root.is_dir() else set()


@pytest.mark.slow
def test_dry_run_writes_the_step_sweep_and_train_slice_json(tmp_path: Path) -> None:
    out = tmp_path / "out"
    before = _results_listing()
    r = subprocess.run(["bash", str(SCRIPT), "--dry-run"], cwd=tmp_path, env=_env(OUT=str(out)),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _results_listing() == before
    # the temporary work dir (data, models, the private checkpoint) is gone; only the results stay
    assert sorted(p.name for p in out.iterdir()) == ["gpu_step_sweep.json", "gpu_summary.json",
                                                      "gpu_train_slice.json"]

    bench = json.loads((out / "gpu_step_sweep.json").read_text())
    assert bench["device"] == "cpu"
    assert set(bench["steps"]) == {"reference", "fast", "generator_floor"}
    assert all(isinstance(v["steps_per_s"], float) and v["steps_per_s"] > 0 for v in bench["steps"].values())
    assert bench["fast_path"] == "eager" and bench["paths"]["fast"] == "eager"  # a CUDA graph only on CUDA
    sw = bench["sweep"]
    assert sw["configs"] == 2 and len(sw["members"]) == 2
    assert all(v > 0 for v in sw["config_steps_per_s"].values())

    tr = json.loads((out / "gpu_train_slice.json").read_text())
    assert tr["dry_run"] is True and tr["scale"] == "smoke" and tr["experiment"] == "dps_digits28"
    assert tr["steps_this_run"] == 6 and tr["finished"] is False  # --max-steps-this-run 6 of 200
    assert tr["total_steps"] == 200
    assert isinstance(tr["steps_per_s"], float) and tr["steps_per_s"] > 0
    assert tr["projected_full_hours"] == pytest.approx(tr["total_steps"] / tr["steps_per_s"] / 3600, rel=1e-9)
    assert tr["projected_full_minutes"] == pytest.approx(tr["projected_full_hours"] * 60, rel=1e-9)
    t = tr["targets"]
    assert (t["steps_per_s"]["target"], t["full_run_minutes"]["target"]) == (1900.0, 30.0)
    assert t["steps_per_s"]["met"] == (tr["steps_per_s"] >= 1900)
    assert t["full_run_minutes"]["met"] == (tr["projected_full_minutes"] < 30)
    assert tr["device_name"] and tr["torch"] and tr["date"]

    summ = json.loads((out / "gpu_summary.json").read_text())
    assert summ["sweep"]["target"] == 4.0
    assert summ["sweep"]["value"] == pytest.approx(sw["ratio_batched_over_sequential"])
    assert "DRY RUN" in r.stdout and "target > 4x" in r.stdout and "steps/s >= 1900" in r.stdout


def test_gpu_mode_runs_the_paper_settings() -> None:
    """What only a GPU machine runs, as written: the sweep of 8, dps_mnist at scale paper, a
    20,000-step slice, the CUDA device. (The dry run above runs the same lines with tiny values.)"""
    text = SCRIPT.read_text()
    gpu = text[text.index("else\n  DEVICE=${DEVICE:-cuda}"):]
    assert re.search(r'--sweep "\$\{SWEEP:-8\}"', gpu)
    assert "EXPERIMENT=dps_mnist" in gpu and "SLICE_STEPS=${SLICE_STEPS:-20000}" in gpu
    assert "--mode paper" in text and "--max-steps-this-run" in text


def test_missing_mnist_is_a_clear_error_before_any_work(tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = subprocess.run(["bash", str(SCRIPT)], cwd=tmp_path,
                       env=_env(OUT=str(out), DATA_ROOT=str(tmp_path / "nodata")),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert f"{tmp_path / 'nodata'}/processed/mnist.npz not found" in r.stderr
    assert "dpsynth data prepare mnist" in r.stderr and "no network" in r.stderr
    assert not list(out.glob("*"))  # nothing written, nothing started


def test_slice_refuses_a_train_summary_without_the_loop_rate(tmp_path: Path) -> None:
    """A train summary lacking steps_per_s_this_run/total_steps cannot be projected: one line, exit 2."""
    stdout = tmp_path / "train_stdout.txt"
    stdout.write_text('dpsynth: a log line\n{\n  "experiment": "dps_mnist",\n  "finished": false,\n  "steps": 6\n}\n')
    r = subprocess.run([sys.executable, str(SUMMARY), "slice", "--train-stdout", str(stdout), "--steps-requested", "6",
                        "--device", "cpu", "--scale", "paper", "--out", str(tmp_path / "slice.json")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "lacks steps_per_s_this_run, total_steps" in r.stderr
    assert not (tmp_path / "slice.json").exists()


def test_train_max_steps_this_run_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    from dpsynth.cli import main

    with pytest.raises(SystemExit) as e:
        main(["train", "dps_mnist", "--max-steps-this-run", "0"])
    assert e.value.code == 2
    assert "--max-steps-this-run: must be >= 1, got 0" in capsys.readouterr().err
