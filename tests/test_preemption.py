"""Preemption: a training job killed mid-run resumes exactly when it is resubmitted.

SLURM preempts or times out a job with SIGTERM (then SIGKILL); a node can also just die. Each
case here kills a real `dpsynth train` process, runs the same command again (what the retry /
requeue does) and demands the final generator be bit-identical to an uninterrupted run's and the
privacy report identical (the steps spent before the kill are counted). One case kills the
process in the middle of writing a checkpoint: the previous checkpoint must survive intact.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
import yaml

from tests.conftest import digits28_smoke_params, with_digits28

EXP = "dps_digits"
STEPS = 9
EVERY = 3  # checkpoint interval: checkpoints at steps 3, 6 (and a final one marked done)
CKPT = "checkpoint.pt"

# Runs `dpsynth` with torch.save wrapped so that the Nth write of a checkpoint's temporary file
# puts half of the real bytes on disk and then SIGKILLs the process: a kill during the write.
KILL_DURING_WRITE = textwrap.dedent("""
    import io, os, signal, sys
    import torch
    real_save, calls = torch.save, [0]
    def save(obj, f, *args, **kwargs):
        name = str(f) if isinstance(f, (str, os.PathLike)) else str(getattr(f, "name", ""))
        if os.path.basename(name).startswith(".checkpoint.pt."):
            calls[0] += 1
            if calls[0] == int(os.environ["KILL_AT_CHECKPOINT"]):
                buf = io.BytesIO()
                real_save(obj, buf, *args, **kwargs)
                with open(name, "wb") as fh:
                    fh.write(buf.getvalue()[: len(buf.getvalue()) // 2])
                    fh.flush()
                    os.fsync(fh.fileno())
                os.kill(os.getpid(), signal.SIGKILL)
        return real_save(obj, f, *args, **kwargs)
    torch.save = save
    from dpsynth.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def test_checkpoint_every_must_be_positive(capsys: pytest.CaptureFixture[str]):
    """0 would never checkpoint (and the loop takes step % N): refused before any work starts (by the
    argument parser: `dpsynth`'s own, run in this process)."""
    from dpsynth.cli import main

    with pytest.raises(SystemExit) as e:
        main(["train", "dps_fmnist", "--checkpoint-every", "0"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--checkpoint-every: must be >= 1, got 0" in err, err


def _params() -> dict:
    """Smoke params with one fast DP-Sinkhorn experiment on the bundled digits. Reproducible noise:
    a resumed run is compared bit for bit with an uninterrupted one. The paper's full-width generator
    (smoke trains at a quarter of it): ~0.25 s per step keeps the kills below well inside the run."""
    p = digits28_smoke_params(EXP, STEPS, privacy_noise="reproducible")
    p["scales"]["smoke"]["hparams"]["dp_sinkhorn"] = {"model_dim": 64}
    return p


def _cmd(out: str, *extra: str) -> list[str]:
    return ["train", EXP, "--params", "params.yaml", "--out", out, "--private-out", f"{out}.private", "--device", "cpu",
            "--checkpoint-every", str(EVERY), *extra]


def _dpsynth(cwd: Path, args: list[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dpsynth.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def _start(cwd: Path, args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "dpsynth.cli", *args], cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _wait_for_file(path: Path, proc: subprocess.Popen[str], timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"training ended (rc {proc.returncode}) before {path.name} appeared:\n{err[-3000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"{path} did not appear within {timeout} s")
        time.sleep(0.01)


def _private(run_dir: Path) -> Path:
    """Where `--private-out {out}.private` puts the run's checkpoint: {out}.private/runs/{experiment}."""
    return run_dir.parent.with_name(f"{run_dir.parent.name}.private") / "runs" / run_dir.name


def _checkpoint_step(run_dir: Path) -> int:
    state = torch.load(_private(run_dir) / CKPT, map_location="cpu", weights_only=False)
    assert not state["done"]
    return int(state["step"])


def _resume_and_compare(cwd: Path, out: str, reference: Path, resumed_from: int) -> None:
    """Resubmit (the same command), then demand the uninterrupted run's generator and report."""
    res = _dpsynth(cwd, _cmd(out))  # progress on: its first line says where the run picked up
    assert res.returncode == 0, res.stderr[-3000:]
    first = next(ln for ln in res.stderr.splitlines() if ln.startswith(f"[train {EXP}] "))
    assert first.startswith(f"[train {EXP}] step {resumed_from}/{STEPS} (") and first.endswith("started"), \
        f"the resubmitted run did not start at the checkpoint: {first!r}"
    assert f"| 0/{STEPS} [" not in res.stderr, "the resubmitted run started over from step 0"
    run_dir = cwd / out / EXP
    a = torch.load(reference / "generator.pt", weights_only=True)
    b = torch.load(run_dir / "generator.pt", weights_only=True)
    assert a["arch"] == b["arch"] and a["meta"] == b["meta"]
    assert a["state_dict"].keys() == b["state_dict"].keys()
    for k in a["state_dict"]:
        assert torch.equal(a["state_dict"][k], b["state_dict"][k]), f"generator weight {k} differs after resume"
    pa = json.loads((reference / "privacy.json").read_text())
    pb = json.loads((run_dir / "privacy.json").read_text())
    assert pb["steps"] == STEPS, "steps spent before the kill were not counted"
    assert pa == pb  # same epsilon (every accountant), sigma, q, steps


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, digits28_processed: Path) -> Path:
    """A working directory with the params, the prepared data (the session's digits28) and an
    uninterrupted reference run. The reference is `dpsynth train` run in this process (nothing in it
    is killed; a subprocess would only add ~6 s of imports): the killed-and-resubmitted runs below,
    real processes, must match it bit for bit all the same."""
    from dpsynth.cli import main

    d = tmp_path_factory.mktemp("preempt")
    (d / "params.yaml").write_text(yaml.safe_dump(_params(), sort_keys=False))
    assert _params()["data"]["root"] == "data"
    with_digits28(digits28_processed, d / "data")
    cwd, threads = os.getcwd(), torch.get_num_threads()
    os.chdir(d)
    try:
        assert main(_cmd("reference", "--no-progress")) == 0
    finally:
        os.chdir(cwd)
        torch.set_num_threads(threads)  # the stage pins torch's threads (params.yaml's `threads`)
    ref = d / "reference" / EXP
    assert json.loads((ref / "privacy.json").read_text())["steps"] == STEPS
    return d


@pytest.mark.slow
def test_sigterm_checkpoints_and_exits_then_resumes_exactly(workdir):
    """SLURM's SIGTERM (preemption, time limit): checkpoint at the next step boundary, exit 2."""
    run_dir = workdir / "sigterm" / EXP
    proc = _start(workdir, _cmd("sigterm", "--no-progress"))
    _wait_for_file(_private(run_dir) / CKPT, proc)  # the first periodic checkpoint: training is under way
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, f"rc {proc.returncode}:\n{err[-3000:]}"
    assert "SIGTERM at step" in err and "resubmit to resume" in err, err[-2000:]
    stopped_at = int(err.split("SIGTERM at step ")[1].split(";")[0])
    assert EVERY <= stopped_at < STEPS
    assert _checkpoint_step(run_dir) == stopped_at  # the checkpoint is the state at the signal
    assert not (run_dir / "generator.pt").exists(), "an interrupted run must not release a generator"
    _resume_and_compare(workdir, "sigterm", workdir / "reference" / EXP, stopped_at)


@pytest.mark.slow
def test_sigkill_mid_run_resumes_from_last_checkpoint(workdir):
    """SIGKILL (after SLURM's KillWait, or a dead node): no chance to save; the last periodic
    checkpoint is the resume point and the steps after it are simply redone."""
    run_dir = workdir / "sigkill" / EXP
    proc = _start(workdir, _cmd("sigkill", "--no-progress"))
    _wait_for_file(_private(run_dir) / CKPT, proc)
    proc.kill()
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert not (run_dir / "generator.pt").exists()
    step = _checkpoint_step(run_dir)
    assert step in range(EVERY, STEPS, EVERY)
    _resume_and_compare(workdir, "sigkill", workdir / "reference" / EXP, step)


@pytest.mark.slow
def test_sigkill_during_checkpoint_write_keeps_the_previous_checkpoint(workdir):
    """Killed halfway through writing the 2nd checkpoint (step 6): a torn temporary file is left,
    the step-3 checkpoint is intact, and the resubmitted run resumes from it."""
    run_dir = workdir / "torn" / EXP
    launcher = workdir / "kill_during_write.py"
    launcher.write_text(KILL_DURING_WRITE)
    env = {**os.environ, "KILL_AT_CHECKPOINT": "2"}
    res = subprocess.run([sys.executable, str(launcher), *_cmd("torn", "--no-progress")], cwd=workdir,
                         capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == -signal.SIGKILL, f"rc {res.returncode}:\n{res.stderr[-3000:]}"
    torn = [p for p in _private(run_dir).iterdir() if p.name.startswith(f".{CKPT}.")]
    assert len(torn) == 1 and torn[0].stat().st_size > 0, "the kill did not happen during a checkpoint write"
    assert _checkpoint_step(run_dir) == EVERY  # the previous checkpoint, untouched and loadable
    assert not (run_dir / "generator.pt").exists()
    _resume_and_compare(workdir, "torn", workdir / "reference" / EXP, EVERY)
