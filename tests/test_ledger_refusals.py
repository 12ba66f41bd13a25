"""Bad input around the release ledger (issue 63, items 3 and 7): each case refused in one line (exit 2, no
traceback), before any record is read, any noise drawn or any output replaced; a hand-edited or torn line is
read as no entry, named with its file and line number, and counted as a release without a guarantee.

- where the ledger lives: $DPSYNTH_LEDGER over params.yaml's ``ledger_dir`` over the per-user default; a
  relative folder, a folder that is a regular file, a ledger file that is a symbolic-link loop, a ledger
  inside a folder a stage writes or `make clean-results` empties;
- a read-only ledger found before privatize replaces its copy and before train releases; a write cut short by a
  full disk (a torn line) is an error, never exit 0;
- hand-edited lines (an epsilon of -100 or NaN, an RDP curve that is a string, a list as dataset): the budget
  refusal names the file and line, the report shows infinity (never "EVER MADE ≥ 0.00");
- ``--private-out`` of privatize (``data/privatized``, ``data``, '') and of report (the ledger file itself).
"""

from __future__ import annotations

import errno
import json
import math
import os
from pathlib import Path

import pytest
import yaml

from dpsynth.cli import main
from dpsynth.privacy import ledger_store, releases
from dpsynth.privacy.ledger_store import ReleaseLedger
from tests.conftest import REPO, digits28_smoke_params, with_digits28
from tests.test_ledger_reservations import DATASET, EXP, _privatize_ws, manifold  # noqa: F401  (a fixture)

TRAIN = ["train", "dps_digits", "--device", "cpu", "--no-progress"]
_LINE = {"dataset": DATASET, "stage": "privatize", "name": EXP, "mechanism": "gaussian", "epsilon": 5.0,
         "delta": 1e-4, "neighbours": "each record (local)", "output": "x.npz", "sha256": "a" * 64}


def _one_line(rc: int, err: str, *parts: str) -> str:
    """The refusal: exit 2, no traceback, its one line last (after the announcement of an earlier release,
    where privatize makes one, and the line naming the ledger a reservation went to)."""
    lines = [ln for ln in err.strip().splitlines()
             if "earlier release(s)" not in ln and not ln.startswith("dpsynth: release ledger ")]
    assert rc == 2 and "Traceback" not in err and len(lines) == 1 and lines[0].startswith("dpsynth: error: "), err
    for part in parts:
        assert part in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def digits(tmp_path: Path, digits28_processed: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    p = digits28_smoke_params("dps_digits", 2)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    with_digits28(digits28_processed, tmp_path / p["data"]["root"])
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --------------------------------------------------------------------------- where the ledger lives


def test_the_ledger_folder_is_the_environments_then_params_then_the_per_user_default(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPSYNTH_LEDGER", str(tmp_path / "env"))
    assert ReleaseLedger.configured(str(tmp_path / "params")).path == tmp_path / "env" / "releases.jsonl"
    monkeypatch.delenv("DPSYNTH_LEDGER")
    assert ReleaseLedger.configured(str(tmp_path / "params")).folder == tmp_path / "params"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert ReleaseLedger.configured("~/shared").folder == tmp_path / "home" / "shared"
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    assert ReleaseLedger.configured(None).folder == tmp_path / "home" / ".local" / "share" / "dpsynth" / "ledger"
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert ReleaseLedger.configured(None).folder == tmp_path / "xdg" / "dpsynth" / "ledger"
    assert not (tmp_path / "home").exists() and not (tmp_path / "xdg").exists()  # located, nothing written


def test_a_relative_ledger_folder_is_refused_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str], manifold: Path) -> None:
    from dpsynth.config import load_params
    from dpsynth.errors import ConfigError

    params = _privatize_ws(tmp_path, manifold)
    raw = yaml.safe_load(params.read_text())
    raw["ledger_dir"] = "ledger"
    params.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"ledger_dir: .*'ledger': must be an absolute path"):
        load_params(params)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DPSYNTH_LEDGER", "private/ledger")
    del raw["ledger_dir"]
    params.write_text(yaml.safe_dump(raw))
    _one_line(main(["privatize", EXP]), capsys.readouterr().err, "$DPSYNTH_LEDGER 'private/ledger': the release "
              "ledger's folder must be an absolute path")
    assert not (tmp_path / "data" / "privatized").exists()


