"""The release ledger (issue 58 item 2, issue 63; dpsynth.privacy.releases, privacy.ledger_store): every release
ever made from a dataset, in one ledger shared by every workspace, never rewritten; composed by the report beside
the current runs; a per-dataset total budget refuses a release past it before any noise is drawn; a
re-privatization says so in one line first; every line validated when read. End to end through DVC: editing a
privatize dependency re-runs it, and the ledger then holds two releases of the dataset, composed; a third is
refused under a budget -- after `make clean-results` too -- and a temporary DVC experiment records into the
same ledger. (Reservations, concurrent and killed jobs: tests/test_ledger_reservations.py.)"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dpsynth.privacy import releases
from dpsynth.privacy.ledger_store import ReleaseLedger
from dpsynth.privacy.releases import Release
from dpsynth.report.ledger import build_ledger
from tests.conftest import REPO, venv_bin
from tests.pipelines import copy_workflow, env

EXP, DATASET = "ewgan_half_circle_gauss", "manifold2d_half_circle"


def _release(name: str, eps: float, sha: str, output: str = "x.npz") -> Release:
    return Release(dataset=DATASET, stage="privatize", name=name, mechanism="gaussian", epsilon=eps, delta=1e-4,
                   neighbours="each record (local)", output=output, sha256=sha)


def test_appends_never_rewrite_and_a_torn_line_counts_as_a_release_without_a_guarantee(tmp_path: Path) -> None:
    ledger = ReleaseLedger(tmp_path)
    ledger.append(_release("a", 5.0, "1" * 64))
    first = ledger.path.read_bytes()
    ledger.append(_release("a", 5.0, "2" * 64))
    assert ledger.path.read_bytes().startswith(first)  # appended, the first entry byte for byte as it was
    got, damaged = ledger.read()
    assert [r.sha256[0] for r in got] == ["1", "2"] and damaged == []
    total = releases.compose(got)
    assert total.count == 2 and total.epsilon == pytest.approx(10.0) and total.delta == pytest.approx(2e-4)
    with open(ledger.path, "ab") as fh:  # a writer killed mid-line
        fh.write(b'{"dataset": "manifold2d_half_ci')
    ledger.append(_release("a", 5.0, "3" * 64))
    got, damaged = ledger.read()
    assert [r.sha256[0] for r in got] == ["1", "2", "3"] and [d.line for d in damaged] == [3]  # the next survived
    assert math.isinf(releases.compose(got, damaged).epsilon)  # a release of unknown cost is never free


def test_concurrent_writers_each_land_whole_lines(tmp_path: Path) -> None:
    code = ("import sys; from pathlib import Path; from dpsynth.privacy.ledger_store import ReleaseLedger\n"
            "from tests.test_release_ledger import _release\n"
            "for i in range(40): ReleaseLedger(Path(sys.argv[1])).append(_release(sys.argv[2], 1.0, f'{i:064d}'))\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), w], cwd=REPO) for w in ("p", "q")]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    got, damaged = ReleaseLedger(tmp_path).read()
    assert damaged == [] and len(got) == 80 and {r.name for r in got} == {"p", "q"}


def test_the_budget_refuses_in_one_line_naming_dataset_spent_and_added() -> None:
    from dpsynth.config.params import TotalBudget
    from dpsynth.errors import PrivacyError

    known = [_release("a", 5.0, "1" * 64), _release("a", 5.0, "1" * 64)]  # one file recorded twice: one release
    releases.check_budget(DATASET, TotalBudget(epsilon=10.0), known, [], (5.0, 1e-4), "privatize a")
    with pytest.raises(PrivacyError) as exc:
        releases.check_budget(DATASET, TotalBudget(epsilon=9.0), known, [], (5.0, 1e-4), "privatize a")
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(f"total_budgets.{DATASET}: privatize a refused before any noise")
    assert "1 release(s) of manifold2d_half_circle spent ε 5" in msg and "would add ε 5" in msg, msg
    with pytest.raises(PrivacyError, match="δ"):
        releases.check_budget(DATASET, TotalBudget(epsilon=99.0, delta=1e-4), known, [], (5.0, 1e-4), "privatize a")


def test_the_report_shows_releases_ever_made_beside_the_current_ones(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A current run (results/runs) and the ledger's releases: the superseded one is listed, and the EVER MADE
    row composes both (its epsilon above the current composition's)."""
    from tests.test_privacy_ledger import _dps, _write

    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "results", "a", DATASET, _dps(100_000))
    Path("now.npz").write_bytes(b"the current release")
    from dpsynth.io import sha256_file

    ledger = ReleaseLedger(tmp_path / "ledger")
    ledger.append(_release(EXP, 5.0, "0" * 64, output="now.npz"))  # what the file held before
    ledger.append(_release(EXP, 5.0, sha256_file(Path("now.npz")), output="now.npz"))
    frame, notes = build_ledger(tmp_path / "results", ever=ledger.read())
    rows = list(frame["Released model"])
    assert rows[:2] == ["a", "ALL 1 (composed)"], rows
    assert rows[2].startswith(f"privatize {EXP} at ") and "replaced or removed; sha256 000000000000" in rows[2]
    assert rows[3] == "EVER MADE 2 (composed, release ledger)" and len(rows) == 4, rows
    assert float(frame.iloc[3]["ε (headline)"]) == pytest.approx(10.0)
    assert any(n.startswith("EVER MADE: every release") for n in notes)
    assert list(build_ledger(tmp_path / "results")[0]["Released model"]) == ["a", "ALL 1 (composed)"]


