"""The release ledger's faults that the earlier tests let through (issue 71 item 1), each caught here and each
a mutation of scripts/privacy-mutations.py that this file's tests catch:

- the ledger's lock removed or taken shared: two jobs held *between reading the ledger and reserving* (a
  barrier inside the lock) -- without the exclusive lock both pass a budget that fits one;
- train reserving after its training loop instead of before its first step: a job killed right after step 1
  must leave a pending reservation (its noise was drawn);
- a reproducible-noise train reserved, or recorded, at its finite epsilon instead of as no guarantee;
- a release found on disk confirmed under another run's open reservation of the same stage (the run key
  ignored: that run's epsilon would stop counting while it still runs);
- the report's EVER MADE row composing confirmed entries only (a pending or failed reservation the budget
  counts left out of the report's total);
- a ledger accepted under a folder of the workspace (its root, ``private/``, ``results/`` ...) when the command
  runs from another folder: every folder is resolved absolutely.

Every test that starts a job waits on it with a timeout and fails instead of hanging.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dpsynth.cli import main
from dpsynth.privacy.ledger_store import ReleaseLedger, Reservation
from dpsynth.privacy.releases import CONFIRMED, FAILED, PENDING, LEDGER_FILE, Release, compose
from tests.conftest import REPO, digits28_smoke_params, with_digits28
from tests.test_ledger_reservations import DATASET, EXP, _privatize_ws, _refused, manifold  # noqa: F401 (fixture)

#: A `dpsynth` job with barriers: ``$BARRIER_AT`` is a comma-separated list of ``module:function@seconds``;
#: each point waits until both jobs have arrived there, or ``seconds`` passed (then goes on alone).
BARRIERS = """
import importlib, os, pathlib, sys, time
d = pathlib.Path(os.environ["BARRIER"])
def hold(i, mod, name, wait):
    m = importlib.import_module(mod)
    orig = getattr(m, name)
    def at_barrier(*a, **k):
        (d / f"{i}-{os.getpid()}").touch()
        end = time.time() + wait
        while len(list(d.glob(f"{i}-*"))) < 2 and time.time() < end:
            time.sleep(0.02)
        return orig(*a, **k)
    setattr(m, name, at_barrier)
for i, point in enumerate(os.environ["BARRIER_AT"].split(",")):
    where, wait = point.split("@")
    hold(i, *where.split(":"), float(wait))
from dpsynth.cli import main
sys.exit(main(sys.argv[1:]))
"""

#: A `dpsynth train` job killed (SIGKILL) right after its first training step returns.
KILLED_AFTER_STEP_1 = """
import os, signal, sys
import dpsynth.methods.loop as loop
orig = loop.drive
def drive(lead, step_fn, *a, **k):
    def first_step_then_die():
        out = step_fn()
        os.kill(os.getpid(), signal.SIGKILL)
        return out
    return orig(lead, first_step_then_die, *a, **k)
loop.drive = drive
from dpsynth.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, **extra,
            "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO), os.environ.get("PYTHONPATH", "")])}


def _lines(ledger: Path) -> list[dict]:
    """The ledger file's lines as written (every state of every entry, in order)."""
    return [json.loads(ln) for ln in (ledger / LEDGER_FILE).read_text().splitlines() if ln.strip()]


def test_two_jobs_held_between_reading_the_ledger_and_reserving_cannot_both_pass_a_budget_for_one(
        tmp_path: Path, manifold: Path, release_ledger: Path) -> None:  # noqa: F811
    """Both privatizations (epsilon 5 each, total budget 7) are held at the budget check inside the ledger's
    lock -- after each has read the ledger, before it appends its reservation. Under the exclusive lock the
    second cannot get there until the first has reserved (it waits, and says so), so it reads that reservation
    and is refused; without the lock, or with a shared one, both read an empty ledger and both release."""
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    ws = [tmp_path / "a", tmp_path / "b"]
    for d in ws:
        _privatize_ws(d, manifold, budget=7.0)
    at = "dpsynth.stages.privatize:announce_release@300,dpsynth.privacy.ledger_store:check_budget@8"
    jobs = [subprocess.Popen([sys.executable, "-c", BARRIERS, "privatize", EXP, "--params", "params.yaml"], cwd=d,
                             env=_env(BARRIER=str(barrier), BARRIER_AT=at), text=True, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE) for d in ws]
    try:
        results = [(j.wait(timeout=400), j.communicate(timeout=60)[1]) for j in jobs]
    finally:
        for j in jobs:
            j.kill()
    assert len(list(barrier.glob("1-*"))) == 2, results  # both reached the read-then-check point
    assert sorted(rc for rc, _ in results) == [0, 2], results
    refused = next(err for rc, err in results if rc == 2)
    _refused(2, refused, f"total_budgets.{DATASET}: privatize {EXP} refused before any noise is drawn: 1 release(s)")
    assert "waiting for the release ledger's lock" in refused  # it waited for the first job's reservation
    got, damaged = ReleaseLedger(release_ledger).read()
    assert damaged == [] and [(r.stage, r.status) for r in got] == [("privatize", "confirmed")], got


