"""Keeping the release ledger whole across upgrades, kills, moves and shared folders (issue 71 items 3-5):

- a workspace made before the ledger moved keeps ``private/ledger/releases.jsonl``: the next releasing job imports
  each of its lines into the ledger, once, with its origin, before any budget check -- or refuses in one line
  naming a damaged line there;
- a killed job's pending reservation is named apart from confirmed releases (job, time, pid) in every refusal,
  listed by `dpsynth privacy ledger`, and settled only by an appended line naming who settled it and why: it
  keeps counting (failed) unless the user says its job drew no noise;
- a job waiting for the ledger's lock says so; each reservation names the ledger it went to, and a workspace
  that used another ledger before says so; the file's mode follows the umask (a group can share the folder).
"""

from __future__ import annotations

import fcntl
import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from dpsynth.cli import main
from dpsynth.privacy import ledger_store
from dpsynth.privacy.ledger_store import ReleaseLedger
from dpsynth.privacy.releases import LEDGER_FILE, Release, compose
from tests.test_ledger_faults import KILLED_AFTER_STEP_1, _env, _lines, digits  # noqa: F401 (fixture)

TRAIN = ["--device", "cpu", "--no-progress"]


def _budget(ws: Path, epsilon: float) -> None:
    p = yaml.safe_load((ws / "params.yaml").read_text())
    p["total_budgets"] = {"digits28": {"epsilon": epsilon}}
    (ws / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))


def _error(rc: int, err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("dpsynth: error: ")]
    assert rc == 2 and "Traceback" not in err and len(lines) == 1, err
    return lines[0]


def _old_line(name: str, eps: float) -> str:
    """A line as the older layout wrote it: a confirmed release of its own, no status, id or key."""
    d = json.loads(Release(dataset="digits28", stage="train", name=name, mechanism="dp_sgd", epsilon=eps, delta=1e-5,
                           neighbours="add/remove one record", output=f"/old/{name}.pt", sha256="c" * 64).to_json())
    return json.dumps({k: v for k, v in d.items() if k not in ("status", "id", "key", "pid", "host", "origin")})


def test_an_older_layout_ledger_is_imported_once_with_its_origin_and_counted(
        digits: Path, release_ledger: Path, capsys: pytest.CaptureFixture[str], private_reads: list[str]) -> None:
    """The older layout's private/ledger/releases.jsonl holds a release of epsilon 5: under a total budget of 12 a
    run of epsilon 10 is refused (5 + 10 > 12) -- it read nothing -- and the ledger holds that release once, with
    its origin, however many jobs find the old file."""
    old = digits / "private" / "ledger" / LEDGER_FILE
    old.parent.mkdir(parents=True)
    text = _old_line("dps_old", 5.0) + "\n"
    old.write_text(text)
    _budget(digits, 12.0)
    for _ in range(2):
        line = _error(main(["train", "dps_a", *TRAIN]), capsys.readouterr().err)
        assert "total_budgets.digits28: train dps_a refused" in line and "spent ε 5" in line, line
    got, damaged = ReleaseLedger(release_ledger).read()
    assert damaged == [] and [(r.name, r.epsilon, r.origin) for r in got] == [("dps_old", 5.0, f"{old}:1")], got
    assert len(_lines(release_ledger)) == 1 and private_reads == []
    assert old.read_text() == text  # kept as it was


def test_an_older_layout_ledger_with_a_damaged_line_is_refused_until_repaired(
        digits: Path, release_ledger: Path, capsys: pytest.CaptureFixture[str], private_reads: list[str]) -> None:
    old = digits / "private" / "ledger" / LEDGER_FILE
    old.parent.mkdir(parents=True)
    old.write_text(_old_line("dps_old", 5.0) + "\n" + '{"dataset": "digits28", "epsi\n')
    line = _error(main(["train", "dps_a", *TRAIN]), capsys.readouterr().err)
    assert f"older release ledger {old} line 2 (" in line and "nothing was imported" in line, line
    assert not (release_ledger / LEDGER_FILE).read_text() and private_reads == []