def test_the_ever_made_row_fills_every_cell_and_never_reads_below_the_current_runs(tmp_path: Path) -> None:
    """A dataset whose current run the ledger does not hold (made before the ledger, or under another private
    root): the EVER MADE row names the current run's neighbour relation and reads at least the current
    composition -- every cell filled (the report's never-an-empty-cell rule), never a composition below what
    exists now; a ledger line without a relation reads 'unknown'."""
    from dpsynth.report.tables import BuiltTable, check_complete
    from tests.test_privacy_ledger import _dps, _write

    _write(tmp_path / "results", "a", DATASET, _dps(100_000))
    now = build_ledger(tmp_path / "results")[0]
    current, relation = now.iloc[-1]["ε (headline)"], now.iloc[-1]["Neighbours"]
    assert relation and float(current) > 1.0, now.to_string()
    for ever in ([], [Release(dataset=DATASET, stage="privatize", name="b", mechanism="gaussian", epsilon=1.0,
                              delta=1e-4, neighbours="", output=str(tmp_path / "gone.npz"), sha256="2" * 64)]):
        frame, _ = build_ledger(tmp_path / "results", ever=(ever, []))
        check_complete(BuiltTable("privacy_ledger", "t", "p", frame, []))
        row = frame.iloc[-1]
        assert row["Released model"].startswith("EVER MADE"), frame.to_string()
        assert row["ε (headline)"] == f"≥ {current}" and relation in row["Neighbours"], frame.to_string()
        if ever:
            assert "unknown" in row["Neighbours"] and frame.iloc[-2]["Neighbours"] == "unknown", frame.to_string()
    # a ledger that holds the current releases composes them as it did: no bound from the current runs
    frame, _ = build_ledger(tmp_path / "results", ever=([_release("c", 50.0, "3" * 64)], []))
    assert frame.iloc[-1]["ε (headline)"] == "50.00", frame.to_string()


# --------------------------------------------------------------------------- end to end, through DVC


def _patch(p: dict) -> None:
    p.update(scale="smoke", datasets=[DATASET], privacy_noise="secret")
    p["pipeline"] = {"experiments": [EXP], "sweeps": []}
    p["evaluation"]["real_datasets"] = []
    p["w2_noise"], p["tables"], p["sweeps"] = {}, {}, {}
    p["experiments"] = {EXP: p["experiments"][EXP]}


def _repro(d: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([venv_bin("dvc"), "repro", f"privatize@{EXP}"], cwd=d, capture_output=True, text=True,
                          timeout=600, env=env())


def _touch(d: Path, rel: str) -> None:
    with open(d / rel, "a", encoding="utf-8") as fh:
        fh.write("\n# an edit\n")


def _budget(d: Path, epsilon: float) -> None:
    p = yaml.safe_load((d / "params.yaml").read_text())
    p["total_budgets"] = {DATASET: {"epsilon": epsilon}}
    (d / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))