@pytest.mark.parametrize("where", ["--private-out", "data.root"])
def test_a_ledger_inside_a_folder_a_stage_writes_is_refused_before_any_record_is_read(
        digits: Path, where: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        private_reads: list[str]) -> None:
    folder = digits / ("private" if where == "--private-out" else "data") / "ledger"
    monkeypatch.setenv("DPSYNTH_LEDGER", str(folder))
    _one_line(main(TRAIN), capsys.readouterr().err, f"lies inside {where}", "make clean-results")
    assert private_reads == [] and not folder.exists()


def test_a_ledger_folder_that_is_a_file_or_a_ledger_that_is_a_symlink_loop_is_one_line(
        digits: Path, release_ledger: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        private_reads: list[str]) -> None:
    (release_ledger.parent / "afile").write_text("not a folder")  # outside the workspace (refused there)
    monkeypatch.setenv("DPSYNTH_LEDGER", str(release_ledger.parent / "afile"))
    _one_line(main(TRAIN), capsys.readouterr().err, "afile is a file, not a folder")
    monkeypatch.setenv("DPSYNTH_LEDGER", str(release_ledger))
    loop = release_ledger / releases.LEDGER_FILE
    os.symlink(loop, loop)
    _one_line(main(TRAIN), capsys.readouterr().err, "a symbolic link loop")
    _one_line(main(["report"]), capsys.readouterr().err, "a symbolic link loop")
    assert private_reads == [] and not (digits / "models").exists()


# --------------------------------------------------------------------------- unwritable, full