def _kill_after_step_1(ws: Path, experiment: str) -> int:
    job = subprocess.Popen([sys.executable, "-c", KILLED_AFTER_STEP_1, "train", experiment, *TRAIN], cwd=ws,
                           env=_env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert job.wait(timeout=300) == -9, job.communicate(timeout=30)
    finally:
        job.kill()
    return job.pid


def test_a_killed_jobs_reservation_is_named_listed_and_stops_counting_only_when_the_user_says_so(
        digits: Path, release_ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """dps_a is killed after its first step (epsilon 10 reserved, pending). Under a total budget of 15, dps_b is
    refused by a line naming dps_a's pending reservation, its time and pid; `dpsynth privacy ledger` lists it;
    settling it needs a reason, and leaves it counted (failed); only --no-noise-drawn stops it counting, by a
    line naming who settled it and why -- then dps_b trains."""
    pid = _kill_after_step_1(digits, "dps_a")
    _budget(digits, 15.0)
    capsys.readouterr()
    line = _error(main(["train", "dps_b", *TRAIN]), capsys.readouterr().err)
    assert "1 release(s) of digits28 spent ε 10" in line and "(0 confirmed; 1 reservation(s) never confirmed" in line
    assert f"pending train dps_a reserved " in line and f"by pid {pid} on " in line, line
    assert "dpsynth privacy ledger" in line and line.endswith(f"counted in the release ledger "
                                                              f"{release_ledger / LEDGER_FILE}"), line
    assert main(["privacy", "ledger"]) == 0
    listed = capsys.readouterr().out
    ident = next(ln.split()[1] for ln in listed.splitlines() if ln.strip().startswith("id "))
    assert f"pending  train dps_a (digits28, ε 10)" in listed and f"by pid {pid}" in listed, listed
    assert "digits28: 0 confirmed, 1 pending, 0 failed" in listed, listed
    line = _error(main(["privacy", "ledger", "--settle", ident]), capsys.readouterr().err)
    assert "needs a reason (--why)" in line, line
    assert main(["privacy", "ledger", "--settle", ident, "--why", "killed by the scheduler"]) == 0
    got, _ = ReleaseLedger(release_ledger).read()
    assert [(r.name, r.status) for r in got] == [("dps_a", "failed")] and compose(got).epsilon == 10.0, got
    assert "settled by hand by " in got[0].note and "killed by the scheduler" in got[0].note
    _error(main(["train", "dps_b", *TRAIN]), capsys.readouterr().err)  # still counted: still refused
    assert main(["privacy", "ledger", "--settle", ident, "--why", "its log shows it never stepped",
                 "--no-noise-drawn"]) == 0
    assert ReleaseLedger(release_ledger).read()[0] == []  # cancelled: no longer counted
    assert main(["train", "dps_b", *TRAIN]) == 0
    assert [d["status"] for d in _lines(release_ledger)] == ["pending", "failed", "cancelled", "pending", "confirmed"]


def test_a_job_waiting_for_the_ledgers_lock_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(ledger_store, "LOCK_NOTICE_S", 0.3)
    ledger = ReleaseLedger(tmp_path / "ledger", "a test")
    ledger.check()
    fd = os.open(ledger.path, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another job holds it for a second
    threading.Timer(1.0, lambda: os.close(fd)).start()
    ledger.append(Release(dataset="d", stage="train", name="x", mechanism="m", epsilon=1.0, delta=0.0,
                          neighbours="", output="/x", sha256="a" * 64))
    assert f"waiting for the release ledger's lock ({ledger.path})" in capfd.readouterr().err
    assert len(ledger.read()[0]) == 1


def test_the_ledger_file_follows_the_umask_so_a_group_can_share_its_folder(tmp_path: Path) -> None:
    old = os.umask(0o002)
    try:
        ledger = ReleaseLedger(tmp_path / "shared", "a test")
        ledger.check()
    finally:
        os.umask(old)
    assert stat.S_IMODE(ledger.path.stat().st_mode) == 0o664


def test_each_reservation_names_its_ledger_and_a_switch_is_said(
        digits: Path, release_ledger: Path, tmp_path_factory: pytest.TempPathFactory,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A job says which ledger it reserved in; the workspace remembers it, and a later job that uses another
    ledger says that the workspace's earlier releases went elsewhere."""
    assert main(["train", "dps_a", *TRAIN, "--max-steps-this-run", "1"]) == 0
    err = capsys.readouterr().err
    assert f"dpsynth: release ledger {release_ledger / LEDGER_FILE} ($DPSYNTH_LEDGER)" in err, err
    assert "earlier releases went to" not in err
    other = tmp_path_factory.mktemp("other-ledger")
    monkeypatch.setenv("DPSYNTH_LEDGER", str(other))
    assert main(["train", "dps_b", *TRAIN, "--max-steps-this-run", "1"]) == 0
    err = capsys.readouterr().err
    assert f"dpsynth: release ledger {other / LEDGER_FILE} ($DPSYNTH_LEDGER); this workspace's earlier releases " \
           f"went to {release_ledger / LEDGER_FILE}" in err, err