def test_editing_a_privatize_dependency_re_runs_it_and_the_ledger_composes_both_releases(
        tmp_path: Path, release_ledger: Path) -> None:
    """Two releases through DVC, composed; a third refused under a budget, before any noise -- also after `make
    clean-results`, which leaves the ledger alone (it lives outside the workspace); a temporary DVC experiment
    (`dvc exp run --temp`, another folder) records its release into the same ledger, which then counts it."""
    d = copy_workflow(tmp_path / "ws", _patch)
    ledger = ReleaseLedger(release_ledger)
    r = _repro(d)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert len(ledger.read()[0]) == 1
    # an edit of a module privatize imports but whose code cannot change its output: no re-run, no release
    for rel in ("src/dpsynth/privacy/central_mechanisms.py", "src/dpsynth/workflow/settings.py"):
        _touch(d, rel)
    status = subprocess.run([venv_bin("dvc"), "status", f"privatize@{EXP}", "--json"], cwd=d, capture_output=True,
                            text=True, env=env(), timeout=300)
    assert json.loads(status.stdout or "{}") == {}, status.stdout
    # an edit of the code that draws the noise: DVC re-runs it -- a second release, said before any noise
    _touch(d, "src/dpsynth/privacy/local.py")
    r = _repro(d)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert f"privatize {EXP}: 1 earlier release(s) of {DATASET}'s records" in r.stdout + r.stderr
    got, damaged = ledger.read()
    assert len(got) == 2 and damaged == [] and got[0].sha256 != got[1].sha256
    assert {r.status for r in got} == {"confirmed"}
    assert got[0].output == got[1].output == str((d / f"data/privatized/{EXP}.npz").resolve())
    total = releases.compose([g for g in got if g.dataset == DATASET])
    assert total.count == 2 and total.epsilon == pytest.approx(10.0)  # 5 + 5: basic composition of local DP
    frame, _ = build_ledger(d / "results", ever=(got, damaged))
    ever = frame[frame["Released model"].str.startswith("EVER MADE")]
    assert list(ever["ε (headline)"]) == ["10.00"], frame.to_string()
    # under a total budget of 12 a third release (another 5) is refused before any noise: nothing appended
    _budget(d, 12.0)
    _touch(d, "src/dpsynth/privacy/local.py")
    refusal = (f"dpsynth: error: total_budgets.{DATASET}: privatize {EXP} refused before any noise is drawn: 2 "
               f"release(s) of {DATASET} spent ε 10, δ 0.0002; this release would add ε 5, δ 0.0001 -- past the "
               "total budget (ε 12)")
    r = _repro(d)
    assert r.returncode != 0 and refusal in r.stderr, r.stderr[-2000:]
    text = ledger.path.read_bytes()
    # `make clean-results` empties the workspace's outputs, private/ included; the ledger stays, and still refuses
    shutil.copy2(REPO / "Makefile", d / "Makefile")
    subprocess.run(["make", "clean-results"], cwd=d, check=True, capture_output=True, timeout=120)
    assert not (d / "private").exists() and not (d / "data" / "privatized").exists()
    r = _repro(d)
    assert r.returncode != 0 and refusal in r.stderr, r.stderr[-2000:]
    assert ledger.path.read_bytes() == text  # nothing appended, nothing rewritten
    # a temporary DVC experiment runs in another folder (under .dvc/tmp): its release lands in the same ledger
    _budget(d, 16.0)
    # (the workspace as git sees it, outputs left to DVC: the temporary copy is made from the commit)
    subprocess.run(["git", "add", "-A", "--", ".", ":(exclude)data", ":(exclude)results"], cwd=d, check=True,
                   capture_output=True, timeout=120)
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "budget 16"], cwd=d,
                   check=True, capture_output=True, timeout=120)
    r = subprocess.run([venv_bin("dvc"), "exp", "run", "--temp", f"privatize@{EXP}"], cwd=d, capture_output=True,
                       text=True, timeout=600, env=env())
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    got, damaged = ledger.read()
    assert len(got) == 3 and damaged == [] and got[2].status == "confirmed", got
    assert not got[2].output.startswith(str(d.resolve() / "data")), got[2].output  # released in the temporary copy
    # ... and the workspace's next release counts it: 15 spent, another 5 is past 16
    _touch(d, "src/dpsynth/privacy/local.py")
    r = _repro(d)
    assert r.returncode != 0 and f"3 release(s) of {DATASET} spent ε 15" in r.stderr, r.stderr[-2000:]


def test_train_records_its_release_and_a_budget_refuses_the_next_before_any_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        digits28_processed: Path, release_ledger: Path) -> None:
    """A central-DP run reserves, then confirms its release with its RDP curve; a retrain past the dataset's
    total budget is refused in one line before the loop takes a step (no new release, the ledger unchanged)."""
    from dpsynth.cli import main
    from tests.conftest import digits28_smoke_params, with_digits28

    p = digits28_smoke_params("dps_digits", 2)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    with_digits28(digits28_processed, tmp_path / p["data"]["root"])
    monkeypatch.chdir(tmp_path)
    train = ["train", "dps_digits", "--device", "cpu", "--no-progress"]
    assert main(train) == 0
    ledger = ReleaseLedger(release_ledger)
    got, _ = ledger.read()
    assert len(got) == 1 and got[0].stage == "train" and got[0].rdp is not None and got[0].dataset == "digits28"
    assert got[0].status == "confirmed" and len(ledger.path.read_text().splitlines()) == 2  # reserved, confirmed
    eps = got[0].epsilon
    p["total_budgets"] = {"digits28": {"epsilon": eps * 1.5}}
    p["experiments"]["dps_digits"]["seed"] = 7  # another configuration: a retrain, a new release
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    gen = Path("models/dps_digits/generator.pt")
    before, text = gen.read_bytes(), ledger.path.read_bytes()
    capsys.readouterr()
    assert main(train) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("dpsynth: error: total_budgets.digits28: train dps_digits refused before any noise is "
                          f"drawn: 1 release(s) of digits28 spent ε {eps:.4g}"), err
    assert ledger.path.read_bytes() == text
    assert gen.read_bytes() == before  # nothing released


def test_the_release_rule_names_the_one_page_report_never_pushed() -> None:
    """results/report.html embeds the real-data rows and every table: whatever makes it a DVC output, the one
    release rule keeps it off every remote (cached, like the tables and figures it quotes)."""
    from dpsynth.paths import REPORT_OUTPUTS, release_rule

    assert "results/report.html" in REPORT_OUTPUTS
    rule = release_rule("results/report.html")
    assert rule.cache and not rule.push and "noise-free" in rule.why
    assert release_rule("results/runs/x/metrics.json").push  # (the runs beside it are released)
