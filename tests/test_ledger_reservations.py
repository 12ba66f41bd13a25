"""Budgets that hold under parallel, killed and crashed jobs (issue 63, items 2-4; privacy.ledger_store,
stages/train_ledger.py): a release is reserved in the release ledger -- under its lock, counted as spent --
before any noise is drawn, then confirmed, or marked failed (still counted) when its job fails after the noise.

- two jobs started together under a total budget that fits one: exactly one releases (real processes, for
  `privatize` and for `train`; each job waits at a barrier after its budget check, so without a reservation
  both would pass it);
- a job killed after its noise still counts; one that fails before any noise does not;
- a job that finds its output on disk without a ledger entry records it (privatize's copy, train's model
  whose job died before confirming) instead of saying done;
- a privatization with replayable noise is budgeted and recorded as no guarantee (infinite), not at its
  finite epsilon; so is the approximately private wavelet baseline, refused by any finite budget before it
  reads a clean record;
- `train-sweep` with cells trained together reserves every cell before the group's first step, and each
  cell's own `dpsynth train` adopts that reservation when it releases the cell.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from dpsynth.privacy.ledger_store import ReleaseLedger
from tests.conftest import REPO, digits28_smoke_params, with_digits28

EXP, DATASET = "ewgan_half_circle_gauss", "manifold2d_half_circle"  # local Gaussian, epsilon 5

#: A `dpsynth` job that stops at a barrier when it reaches ``$BARRIER_AT`` (module:function, after its budget
#: check and before its noise): it waits until ``$BARRIER_COUNT`` jobs have arrived or the file ``go`` exists.
BARRIER = """
import importlib, os, pathlib, sys, time
mod, name = os.environ["BARRIER_AT"].split(":")
m = importlib.import_module(mod)
orig = getattr(m, name)
def at_barrier(*a, **k):
    d = pathlib.Path(os.environ["BARRIER"])
    (d / f"arrived-{os.getpid()}").touch()
    end = time.time() + 300
    while (len(list(d.glob("arrived-*"))) < int(os.environ.get("BARRIER_COUNT", "2"))
           and not (d / "go").exists() and time.time() < end):
        time.sleep(0.05)
    return orig(*a, **k)