def _unwritable(monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    """The ledger's file system read-only (EROFS) or full (ENOSPC) for opening (the tests run as root, whom
    permissions do not stop)."""
    real = os.open

    def fake(path: object, *a: object, **k: object) -> int:
        if str(path).endswith(releases.LEDGER_FILE):
            raise OSError(code, os.strerror(code), str(path))
        return real(path, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(ledger_store.os, "open", fake)


def test_a_read_only_ledger_is_found_before_privatize_replaces_its_copy_or_train_releases(
        tmp_path: Path, manifold: Path, digits28_processed: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _privatize_ws(tmp_path, manifold)
    monkeypatch.chdir(tmp_path)
    assert main(["privatize", EXP]) == 0
    npz = tmp_path / "data" / "privatized" / f"{EXP}.npz"
    before = npz.read_bytes()
    _unwritable(monkeypatch, errno.EROFS)
    _one_line(main(["privatize", EXP]), capsys.readouterr().err, "Read-only file system", "nothing was released")
    assert npz.read_bytes() == before
    p = digits28_smoke_params("dps_digits", 2)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    with_digits28(digits28_processed, tmp_path / p["data"]["root"])
    _one_line(main(TRAIN), capsys.readouterr().err, "Read-only file system")
    assert not (tmp_path / "models").exists()


@pytest.mark.parametrize("when", ["reserving", "confirming"])
def test_a_write_cut_short_by_a_full_disk_is_an_error_never_exit_0(
        tmp_path: Path, manifold: Path, release_ledger: Path, when: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The write stops halfway (a nearly full disk), then ENOSPC: the job fails in one line. Reserving, it
    fails before any noise (the privatized copy is not replaced); confirming, after the release, it still
    exits 2, its reservation pending and the torn line damaged -- both counted."""
    _privatize_ws(tmp_path, manifold)
    monkeypatch.chdir(tmp_path)
    assert main(["privatize", EXP]) == 0
    npz = tmp_path / "data" / "privatized" / f"{EXP}.npz"
    before = npz.read_bytes()
    real, cut = os.write, []
    target = b'"status": "pending"' if when == "reserving" else b'"status": "confirmed"'

    def short(fd: int, data: bytes) -> int:
        if cut:  # what is left of the line: the disk is full now
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if target in data:
            cut.append(data)
            return real(fd, data[: len(data) // 2])
        return real(fd, data)

    monkeypatch.setattr(ledger_store.os, "write", short)
    _one_line(main(["privatize", EXP]), capsys.readouterr().err, "No space left on device", "torn line")
    got, damaged = ReleaseLedger(release_ledger).read()
    assert len(damaged) == 1 and math.isinf(releases.compose(got, damaged).epsilon)
    if when == "reserving":
        assert npz.read_bytes() == before and [r.status for r in got] == ["confirmed"]
    else:
        assert npz.read_bytes() != before and [r.status for r in got] == ["confirmed", "pending"]


# --------------------------------------------------------------------------- hand-edited lines


@pytest.mark.parametrize("edit, reason", [
    ({"epsilon": -100}, "epsilon -100 is outside [0, inf]"),
    ({"epsilon": float("nan")}, "epsilon is NaN"),
    ({"delta": 2}, "delta 2 is outside [0, 1]"),
    ({"rdp": "rdp"}, "rdp is str 'rdp'"),
    ({"rdp": [1.0, 2.0]}, "rdp is a list of 2"),
    ({"dataset": [DATASET]}, "dataset is list"),
    ({"status": "spent"}, "status 'spent' is not one of"),
    ({"sha256": "abc"}, "sha256 'abc' is not a SHA-256"),
], ids=["eps-100", "eps-nan", "delta2", "rdp-str", "rdp-short", "dataset-list", "status", "sha"])
def test_a_hand_edited_line_is_named_with_its_file_and_line_and_counts_as_no_guarantee(
        tmp_path: Path, manifold: Path, release_ledger: Path, edit: dict, reason: str,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = ReleaseLedger(release_ledger)
    ledger.append(releases.Release(**{**_LINE, "sha256": "b" * 64}))
    with open(ledger.path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({**_LINE, **edit}) + "\n")  # (json writes NaN as NaN, as a hand edit may)
    got, damaged = ledger.read()
    assert len(got) == 1 and [(d.line, d.path) for d in damaged] == [(2, str(ledger.path))], damaged
    assert reason in damaged[0].reason, damaged[0].reason
    assert math.isinf(releases.compose(got, damaged).epsilon)
    # the budget refusal names the file and the line
    _privatize_ws(tmp_path, manifold, budget=1000.0)
    monkeypatch.chdir(tmp_path)
    _one_line(main(["privatize", EXP]), capsys.readouterr().err, "spent ε inf",
              f"damaged ledger line(s) {ledger.path} line 2 ({reason}", "repair it")
    # the report's EVER MADE row reads infinity, never "≥ 0.00"
    from dpsynth.report.ledger import build_ledger

    frame, notes = build_ledger(tmp_path / "results", ever=ledger.read(), ledger=str(ledger.path))
    ever = frame[frame["Released model"].str.startswith("EVER MADE")]
    assert list(ever["ε (headline)"]) == ["∞"], frame.to_string()
    assert any(f"{ledger.path} line 2" in n for n in notes)


def test_the_report_with_no_run_fills_its_ledger_table_and_shows_a_damaged_line_as_infinite(
        tmp_path: Path, release_ledger: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No evaluated run, an empty ledger: the privacy ledger says so in every cell (it failed on 'none', which
    the never-an-empty-cell rule reads as empty); a ledger holding only a damaged line: one row, infinite."""
    import pandas as pd

    from dpsynth.report.ledger import build_ledger

    (tmp_path / "params.yaml").write_text((REPO / "params.yaml").read_text())
    monkeypatch.chdir(tmp_path)
    assert main(["report"]) == 0
    frame = pd.read_csv(tmp_path / "results" / "tables" / "privacy_ledger.csv", dtype=str, keep_default_na=False)
    assert list(frame["Dataset"]) == ["no dataset yet"], frame.to_string()
    ledger = ReleaseLedger(release_ledger)
    ledger.path.write_text(json.dumps({**_LINE, "epsilon": -100}) + "\n")
    frame, _ = build_ledger(tmp_path / "results", runs=[], ever=ledger.read())
    assert list(frame["ε (headline)"]) == ["∞"] and f"{ledger.path} line 1" in frame.iloc[0]["Mechanism"]


def test_a_composition_of_different_neighbouring_relations_says_so() -> None:
    common = dict(stage="train", mechanism="m", delta=1e-5, output="o", rdp=None)
    mixed = [releases.Release(dataset="d", name="a", epsilon=1.0, neighbours="add/remove one", sha256="1" * 64,
                              **common),
             releases.Release(dataset="d", name="b", epsilon=1.0, neighbours="replace one", sha256="2" * 64,
                              **common)]
    how = releases.compose(mixed).how
    assert "mixes neighbouring relations (add/remove one; replace one)" in how, how
    assert "mixes" not in releases.compose(mixed[:1]).how


# --------------------------------------------------------------------------- --private-out


@pytest.mark.parametrize("stage, value", [("privatize", "data/privatized"), ("privatize", "data"),
                                          ("privatize", ""), ("report", "LEDGER")])
def test_private_out_of_privatize_and_report_is_one_line(
        tmp_path: Path, manifold: Path, release_ledger: Path, stage: str, value: str,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """They took it only to find the ledger, which now lives outside every workspace: refused, naming where."""
    _privatize_ws(tmp_path, manifold)
    monkeypatch.chdir(tmp_path)
    value = str(release_ledger / releases.LEDGER_FILE) if value == "LEDGER" else value
    args = [stage, EXP] if stage == "privatize" else [stage]
    _one_line(main([*args, "--private-out", value]), capsys.readouterr().err, f"--private-out {value!r}",
              "params.yaml ledger_dir")
    assert not (tmp_path / "data" / "privatized").exists() and not (tmp_path / "results").exists()
    with pytest.raises(SystemExit):
        main([stage, "--help"])
    assert "--private-out" not in capsys.readouterr().out  # not offered


@pytest.mark.parametrize("kind, why", [("file", "is a file, not a folder"), ("loop", "is a symbolic link loop"),
                                       ("dangling", "is a symbolic link that leads nowhere"),
                                       ("unreadable", "is a folder that cannot be read (Permission denied)")])
def test_report_names_what_is_wrong_with_its_private_root(
        tmp_path: Path, manifold: Path, kind: str, why: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`dpsynth report --private-root` on a file, a symbolic-link loop, a dangling link or an unreadable folder said
    "not readable JSON; re-run dpsynth evaluate" (issue 71 item 6): it names what is wrong with the folder, in one
    line, before any table is written."""
    _privatize_ws(tmp_path, manifold)
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "priv"
    if kind == "file":
        root.write_text("not a folder")
    elif kind == "loop":
        os.symlink(root, root)
    elif kind == "dangling":
        os.symlink(tmp_path / "nowhere", root)
    else:
        if os.geteuid() == 0:
            pytest.skip("root reads every folder: an unreadable one cannot be made")
        root.mkdir(mode=0o000)
    try:
        _one_line(main(["report", "--private-root", str(root)]), capsys.readouterr().err,
                  f"--private-root {root}: {why}", "evaluate jobs wrote")
    finally:
        if kind == "unreadable":
            root.chmod(0o700)
    assert not (tmp_path / "results" / "tables").exists()
