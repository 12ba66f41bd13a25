"""`benchmarks/gpu.sh`: its CPU dry run end to end (the real script, the real CLI stages), its
pre-flight refusal when the paper-scale data is missing (the GPU machine has no network) and the
refusals of its JSON helper (benchmarks/gpu_summary.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "benchmarks" / "gpu.sh"
SUMMARY = REPO / "benchmarks" / "gpu_summary.py"
#: Settings a developer's shell may export; the tests set what they need explicitly.
SCRIPT_ENV = ("DEVICE", "OUT", "DATA_ROOT", "PARAMS", "SLICE_STEPS", "PROBE_STEPS", "FID_WEIGHTS", "LEVERS", "BENCH_STEPS",
              "BENCH_TRIALS", "BENCH_WARMUP", "SWEEP", "KEEP_WORK")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SCRIPT_ENV}
    env.update(extra)
    return env


def _results_listing() -> set[str]:
    """The repo's default results directory: a dry run must not write there."""
    root = REPO / "benchmarks" / "results"
    return {str(p.relative_to(root)) for p in root.rglob("*")} if root.is_dir() else set()


@pytest.mark.slow
def test_dry_run_writes_the_step_sweep_train_slice_and_fidelity_json(tmp_path: Path) -> None:
    out = tmp_path / "out"
    before = _results_listing()
    t0 = time.perf_counter()
    r = subprocess.run(["bash", str(SCRIPT), "--dry-run"], cwd=tmp_path, env=_env(OUT=str(out)),
                       capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr[-3000:]
    assert _results_listing() == before
    # the temporary work dir (data, models, the private checkpoints) is gone; only the results stay
    assert sorted(p.name for p in out.iterdir()) == ["gpu_fidelity.json", "gpu_fidelity_samples.png",
                                                      "gpu_ops.json", "gpu_step_sweep.json", "gpu_summary.json",
                                                      "gpu_train_slice.json"]

    bench = json.loads((out / "gpu_step_sweep.json").read_text())
    assert bench["device"] == "cpu"
    # the levers the dry run adds (two cheap ones), one at a time, and the floor with both
    assert set(bench["steps"]) == {"reference", "fast", "generator_floor", "fast+cudnn_benchmark",
                                   "fast+cudnn_benchmark+fused_adam", "generator_floor+cudnn_benchmark+fused_adam",
                                   "fast_logsumexp"}  # the CPU's step with torch.logsumexp, beside the floored one
    assert bench["levers"]["order"] == ["cudnn_benchmark", "fused_adam"]
    assert all(isinstance(v["steps_per_s"], float) and v["steps_per_s"] > 0 for v in bench["steps"].values())
    assert bench["fast_path"] == "eager" and bench["paths"]["fast"] == "eager"  # a CUDA graph only on CUDA
    pk = bench["packing"]  # K = 1, 2 packed, and T(K) = a + bK fitted through them
    assert pk["ks"] == [1, 2] and pk["modes"] == ["loop"] and set(pk["config_steps_per_s"]["loop"]) == {"1", "2"}
    fit = pk["fit_T_of_K"]["loop"]
    t = {int(k): int(k) / v for k, v in pk["config_steps_per_s"]["loop"].items()}  # seconds per packed step
    assert fit["a_ms"] + fit["b_ms"] == pytest.approx(1000 * t[1], rel=1e-6)  # two points: the line through them
    assert fit["a_ms"] + 2 * fit["b_ms"] == pytest.approx(1000 * t[2], rel=1e-6)
    ops = json.loads((out / "gpu_ops.json").read_text())  # the guard's counts, each path
    counts = {k: v["per_step"] for k, v in ops["op_counts"].items()}
    assert counts["fused (CUDA default)"] < counts["unfused, torch.logsumexp"] < counts["unfused, floored (the CPU's softmin)"]
    assert "graphed_step_profile" not in ops  # the kernel profile needs CUDA
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

    fi = json.loads((out / "gpu_fidelity.json").read_text())
    assert fi["dry_run"] is True and fi["experiment"] == "dps_digits28" and fi["scale"] == "smoke"
    assert fi["steps"] == fi["steps_requested"] == 6  # PROBE_STEPS, the whole budget (released, not a slice)
    assert fi["device"] == "cpu" and fi["device_name"] and fi["torch"] and fi["date"]
    w = fi["wall_seconds"]
    assert set(w) == {"train", "sample", "evaluate", "total"} and all(v > 0 for v in w.values())
    assert w["total"] == pytest.approx(w["train"] + w["sample"] + w["evaluate"], abs=2e-3)
    # the loop's own rate fits in the train stage's wall-clock, the evaluate stage's own seconds in its
    assert fi["train_steps_per_s"] > 0 and 6 / fi["train_steps_per_s"] < w["train"]
    assert fi["train_steps_per_s_wall"] == pytest.approx(6 / w["train"], rel=1e-9)
    ev = fi["evaluate_seconds"]
    assert {"load", "classifiers", "fid"} <= set(ev) and 0 < sum(ev.values()) < w["evaluate"]
    assert set(fi["accuracy"]) == {"logreg", "mlp", "cnn"} and all(0 <= v <= 1 for v in fi["accuracy"].values())
    assert fi["metrics_device"]["classifiers"] == {"logreg": ["cpu"], "mlp": ["cpu"], "cnn": ["cpu"]}
    if fi["fid"] is None:  # no Inception weights on this machine (the probe never downloads them)
        assert fi["fid_unavailable_reason"] and fi["kid"] is None and fi["metrics_device"]["fid"] is None
    else:
        assert fi["fid"] >= 0 and isinstance(fi["kid"], float) and fi["fid_unavailable_reason"] is None
        assert fi["metrics_device"]["fid"] == "cpu"
    # the experiment's own privacy target, spent (calibrated sigma) in the probe's 6 steps
    assert (fi["target_epsilon"], fi["delta"], fi["epsilon_convention"]) == (10.0, 1e-5, "rdp_classic")
    assert 0.99 * fi["target_epsilon"] < fi["epsilon"] <= fi["target_epsilon"] and fi["sigma"] > 0
    png = (out / "gpu_fidelity_samples.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 1000 and fi["samples_png"] == "gpu_fidelity_samples.png"

    summ = json.loads((out / "gpu_summary.json").read_text())
    assert summ["sweep"]["target"] == 4.0
    assert summ["sweep"]["value"] == pytest.approx(sw["ratio_batched_over_sequential"])
    po = summ["packed_over_one_graphed"]
    assert (po["target"], po["op"], po["configs"], po["one_run_path"]) == (5.0, ">=", 2, "eager")
    assert po["value"] == pytest.approx(sw["config_steps_per_s"]["batched"] / bench["steps"]["fast"]["steps_per_s"],
                                        rel=1e-9)
    assert po["met"] == (po["value"] >= 5.0)
    assert summ["fidelity"]["steps"] == 6 and summ["fidelity"]["accuracy"] == fi["accuracy"]
    assert summ["fidelity"]["evaluate_seconds"] == ev and summ["fidelity"]["fid"] == fi["fid"]
    ck = summ["check_minutes"]
    assert ck["target"] == 8.0 and 0 < ck["value"] * 60 < wall and ck["met"] == (ck["value"] < 8)
    assert "DRY RUN" in r.stdout and "target > 4x" in r.stdout and "steps/s >= 1900" in r.stdout
    assert "target >= 5x" in r.stdout and "fidelity probe (dps_digits28, scale smoke, 6 steps on cpu" in r.stdout
    assert "whole check" in r.stdout and "gpu_fidelity_samples.png" in r.stderr.splitlines()[-1]


def test_gpu_mode_runs_the_paper_settings() -> None:
    """What only a GPU machine runs, as written: the sweep of 8, dps_mnist at scale paper, a
    20,000-step slice, an 18,000-step probe at the quick scale evaluated on the device, the CUDA
    device. (The dry run above runs the same lines with tiny values.)"""
    text = SCRIPT.read_text()
    gpu = text[text.index("else\n  DEVICE=${DEVICE:-cuda}"):]
    assert re.search(r'--sweep "\$\{SWEEP:-8\}"', gpu)
    assert '--levers "${LEVERS:-all}"' in gpu  # every GPU lever of the step, measured
    assert "EXPERIMENT=dps_mnist" in gpu and "SLICE_STEPS=${SLICE_STEPS:-20000}" in gpu
    assert "PROBE_STEPS=${PROBE_STEPS:-18000}" in gpu and "PROBE_SCALE=quick" in gpu
    assert "--mode paper" in text and "--max-steps-this-run" in text
    assert '--mode probe --scale "$PROBE_SCALE"' in text and '--total-steps "$PROBE_STEPS"' in text
    assert re.search(r'dpsynth\.cli evaluate "\$EXPERIMENT" [^\n]*--device "\$DEVICE"', text)


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


def _probe_inputs(tmp_path: Path, *, metrics: bool = True) -> list[str]:
    """`gpu_summary.py fidelity`'s arguments over hand-made inputs of an 18,000-step probe whose FID
    had no weights; ``metrics=False``: `dpsynth evaluate` wrote no metrics.json."""
    (tmp_path / "train.txt").write_text("dpsynth: a log line\n" + json.dumps(
        {"experiment": "dps_mnist", "steps": 18000, "finished": True, "steps_per_s_this_run": 330.0,
         "cuda_graph": True}, indent=2) + "\n")
    (tmp_path / "privacy.json").write_text(json.dumps(
        {"epsilon": {"rdp_classic": 9.98}, "headline": "rdp_classic", "target_epsilon": 10.0, "delta": 1e-5,
         "sigma": 0.8, "steps": 18000}))
    if metrics:
        (tmp_path / "metrics.json").write_text(json.dumps(
            {"experiment": "dps_mnist", "scale": "quick", "n_synthetic": 10000,
             "classifiers": {"cnn": {"mean": 0.9, "runs": [{"device": "cuda:0"}]}},
             "fid": {"available": False, "fid": None, "reason": "no Inception weights"},
             "seconds": {"load": 0.5, "classifiers": 6.0, "fid": 0.0}}))
    (tmp_path / "samples.png").write_bytes(PNG_MAGIC + b"grid")
    return [sys.executable, str(SUMMARY), "fidelity", "--train-stdout", str(tmp_path / "train.txt"),
            "--privacy", str(tmp_path / "privacy.json"), "--metrics", str(tmp_path / "metrics.json"),
            "--samples-png", str(tmp_path / "samples.png"), "--samples-out", str(tmp_path / "out" / "grid.png"),
            "--train-seconds", "60", "--sample-seconds", "5", "--evaluate-seconds", "20",
            "--device", "cpu", "--out", str(tmp_path / "out" / "fidelity.json")]


def test_fidelity_refuses_a_missing_metrics_json_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    r = subprocess.run(_probe_inputs(tmp_path, metrics=False) + ["--steps-requested", "18000"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [f"gpu_summary: {tmp_path / 'metrics.json'}: not found "
                                     "(`dpsynth evaluate` wrote no such file)"]
    assert not list((tmp_path / "out").iterdir())  # neither the JSON nor the sample grid


def test_fidelity_records_an_unavailable_fid_and_refuses_other_steps(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    r = subprocess.run(_probe_inputs(tmp_path) + ["--steps-requested", "18000"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    fi = json.loads((tmp_path / "out" / "fidelity.json").read_text())
    assert fi["fid"] is None and fi["kid"] is None and fi["fid_unavailable_reason"] == "no Inception weights"
    assert fi["accuracy"] == {"cnn": 0.9} and fi["metrics_device"] == {"classifiers": {"cnn": ["cuda:0"]}, "fid": None}
    assert fi["wall_seconds"] == {"train": 60.0, "sample": 5.0, "evaluate": 20.0, "total": 85.0}
    assert fi["train_steps_per_s_wall"] == 300.0 and fi["train_step_path"] == "cuda_graph" and fi["epsilon"] == 9.98
    assert (tmp_path / "out" / "grid.png").read_bytes() == PNG_MAGIC + b"grid"
    for p in (tmp_path / "out").iterdir():
        p.unlink()
    r = subprocess.run(_probe_inputs(tmp_path) + ["--steps-requested", "20000"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1
    assert "the probe trained 18000 steps" in r.stderr and "PROBE_STEPS asked 20000" in r.stderr
    assert not list((tmp_path / "out").iterdir())


def test_train_max_steps_this_run_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    from dpsynth.cli import main

    with pytest.raises(SystemExit) as e:
        main(["train", "dps_mnist", "--max-steps-this-run", "0"])
    assert e.value.code == 2
    assert "--max-steps-this-run: must be >= 1, got 0" in capsys.readouterr().err


def test_the_prepared_device_call_names_files_that_exist_and_parses() -> None:
    """benchmarks/device-call.sh (the one call on a lent GPU machine) is valid bash and every test file and
    script it runs exists here -- its dry run (`--dry-run`, ~5 min on the 2-core machine) is run by hand, not
    in CI."""
    script = SCRIPT.parent / "device-call.sh"
    r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    text = script.read_text()
    root = SCRIPT.parents[1]
    named = set(re.findall(r"(tests/test_\w+\.py|benchmarks/[\w.-]+\.(?:py|sh))", text))
    assert {"tests/test_ot_fused.py", "benchmarks/gpu.sh", "benchmarks/ewgan_packed.py"} <= named
    assert all((root / p).is_file() for p in named), sorted(p for p in named if not (root / p).is_file())