setattr(m, name, at_barrier)
from dpsynth.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _job(args: list[str], barrier: Path, at: str, cwd: Path, count: int = 2) -> subprocess.Popen[str]:
    env = {**os.environ, "BARRIER": str(barrier), "BARRIER_AT": at, "BARRIER_COUNT": str(count),
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-c", BARRIER, *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _race(jobs: list[subprocess.Popen[str]], barrier: Path) -> list[tuple[int, str]]:
    """Let the jobs run to the end: once one has ended or all have arrived at the barrier, open it."""
    end = time.time() + 600
    while time.time() < end and all(j.poll() is None for j in jobs) and \
            len(list(barrier.glob("arrived-*"))) < len(jobs):
        time.sleep(0.05)
    (barrier / "go").touch()
    return [(j.wait(timeout=600), j.communicate(timeout=60)[1]) for j in jobs]


@pytest.fixture(scope="module")
def manifold(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``processed/`` holding the 2-D half circle, prepared once for the module."""
    from dpsynth.data.prepare import Sources, prepare

    root = tmp_path_factory.mktemp("manifold-data")
    prepare(DATASET, Sources(root=root))
    return root / "processed"


def _privatize_ws(d: Path, processed: Path, budget: float | None = None, noise: str = "secret") -> Path:
    """A workspace ``d`` whose params.yaml has EXP (and the prepared half circle in its data root)."""
    import shutil

    p = yaml.safe_load((REPO / "params.yaml").read_text())
    p.update(scale="smoke", datasets=[DATASET], privacy_noise=noise)
    p["pipeline"], p["w2_noise"], p["sweeps"], p["tables"] = {"experiments": [EXP], "sweeps": []}, {}, {}, {}
    p["evaluation"]["real_datasets"] = []
    p["experiments"] = {EXP: p["experiments"][EXP]}
    if budget is not None:
        p["total_budgets"] = {DATASET: {"epsilon": budget}}
    (d / "data" / "processed").mkdir(parents=True, exist_ok=True)
    for f in processed.iterdir():
        shutil.copy2(f, d / "data" / "processed" / f.name)
    (d / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    return d / "params.yaml"


def _refused(rc: int, err: str, *parts: str) -> str:
    lines = err.strip().splitlines()
    assert rc == 2 and "Traceback" not in err and lines and lines[-1].startswith("dpsynth: error: "), err
    for part in parts:
        assert part in lines[-1], lines[-1]
    return lines[-1]


def test_two_privatizations_started_together_under_a_budget_for_one_exactly_one_releases(
        tmp_path: Path, manifold: Path, release_ledger: Path) -> None:
    """Two clones of the same data (two workspaces, one ledger), a budget of 7 and two releases of 5."""
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    ws = [tmp_path / "a", tmp_path / "b"]
    for d in ws:
        _privatize_ws(d, manifold, budget=7.0)
    jobs = [_job(["privatize", EXP, "--params", "params.yaml"], barrier, "dpsynth.data.dataset:load_processed", d)
            for d in ws]
    results = _race(jobs, barrier)
    assert sorted(rc for rc, _ in results) == [0, 2], results
    _refused(*next(r for r in results if r[0] == 2), f"total_budgets.{DATASET}: privatize {EXP} refused before any "
             "noise is drawn: 1 release(s)")
    got, damaged = ReleaseLedger(release_ledger).read()
    assert damaged == [] and [(r.stage, r.status) for r in got] == [("privatize", "confirmed")], got
    assert sum((d / "data" / "privatized" / f"{EXP}.npz").is_file() for d in ws) == 1  # one release, one copy


def test_two_trains_started_together_under_a_budget_for_one_exactly_one_releases(
        tmp_path: Path, digits28_processed: Path, release_ledger: Path) -> None:
    """Two DP-Sinkhorn runs of epsilon 10 on the same data, a total budget of 15: one trains, one is refused."""
    p = digits28_smoke_params("dps_a", 2)
    p["experiments"]["dps_b"] = dict(p["experiments"]["dps_a"])
    p["total_budgets"] = {"digits28": {"epsilon": 15.0}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    with_digits28(digits28_processed, tmp_path / p["data"]["root"])
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    jobs = [_job(["train", e, "--device", "cpu", "--no-progress"], barrier, "dpsynth.methods.loop:drive", tmp_path)
            for e in ("dps_a", "dps_b")]
    results = _race(jobs, barrier)
    assert sorted(rc for rc, _ in results) == [0, 2], results
    _refused(*next(r for r in results if r[0] == 2), "total_budgets.digits28: train dps_", "1 release(s) of "
             "digits28 spent ε 10")
    got, _ = ReleaseLedger(release_ledger).read()
    assert [(r.stage, r.status) for r in got] == [("train", "confirmed")], got
    assert sum((tmp_path / "models" / e / "generator.pt").is_file() for e in ("dps_a", "dps_b")) == 1


def test_a_privatization_killed_after_its_noise_still_counts_and_one_failing_before_it_does_not(
        tmp_path: Path, manifold: Path, release_ledger: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from dpsynth.cli import main

    _privatize_ws(tmp_path, manifold)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    job = _job(["privatize", EXP, "--params", "params.yaml"], barrier, "dpsynth.io:write_npz",
               tmp_path, count=99)
    end = time.time() + 300
    while not list(barrier.glob("arrived-*")) and job.poll() is None and time.time() < end:
        time.sleep(0.05)
    if not list(barrier.glob("arrived-*")):
        job.kill()
        pytest.fail(f"the job never reached its barrier: {job.communicate(timeout=30)}")
    os.kill(job.pid, signal.SIGKILL)  # killed after its noise, as it writes: nothing settles its reservation
    job.wait(timeout=60)
    ledger = ReleaseLedger(release_ledger)
    got, _ = ledger.read()
    assert [(r.stage, r.status, r.epsilon) for r in got] == [("privatize", "pending", 5.0)], got
    # still counted: a release that fits the budget alone is refused beside it
    _privatize_ws(tmp_path, manifold, budget=7.0)
    monkeypatch.chdir(tmp_path)
    rc = main(["privatize", EXP])
    _refused(rc, capsys.readouterr().err, "1 release(s) of manifold2d_half_circle spent ε 5")
    # a job that fails before any noise (its records unreadable) cancels its reservation: not counted
    _privatize_ws(tmp_path, manifold, budget=11.0)
    (tmp_path / "data" / "processed" / f"{DATASET}.npz").write_bytes(b"not an npz")
    assert main(["privatize", EXP]) == 2
    got, _ = ledger.read()
    assert [r.status for r in got] == ["pending"], got  # the cancelled one is not counted
    assert len(ledger.path.read_text().splitlines()) == 3  # pending; pending + cancelled


def test_a_privatization_failing_after_its_noise_is_marked_failed_and_counted(
        tmp_path: Path, manifold: Path, release_ledger: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import errno

    import dpsynth.io
    from dpsynth.cli import main

    _privatize_ws(tmp_path, manifold, budget=7.0)
    monkeypatch.chdir(tmp_path)

    def full(*a: object, **k: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "data/privatized")

    write_npz = dpsynth.io.write_npz
    monkeypatch.setattr(dpsynth.io, "write_npz", full)  # the disk fills as the privatized copy is written
    assert main(["privatize", EXP]) == 2
    capsys.readouterr()
    got, _ = ReleaseLedger(release_ledger).read()
    assert [(r.status, r.epsilon) for r in got] == [("failed", 5.0)], got
    monkeypatch.setattr(dpsynth.io, "write_npz", write_npz)
    rc = main(["privatize", EXP])
    _refused(rc, capsys.readouterr().err, "1 release(s) of manifold2d_half_circle spent ε 5")


def test_a_privatized_copy_on_disk_the_ledger_lacks_is_recorded_and_counted(
        tmp_path: Path, manifold: Path, release_ledger: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A copy made before the ledger existed, or under another ledger: the next privatize records it before
    it reserves its own release, and the budget counts it."""
    from dpsynth.cli import main

    _privatize_ws(tmp_path, manifold)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DPSYNTH_LEDGER", str(release_ledger.parent / "elsewhere"))  # (never in the workspace)
    assert main(["privatize", EXP]) == 0
    npz = tmp_path / "data" / "privatized" / f"{EXP}.npz"
    before = npz.read_bytes()
    monkeypatch.setenv("DPSYNTH_LEDGER", str(release_ledger))  # this ledger never saw it
    _privatize_ws(tmp_path, manifold, budget=7.0)
    capsys.readouterr()
    rc = main(["privatize", EXP])
    err = capsys.readouterr().err
    assert f"{EXP}.npz was not in the release ledger; recorded it in {release_ledger}" in err, err
    _refused(rc, err, "1 release(s) of manifold2d_half_circle spent ε 5")
    got, _ = ReleaseLedger(release_ledger).read()
    assert [(r.status, r.epsilon) for r in got] == [("confirmed", 5.0)] and "found on disk" in got[0].note, got
    assert npz.read_bytes() == before  # refused before any noise: the copy is as it was


def test_a_reproducible_privatization_is_budgeted_and_recorded_as_no_guarantee(
        tmp_path: Path, manifold: Path, release_ledger: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Replayable noise: whoever has the seed removes it. Its finite epsilon (5) would fit a budget of 1,000;
    as no guarantee it fits no finite budget."""
    import math

    from dpsynth.cli import main

    _privatize_ws(tmp_path, manifold, budget=1000.0, noise="reproducible")
    monkeypatch.chdir(tmp_path)
    rc = main(["privatize", EXP])
    _refused(rc, capsys.readouterr().err, "0 release(s)", "would add ε inf")
    assert not (tmp_path / "data" / "privatized").exists()
    _privatize_ws(tmp_path, manifold, noise="reproducible")
    assert main(["privatize", EXP]) == 0
    got, _ = ReleaseLedger(release_ledger).read()
    assert len(got) == 1 and math.isinf(got[0].epsilon) and got[0].status == "confirmed", got
    assert "reproducible noise" in got[0].note


def _digits(tmp_path: Path, processed: Path, **budgets: float) -> dict:
    p = digits28_smoke_params("dps_digits", 2)
    if budgets:
        p["total_budgets"] = {k: {"epsilon": v} for k, v in budgets.items()}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    with_digits28(processed, tmp_path / p["data"]["root"])
    return p


def test_a_trained_model_its_job_never_confirmed_is_recorded_by_the_next_train_not_called_done(
        tmp_path: Path, digits28_processed: Path, release_ledger: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The job dies after releasing the model, before confirming (simulated: interrupted there). Its reservation
    stays pending, counted; the next `dpsynth train` finds the run done and confirms the reservation with the
    model's own hash and RDP curve, saying so."""
    from dpsynth.cli import main
    from dpsynth.io import sha256_file
    from dpsynth.stages.train_ledger import RunLedger

    _digits(tmp_path, digits28_processed)
    monkeypatch.chdir(tmp_path)

    def killed(self: RunLedger, ctx: object) -> None:
        raise KeyboardInterrupt

    confirm = RunLedger.confirm
    monkeypatch.setattr(RunLedger, "confirm", killed)
    train = ["train", "dps_digits", "--device", "cpu", "--no-progress"]
    assert main(train) == 130
    ledger = ReleaseLedger(release_ledger)
    got, _ = ledger.read()
    assert [(r.status, r.sha256) for r in got] == [("pending", "")], got
    monkeypatch.setattr(RunLedger, "confirm", confirm)
    capsys.readouterr()
    assert main(train) == 0
    out = capsys.readouterr().out
    assert "already done" in out and f"it was missing from the release ledger: recorded it in {ledger.path}" in out
    got2, _ = ledger.read()
    assert len(got2) == 1 and got2[0].id == got[0].id and got2[0].status == "confirmed", got2
    assert got2[0].sha256 == sha256_file(tmp_path / "models" / "dps_digits" / "generator.pt") and got2[0].rdp
    capsys.readouterr()
    assert main(train) == 0 and "missing from the release ledger" not in capsys.readouterr().out  # once


def test_a_training_job_failing_after_its_reservation_marks_it_failed_and_its_resume_adopts_it(
        tmp_path: Path, digits28_processed: Path, release_ledger: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stopped by an error as it writes the model (after its noise, its trained checkpoint saved): the reservation
    is marked failed -- still counted -- and the next `dpsynth train` releases from the checkpoint, adopts it and
    confirms it, reserving nothing new."""
    import dpsynth.methods.loop as loop
    from dpsynth.cli import main

    _digits(tmp_path, digits28_processed)
    monkeypatch.chdir(tmp_path)
    save_generator = loop.save_generator

    def dies(*a: object, **k: object) -> None:
        raise RuntimeError("the node died")

    monkeypatch.setattr(loop, "save_generator", dies)
    train = ["train", "dps_digits", "--device", "cpu", "--no-progress"]
    with pytest.raises(RuntimeError, match="the node died"):
        main(train)
    ledger = ReleaseLedger(release_ledger)
    got, _ = ledger.read()
    assert [(r.status, r.epsilon) for r in got] == [("failed", 10.0)], got
    monkeypatch.setattr(loop, "save_generator", save_generator)
    assert main(train) == 0
    got2, _ = ledger.read()
    assert [(r.status, r.id) for r in got2] == [("confirmed", got[0].id)], got2
    assert len(ledger.path.read_text().splitlines()) == 3  # pending, failed, confirmed: one reservation


def test_train_sweep_reserves_every_cell_trained_together_and_each_cells_train_adopts_it(
        tmp_path: Path, digits28_processed: Path, release_ledger: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Two cells of epsilon 10 trained together: a total budget of 15 fits one, so the sweep is refused before
    any step; under 25 both are reserved before the group trains, and each cell's `dpsynth train` confirms its
    cell's reservation instead of reserving again."""
    from dpsynth.cli import main

    p = _digits(tmp_path, digits28_processed, digits28=15.0)
    p["experiments"]["dps_d28"] = p["experiments"].pop("dps_digits")
    p["sweeps"]["sw"] = {"base": "dps_d28", "grid": {"m": [0, 1]}, "train_together": True}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    monkeypatch.chdir(tmp_path)
    rc = main(["train-sweep", "sw", "--no-progress"])
    _refused(rc, capsys.readouterr().err, "total_budgets.digits28: train-sweep sw refused before any noise",
             "1 release(s) of digits28 spent ε 10", "would add ε 10")
    assert not (tmp_path / "private" / "runs").exists() or not any((tmp_path / "private" / "runs").rglob("*.pt"))
    ledger = ReleaseLedger(release_ledger)
    assert ledger.read() == ([], [])
    p["total_budgets"] = {"digits28": {"epsilon": 25.0}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    assert main(["train-sweep", "sw", "--no-progress"]) == 0
    got, _ = ledger.read()
    assert sorted((r.name, r.status) for r in got) == [("sw-m0", "pending"), ("sw-m1", "pending")], got
    assert main(["train", "sw-m0", "--device", "cpu", "--no-progress"]) == 0
    got2, _ = ledger.read()
    assert sorted((r.name, r.status) for r in got2) == [("sw-m0", "confirmed"), ("sw-m1", "pending")], got2
    assert {r.id for r in got2} == {r.id for r in got}  # adopted: no new reservation


def test_a_resumed_run_adopts_only_its_own_reservation_at_no_less_than_its_cost(tmp_path: Path) -> None:
    """Adopting is not paying: a resumed run takes over a pending or failed reservation of its run folder only
    when it was reserved at this cost or more, and a confirmed one only for the very model its finished
    checkpoint released (its hash); otherwise it reserves again, its budget checked."""
    from dpsynth.config.params import TotalBudget
    from dpsynth.errors import PrivacyError
    from dpsynth.privacy.ledger_store import Reservation
    from dpsynth.privacy.releases import Release

    ledger = ReleaseLedger(tmp_path)

    def want(eps: float, adopt: bool = True, released: str | None = None) -> Reservation:
        return Reservation(Release("digits28", "train", "r", "dp_sinkhorn", eps, 1e-5, "", "/m/g.pt", "",
                                   key="/p/runs/r"), adopt=adopt, released=released)

    budget = {"digits28": TotalBudget(epsilon=12.0)}
    first = ledger.reserve([want(10.0, adopt=False)], budget, "train r")[0]
    again = ledger.reserve([want(10.0)], budget, "train r")[0]
    assert again.adopted and again.release.id == first.release.id
    with pytest.raises(PrivacyError, match="would add ε 11"):  # a costlier configuration: reserved anew, refused
        ledger.reserve([want(11.0)], budget, "train r")
    ledger.settle(first.release, "confirmed", Release("digits28", "train", "r", "dp_sinkhorn", 9.5, 1e-5,
                                                      "add/remove one", "/m/g.pt", "c" * 64, key="/p/runs/r"))
    assert ledger.reserve([want(10.0, released="c" * 64)], budget, "train r")[0].adopted  # its own release
    with pytest.raises(PrivacyError, match="1 release"):  # another model of the same folder: a new release
        ledger.reserve([want(10.0, released="d" * 64)], budget, "train r")
    assert len(ReleaseLedger(tmp_path).read()[0]) == 1