@pytest.fixture
def digits(tmp_path: Path, digits28_processed: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A workspace with one DP-Sinkhorn run (epsilon 10, 3 smoke steps) on the bundled digits."""
    p = digits28_smoke_params("dps_a", 3)
    p["experiments"]["dps_b"] = dict(p["experiments"]["dps_a"])
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    with_digits28(digits28_processed, tmp_path / p["data"]["root"])
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_training_job_killed_after_its_first_step_leaves_a_pending_reservation_the_budget_counts(
        digits: Path, release_ledger: Path) -> None:
    """The reservation comes before the first step: a job killed (SIGKILL) right after step 1 -- its noise drawn,
    nothing released -- leaves its pending entry, with its pid; a train reserving only after its loop would leave
    nothing, and the epsilon of that noise would be free."""
    job = subprocess.Popen([sys.executable, "-c", KILLED_AFTER_STEP_1, "train", "dps_a", "--device", "cpu",
                            "--no-progress"], cwd=digits, env=_env(), text=True, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    try:
        rc = job.wait(timeout=300)
    finally:
        job.kill()
    assert rc == -9, job.communicate(timeout=30)
    lines = _lines(release_ledger)
    assert [(d["stage"], d["name"], d["status"], d["epsilon"], d["pid"]) for d in lines] == \
        [("train", "dps_a", PENDING, 10.0, job.pid)], lines
    assert (digits / "private" / "runs" / "dps_a").is_dir() and not (digits / "models" / "dps_a").exists()


def test_a_reproducible_noise_train_is_reserved_and_recorded_as_no_guarantee(
        digits: Path, release_ledger: Path) -> None:
    """privacy_noise: reproducible replays its noise from the seeds: whatever epsilon its mechanism states, it is
    reserved and recorded at infinite epsilon (no RDP curve), never at its finite target."""
    p = yaml.safe_load((digits / "params.yaml").read_text())
    p["privacy_noise"] = "reproducible"
    (digits / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    assert main(["train", "dps_a", "--device", "cpu", "--no-progress"]) == 0
    lines = _lines(release_ledger)
    assert [(d["status"], d["epsilon"], d["rdp"]) for d in lines] == [(PENDING, "inf", None), (CONFIRMED, "inf", None)]
    assert all("reproducible noise" in d["note"] for d in lines), lines
    got, _ = ReleaseLedger(release_ledger).read()
    assert math.isinf(compose(got).epsilon)


def _entry(name: str, eps: float, status: str = CONFIRMED, sha: str = "", key: str = "") -> Release:
    return Release(dataset="digits28", stage="train", name=name, mechanism="dp_sgd", epsilon=eps, delta=1e-5,
                   neighbours="add/remove one record", output=f"/nowhere/{name}/generator.pt", sha256=sha,
                   status=status, key=key or f"/ws/private/runs/{name}")


def test_a_release_found_on_disk_never_settles_another_runs_open_reservation(tmp_path: Path) -> None:
    """Run a is training (its reservation pending) when run b's model is found on disk without an entry: b is
    recorded on its own; a's reservation of the same stage stays pending, counted -- confirming b under it would
    make a's epsilon stop counting while a still runs."""
    ledger = ReleaseLedger(tmp_path / "ledger")
    ledger.reserve([Reservation(_entry("a", 5.0))], {}, "train a")
    assert ledger.record_found(_entry("b", 3.0, sha="b" * 64))
    got, _ = ledger.read()
    assert sorted((r.name, r.status) for r in got) == [("a", PENDING), ("b", CONFIRMED)], got
    assert compose(got).epsilon == pytest.approx(8.0)


def test_the_reports_ever_made_row_counts_pending_and_failed_reservations(tmp_path: Path) -> None:
    """The budget counts a pending or failed reservation (its noise may have been drawn); so does the report's
    EVER MADE row: 2 (confirmed) + 3 (pending) + 4 (failed) = 9, each unconfirmed one listed."""
    from dpsynth.report.ledger import build_ledger

    ever = [_entry("a", 2.0, sha="a" * 64), _entry("b", 3.0, PENDING), _entry("c", 4.0, FAILED)]
    for i, r in enumerate(ever):
        r.id, r.rdp = f"id{i}", None
    table, _ = build_ledger(tmp_path / "results", runs=[], ever=(ever, []))
    rows = table.to_dict("records")
    total = [r for r in rows if r["Released model"].startswith("EVER MADE")]
    assert len(total) == 1 and float(total[0]["ε (headline)"]) == pytest.approx(9.0), rows
    assert any(r["Released model"].startswith("train b") and "pending" in r["Released model"] for r in rows), rows
    assert any(r["Released model"].startswith("train c") and "failed" in r["Released model"] for r in rows), rows


@pytest.mark.parametrize("under, names", [("", "the workspace"), ("private/ledger", "private"),
                                          ("results/ledger", "results"), ("models", "models"), ("logs/x", "logs")])
def test_a_ledger_under_any_folder_of_the_workspace_is_refused_wherever_the_command_runs_from(
        digits: Path, under: str, names: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        private_reads: list[str]) -> None:
    """The workspace's folders are resolved absolutely (against params.yaml's folder, not only the current one):
    run from another folder, a ledger in the workspace's root, private/, results/, models/ or logs/ is refused in
    one line naming that folder, before any record is read and with nothing written there."""
    folder = digits / under if under else digits
    elsewhere = digits.parent / f"{digits.name}-elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("DPSYNTH_LEDGER", str(folder))
    rc = main(["train", "dps_a", "--params", str(digits / "params.yaml"), "--device", "cpu", "--no-progress",
               "--out", str(elsewhere / "models"), "--private-out", str(elsewhere / "private")])
    err = capsys.readouterr().err
    line = _refused(rc, err, "release ledger", "lies inside", names)
    assert (f"lies inside {names}" if under else f"lies inside the workspace {digits}") in line, line
    assert private_reads == [] and not (folder / LEDGER_FILE).exists() and not (elsewhere / "models").exists()
