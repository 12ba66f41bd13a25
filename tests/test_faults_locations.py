"""Faults about where a run writes: each costs a user their budget or their files unless it is
refused first, in one line (exit 2, no traceback), before any private record is read.

- an ``--out`` (or ``--private-out``) that is a file;
- a read-only results or data folder (a real read-only bind mount, in a user namespace);
- two processes training the same run at once (a lock per run directory, naming its holder);
- ``--out`` elsewhere without ``--private-out`` (its checkpoint would replace the default run's);
- ``--seed -1``, a symbolic-link loop in place of a dataset, and a released generator with no
  checkpoint to verify it (retrained: said in one line).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dpsynth.cli import main
from dpsynth.locations import LOCK_FILE, RunLock
from tests.conftest import REPO, digits28_smoke_params, require, with_digits28

EXP = "dps_digits"
TRAIN = ["train", EXP, "--device", "cpu", "--no-progress", "--json"]


def _one_line_failure(rc: int, err: str) -> str:
    assert rc == 2, err
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("dpsynth: error: ") or ": error: " in last, err
    return last


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory, digits28_processed: Path) -> Path:
    """A working directory with params.yaml (one 2-step DP-Sinkhorn run on digits28) and the data
    (the session's prepared digits28, where `dpsynth data prepare digits28` would put them)."""
    d = tmp_path_factory.mktemp("prepared")
    params = digits28_smoke_params(EXP, 2)
    (d / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    with_digits28(digits28_processed, d / params["data"]["root"])
    return d


def _train(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """`dpsynth train ...` in this process (from the current directory): the stage and its checks are
    the CLI's own; a subprocess would only add ~6 s of imports. Returns (exit code, stdout, stderr)."""
    capsys.readouterr()
    rc = main([*TRAIN, *args])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def work(prepared: Path, tmp_path: Path) -> Path:
    d = tmp_path / "w"
    shutil.copytree(prepared, d)
    return d


# --------------------------------------------------------------------------- 1: --out is a file


@pytest.mark.parametrize("flag", ["--out", "--private-out"])
def test_an_output_that_is_a_file_is_refused_before_the_private_data_is_read(
        work: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], private_reads: list[str],
        flag: str) -> None:
    monkeypatch.chdir(work)
    Path("FILE").write_text("a file the user keeps\n")
    other = {"--out": ["--private-out", "priv"], "--private-out": ["--out", "released"]}[flag]
    rc = main([*TRAIN, flag, "FILE", *other])
    last = _one_line_failure(rc, capsys.readouterr().err)
    assert f"{flag} FILE: " in last and "is a file, not a directory" in last, last
    assert private_reads == []  # nothing was read, so no budget was spent
    assert Path("FILE").read_text() == "a file the user keeps\n"
    assert not Path("priv").exists() and not Path("released").exists()


def test_an_output_below_a_file_is_refused(work: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str], private_reads: list[str]) -> None:
    monkeypatch.chdir(work)
    Path("FILE").write_text("x")
    rc = main([*TRAIN, "--out", "FILE/models", "--private-out", "priv"])
    last = _one_line_failure(rc, capsys.readouterr().err)
    assert "--out FILE/models: " in last and "is a file, so FILE/models cannot be a directory" in last, last
    assert private_reads == []


# --------------------------------------------------------------------------- 2: read-only folders


def _unshare_works() -> bool:
    probe = "d=$(mktemp -d) && mount --bind $d $d && mount -o remount,bind,ro $d $d && ! touch $d/x 2>/dev/null"
    try:
        return subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", probe],
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _cli_with_read_only(folder: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`dpsynth ARGS` in a mount namespace where ``folder`` is a read-only bind mount of itself:
    a real read-only file system (EROFS), which a root user cannot write either (chmod cannot show it)."""
    script = (f'mount --bind "{folder}" "{folder}" && mount -o remount,bind,ro "{folder}" "{folder}" && '
              f'exec "{sys.executable}" -m dpsynth.cli "$@"')
    return subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.fixture
def read_only_mounts() -> None:
    require(_unshare_works(), "unshare --user --mount (util-linux) with user namespaces, for a real read-only mount")


def test_report_into_a_read_only_results_folder_is_one_line(work: Path, read_only_mounts: None) -> None:
    ro = work / "RO"
    ro.mkdir()
    r = _cli_with_read_only(ro, "report", "--results", "RO", cwd=work)
    last = _one_line_failure(r.returncode, r.stderr)
    assert "--results RO: " in last and "is not writable (read-only file system)" in last, last
    assert list(ro.iterdir()) == []


def test_prepare_into_a_read_only_data_root_is_one_line(work: Path, read_only_mounts: None) -> None:
    ro = work / "RO"
    ro.mkdir()
    r = _cli_with_read_only(ro, "data", "prepare", "digits28", "--root", "RO", cwd=work)
    last = _one_line_failure(r.returncode, r.stderr)
    assert "--root RO: " in last and "is not writable (read-only file system)" in last, last


def test_a_write_refused_midway_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A folder that turns read-only after the check (or one only the kernel refuses) still ends in one
    line naming the output, not a traceback."""
    import errno
    import os

    import numpy as np

    def refused(fh: object, **arrays: object) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(np, "savez_compressed", refused)
    rc = main(["data", "prepare", "digits28"])
    last = _one_line_failure(rc, capsys.readouterr().err)
    assert "cannot write data/processed/digits28.npz: read-only file system" in last, last


# --------------------------------------------------------------------------- 3: one process per run


def _hold_lock(directory: Path) -> subprocess.Popen[str]:
    """Another process holding the run's lock (as a running `dpsynth train` does)."""
    code = ("import sys, time; from dpsynth.locations import RunLock\n"
            f"with RunLock({str(directory)!r}, 'x'):\n    print('held', flush=True); time.sleep(120)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    return p


def test_a_second_run_of_the_same_experiment_is_refused_naming_the_holder(
        work: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The holder is a real second process; the refused and the later run are this one (in-process)."""
    monkeypatch.chdir(work)
    holder = _hold_lock(work / "private" / "runs" / EXP)
    try:
        rc, _, err = _train(capsys=capsys)
        last = _one_line_failure(rc, err)
        assert f"experiment {EXP} is being trained by another process (pid {holder.pid} on host " in last, last
        assert not (work / "models" / EXP).exists()
        assert not (work / "private" / "runs" / EXP / "checkpoint.pt").exists()
    finally:
        holder.kill()
        holder.wait()
    # the holder died without cleaning up: its lock is taken over, the run trains
    assert (work / "private" / "runs" / EXP / LOCK_FILE).exists()
    rc, out, err = _train(capsys=capsys)
    assert rc == 0, err
    assert json.loads(out)["finished"] is True
    assert not (work / "private" / "runs" / EXP / LOCK_FILE).exists()  # a finished run leaves no lock file (issue 47)


def test_a_lock_file_removed_between_open_and_lock_is_not_the_one_held(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The releasing holder removes the lock file: a process that opened it just before must not hold the
    removed file's lock (a third process would then lock the new file beside it). Simulated in one process:
    the file is removed between the open and the lock."""
    import fcntl

    import dpsynth.locations as locations

    path, real, removed = tmp_path / LOCK_FILE, fcntl.lockf, []

    def lockf(fd: int, op: int) -> None:
        if not removed:
            removed.append(os.fstat(fd).st_ino)
            path.unlink()  # the holder released and removed the file after our open
        real(fd, op)

    monkeypatch.setattr(locations.fcntl, "lockf", lockf)
    with RunLock(tmp_path, "x") as lock:
        assert lock._fd is not None and path.exists()
        assert os.fstat(lock._fd).st_ino == os.stat(path).st_ino  # the file at the path, not the removed one
    assert removed and not path.exists()


def test_the_lock_is_exclusive_between_processes_and_free_after_use(tmp_path: Path) -> None:
    with RunLock(tmp_path, "x"):
        r = subprocess.run([sys.executable, "-c", f"from dpsynth.locations import RunLock\n"
                                                  f"RunLock({str(tmp_path)!r}, 'exp y').__enter__()"],
                           capture_output=True, text=True, cwd=REPO)
        assert r.returncode != 0 and "exp y is being trained by another process" in r.stderr
    r = subprocess.run([sys.executable, "-c", f"from dpsynth.locations import RunLock\n"
                                              f"RunLock({str(tmp_path)!r}, 'exp y').__enter__()"],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr


# --------------------------------------------------------------------------- 4: --out moves private outputs


def test_out_elsewhere_needs_its_own_private_folder(work: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str],
                                                    private_reads: list[str]) -> None:
    monkeypatch.chdir(work)
    rc = main([*TRAIN, "--out", "elsewhere/models"])
    last = _one_line_failure(rc, capsys.readouterr().err)
    assert "--out elsewhere/models needs --private-out DIR as well" in last, last
    assert private_reads == [] and not Path("private").exists()


def test_a_run_with_out_and_private_out_leaves_the_default_runs_checkpoint_alone(
        work: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(work)
    rc, _, err = _train(capsys=capsys)
    assert rc == 0, err
    default_ckpt = work / "private" / "runs" / EXP / "checkpoint.pt"
    before = default_ckpt.read_bytes()
    rc, _, err = _train("--seed", "5", "--out", "other/models", "--private-out", "other/private", capsys=capsys)
    assert rc == 0, err
    assert (work / "other/private/runs" / EXP / "checkpoint.pt").is_file()
    assert default_ckpt.read_bytes() == before


# --------------------------------------------------------------------------- 5: smaller ones


def test_a_negative_seed_is_refused_by_the_argument_parser(work: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(work)
    with pytest.raises(SystemExit) as e:  # argparse's exit: what `dpsynth` exits with
        main([*TRAIN, "--seed", "-1"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "Traceback" not in err, err
    assert "argument --seed: must be >= 0, got -1" in err


def test_a_symlink_loop_in_place_of_the_dataset_is_named_as_such(work: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(work)
    npz = work / "data" / "processed" / "digits28.npz"
    npz.unlink()
    npz.symlink_to(npz.name)  # a link to itself
    rc, _, err = _train(capsys=capsys)
    last = _one_line_failure(rc, err)
    assert "digits28.npz: is a symbolic link loop" in last, last


def test_a_release_without_its_checkpoint_is_retrained_with_a_word(work: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(work)
    rc, _, err = _train(capsys=capsys)
    assert rc == 0, err
    (work / "models" / EXP / "generator.pt").write_bytes(b"garbage\n")
    (work / "private" / "runs" / EXP / "checkpoint.pt").unlink()
    rc, out, err = _train(capsys=capsys)
    assert rc == 0, err
    said = [line for line in err.splitlines() if "training again from step 0" in line]
    assert len(said) == 1 and "generator.pt" in said[0] and "holds no checkpoint" in said[0], err
    assert json.loads(out)["resumed_from"] is None
