"""Damaged or hand-edited input files fail with a message naming the file and the problem (no
traceback), and never replace good outputs: invalid JSON, truncated synthetic sets, malformed or
edited metrics.json, killed writers' temporaries, and a report killed or failing half-way."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from dpsynth.cli import main
from dpsynth.errors import DataError
from dpsynth.evaluate.sampling import load_synthetic, write_synthetic
from dpsynth.io import atomic_path, read_json, recover_staged_dir, write_json, write_npz, writer_prefix
from tests.conftest import run_cli
from tests.test_evaluate_stage import PRIVACY, workdir  # noqa: F401  (workdir: a fixture used below)
from tests.test_report import DPS_PRIVACY, GS_PRIVACY, NP_PRIVACY, fixture_raw, write_metrics

# --------------------------------------------------------------------------- A: invalid JSON


@pytest.mark.parametrize("content, message", [
    (b'{"mechanism": "x",\n  "epsilon": {', r"not valid JSON \(line 2, column 15: Expecting property name"),
    (b"", r"not valid JSON \(the file is empty"),
    (b"   \n", r"not valid JSON \(the file is empty"),
    (b'{"a": 1} trailing', r"not valid JSON \(line 1, column 10: Extra data"),
    (b'{"a": "\xff\xfe"}', r"not valid JSON \(not UTF-8 text"),
])
def test_read_json_names_the_file_and_where_it_is_broken(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "privacy.json"
    path.write_bytes(content)
    with pytest.raises(DataError, match=message) as info:
        read_json(path)
    assert str(info.value).startswith(f"{path}: ")


def test_read_json_missing_or_folder_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=rf"^{re.escape(str(tmp_path / 'nope.json'))}: file not found$"):
        read_json(tmp_path / "nope.json")
    with pytest.raises(DataError, match="is a folder"):
        read_json(tmp_path)
    assert read_json(_write(tmp_path / "ok.json", '{"a": [1, 2]}')) == {"a": [1, 2]}


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_sample_cli_invalid_privacy_json_is_named_without_traceback(tmp_path: Path) -> None:
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(fixture_raw()), encoding="utf-8")
    bad = _write(tmp_path / "models" / "dps_mnist" / "privacy.json", '{"mechanism": "image_gradient",\n"sigma": }')
    res = run_cli("sample", "dps_mnist", "--params", "params.yaml", "--models", "models", "--out", "synthetic",
                  "--results", "results", cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "models/dps_mnist/privacy.json: not valid JSON (line 2, column 10: Expecting value)" in res.stderr
    assert bad.read_text() and not (tmp_path / "synthetic").exists()


# --------------------------------------------------------------------------- B: damaged synthetic sets


def _good_npz(path: Path) -> Path:
    x = np.tile(np.arange(28, dtype=np.uint8), (200, 1, 28, 1))
    write_synthetic(path, x, np.arange(200) % 10, 10, PRIVACY, {"experiment": path.parent.name})
    return path


def _rewrite(**arrays: Any) -> Any:
    def edit(path: Path) -> None:
        with np.load(path) as z:
            data = {k: z[k] for k in z.files}
        data.update(arrays)
        data = {k: v for k, v in data.items() if v is not None}
        path.unlink()
        np.savez(path, **data)
    return edit


def _truncate(n: int | None) -> Any:
    def edit(path: Path) -> None:
        b = path.read_bytes()
        path.write_bytes(b[:len(b) // 2 if n is None else n])
    return edit


def _save_npy(path: Path, arr: np.ndarray) -> None:
    with open(path, "wb") as fh:
        np.save(fh, arr)


def _corrupt_middle(path: Path) -> None:
    b = bytearray(path.read_bytes())
    b[300:360] = bytes(60)
    path.write_bytes(bytes(b))


@pytest.mark.parametrize("edit, message", [
    (_truncate(None), r"truncated or not an \.npz \(BadZipFile"),
    (_truncate(0), r"truncated or not an \.npz \(EOFError"),
    (_truncate(10), r"truncated or not an \.npz \(BadZipFile"),
    (_corrupt_middle, r"truncated or not an \.npz \("),
    (lambda p: p.write_text("hello, not an archive"), r"unreadable synthetic dataset \(ValueError"),
    (lambda p: _save_npy(p, np.zeros(3)), r"a single \.npy array"),
    (_rewrite(y=None), r"missing array\(s\) \['y'\]"),
    (_rewrite(x=None, num_classes=None), r"missing array\(s\) \['num_classes', 'x'\]"),
    (_rewrite(privacy_report=None), "no privacy report inside"),
    (_rewrite(y=np.zeros(200, np.float32)), "must be 200 integer labels"),
    (_rewrite(x=np.zeros((200, 28, 28), np.uint8)), r"x has shape \(200, 28, 28\)"),
    (_rewrite(x=np.zeros((200, 1, 28, 28), np.float64)), "images must be uint8"),
    (_rewrite(x=np.array([["a"] * 4] * 200)), "points must be numbers"),
    (_rewrite(x=np.array([None] * 200, dtype=object)), r"unreadable synthetic dataset \(ValueError.*pickle"),
    (_rewrite(num_classes=np.array([10, 10])), "num_classes must be one integer"),
    (_rewrite(num_classes=np.float64(10.0)), "num_classes must be one integer"),
    (_rewrite(privacy_report=np.array("{not json")), "privacy_report is not valid JSON"),
    (_rewrite(privacy_report=np.arange(3)), "privacy_report must be one JSON string"),
    (_rewrite(privacy_report=np.array("[1, 2]")), "privacy_report must be a JSON object"),
])
def test_damaged_synthetic_set_is_a_data_error_naming_it(tmp_path: Path, edit: Any, message: str) -> None:
    path = _good_npz(tmp_path / "dps_x" / "seed0.npz")
    load_synthetic(path, (1, 28, 28), 10)  # the intact file loads
    edit(path)
    with pytest.raises(DataError, match=message) as info:
        load_synthetic(path, (1, 28, 28), 10)
    assert str(info.value).startswith(f"{path}: ")


def test_io_error_reading_synthetic_set_is_a_data_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _good_npz(tmp_path / "dps_x" / "seed0.npz")

    def failing_load(*args: Any, **kwargs: Any) -> Any:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(np, "load", failing_load)
    with pytest.raises(DataError, match=r"seed0.npz: unreadable synthetic dataset \(OSError.*"
                                        r"re-run `dpsynth sample dps_x`"):
        load_synthetic(path)


def test_evaluate_cli_truncated_npz_is_named_and_writes_nothing(workdir: Path,  # noqa: F811
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = workdir / "data/synthetic/dps_digits/seed0.npz"
    x = np.zeros((100, 1, 28, 28), np.uint8)
    write_synthetic(path, x, np.arange(100) % 10, 10, PRIVACY, {"experiment": "dps_digits"})
    _truncate(None)(path)
    monkeypatch.chdir(workdir)
    import torch

    threads = torch.get_num_threads()
    try:
        assert main(["evaluate", "dps_digits"]) == 2
    finally:
        torch.set_num_threads(threads)  # the stage pins torch's threads; leave other tests theirs
    err = capsys.readouterr().err
    assert ("data/synthetic/dps_digits/seed0.npz: truncated or not an .npz (BadZipFile: File is not a zip file); "
            "re-run `dpsynth sample dps_digits`") in err, err
    assert not (workdir / "results/runs/dps_digits/metrics.json").exists()


# --------------------------------------------------------------------------- report trees (C, D, F)

REPORT_TABLES = ("table1_mnist", "pm_grid_mnist", "privacy")


def _report_tree(tmp_path: Path) -> tuple[Path, Path]:
    """params.yaml with three tables and a results/ of real runs (real privacy reports)."""
    raw = fixture_raw()
    raw["tables"] = {k: raw["tables"][k] for k in REPORT_TABLES}
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(raw), encoding="utf-8")
    res = tmp_path / "results"
    write_metrics(res, "dps_mnist", privacy=DPS_PRIVACY, dataset="mnist", method="dp_sinkhorn")
    write_metrics(res, "gswgan_mnist", privacy=GS_PRIVACY, dataset="mnist", method="gs_wgan")
    write_metrics(res, "sinkhorn_mnist_nonprivate", privacy=NP_PRIVACY, dataset="mnist", method="dp_sinkhorn")
    write_metrics(res, "real_mnist", dataset="mnist", method="real data")
    return params, res


def _report(params: Path, res: Path) -> int:
    return main(["report", "--params", str(params), "--results", str(res)])


def _snapshot(res: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every output file: content, mtime and inode (a rewrite with equal bytes still shows)."""
    out = {}
    for sub in ("tables", "figures"):
        for p in sorted((res / sub).iterdir()):
            st = p.stat()
            out[f"{sub}/{p.name}"] = (p.read_bytes(), st.st_mtime_ns, st.st_ino)
    return out


def _leftovers(res: Path) -> list[str]:
    return sorted(p.name for p in res.iterdir() if p.name.startswith("."))


@pytest.fixture
def reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Path, dict[str, Any]]:
    """A report tree with one successful report written; returns (params, results, snapshot)."""
    params, res = _report_tree(tmp_path)
    assert _report(params, res) == 0
    capsys.readouterr()
    snap = _snapshot(res)
    assert {"tables/table1_mnist.md", "tables/privacy_ledger.csv", "figures/privacy_utility.csv"} <= set(snap)
    return params, res, snap


def _edit_metrics(res: Path, name: str, edit: Any) -> Path:
    path = res / ("real/mnist" if name == "real_mnist" else f"runs/{name}") / "metrics.json"
    m = json.loads(path.read_text())
    edit(m)
    path.write_text(json.dumps(m))
    return path


def _refused(params: Path, res: Path, snap: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> str:
    assert _report(params, res) == 2
    err = capsys.readouterr().err
    assert _snapshot(res) == snap, "a refused report must leave the previous tables and figures untouched"
    assert _leftovers(res) == []
    return err


# --------------------------------------------------------------------------- C: malformed metrics.json


@pytest.mark.parametrize("name, edit, key, why", [
    ("dps_mnist", lambda m: m.pop("classifiers"), "classifiers", "is missing"),
    ("dps_mnist", lambda m: m.update(privacy="oops"), "privacy", "must be the run's privacy report"),
    ("dps_mnist", lambda m: m.update(privacy=None), "privacy", "must be the run's privacy report"),
    ("dps_mnist", lambda m: m.update(classifiers="oops"), "classifiers", "must be a mapping"),
    ("dps_mnist", lambda m: m.update(classifiers={}), "classifiers", "is empty"),
    ("dps_mnist", lambda m: m["classifiers"]["mlp"].pop("mean"), "classifiers.mlp", "must be a record with numeric"),
    ("dps_mnist", lambda m: m.pop("fid"), "fid", "is missing"),
    ("dps_mnist", lambda m: m.update(fid="n/a"), "fid", "must be a mapping"),
    ("dps_mnist", lambda m: m["fid"].pop("mean"), "fid", "says available but"),
    ("dps_mnist", lambda m: m.pop("scale"), "scale", "is missing"),
    ("dps_mnist", lambda m: m.update(experiment="gswgan_mnist"), "experiment",
     "is 'gswgan_mnist' but the file is that of 'dps_mnist' (copied from another run?)"),
    ("dps_mnist", lambda m: m.update(dataset="celeba"), "dataset", "is 'celeba', expected 'mnist'"),
    ("real_mnist", lambda m: m.update(privacy=DPS_PRIVACY), "privacy", "must be null for a real-data row"),
    ("real_mnist", lambda m: m.pop("classifiers"), "classifiers", "is missing"),
    # issue 45, faults 9-10 (an accuracy of 1.7 and the other ranges: tests/test_metrics_record.py, same path)
    ("dps_mnist", lambda m: m["classifiers"]["logreg"].update(mean=0.99, std=0.0, n=1, values=[0.3763]),
     "classifiers.logreg.mean", "is 0.99 but its recorded values give 0.3763"),
])
def test_report_refuses_malformed_metrics_and_keeps_old_tables(reported: Any, capsys: pytest.CaptureFixture[str],
                                                               name: str, edit: Any, key: str, why: str) -> None:
    params, res, snap = reported
    path = _edit_metrics(res, name, edit)
    err = _refused(params, res, snap, capsys)
    assert f"dpsynth: error: {path}: key {key!r} {why}" in err, err
    assert "nothing was written" in err


def test_report_refuses_unconfigured_run_without_dataset(reported: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """A stale run no longer in params.yaml still enters the ledger: it must say its dataset itself."""
    params, res, snap = reported
    path = res / "runs" / "old_cell" / "metrics.json"
    path.parent.mkdir(parents=True)
    m = json.loads((res / "runs" / "dps_mnist" / "metrics.json").read_text())
    del m["dataset"]
    path.write_text(json.dumps({**m, "experiment": "old_cell"}))
    err = _refused(params, res, snap, capsys)
    assert f"{path}: key 'dataset' is missing" in err, err


def test_report_invalid_metrics_json_is_named(reported: Any, capsys: pytest.CaptureFixture[str]) -> None:
    params, res, snap = reported
    path = res / "runs" / "gswgan_mnist" / "metrics.json"
    path.write_text(path.read_text()[:40])
    err = _refused(params, res, snap, capsys)
    assert f"dpsynth: error: {path}: not valid JSON (line 1, column" in err, err


# --------------------------------------------------------------------------- D: a hand-lowered epsilon


def test_report_refuses_hand_lowered_epsilon_and_writes_nothing(reported: Any,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    params, res, snap = reported
    path = _edit_metrics(res, "dps_mnist", lambda m: m["privacy"]["epsilon"].update(rdp_classic=1.0))
    err = _refused(params, res, snap, capsys)
    assert str(path) in err and "epsilon['rdp_classic'] = 1.0" in err, err


def test_report_refuses_hand_lowered_epsilon_of_a_run_in_no_table(reported: Any,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The ledger reads every run, so a run no table lists is verified too."""
    params, res, snap = reported
    path = res / "runs" / "old_cell" / "metrics.json"
    path.parent.mkdir(parents=True)
    m = json.loads((res / "runs" / "dps_mnist" / "metrics.json").read_text())
    m["privacy"]["epsilon"]["rdp_modern"] = 0.1
    path.write_text(json.dumps({**m, "experiment": "old_cell"}))
    err = _refused(params, res, snap, capsys)
    assert str(path) in err and "epsilon['rdp_modern'] = 0.1" in err, err


# --------------------------------------------------------------------------- E: killed writers' temporaries


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()  # reaped: the pid names no process now
    return p.pid


@pytest.fixture
def live_pid() -> Any:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield p.pid
    p.kill()
    p.wait()


def test_temp_name_carries_the_writers_pid(tmp_path: Path) -> None:
    dest = tmp_path / "m.json"
    with atomic_path(dest, suffix=".npz") as tmp:
        assert tmp.name.startswith(writer_prefix(dest)) and tmp.name.endswith(".npz.tmp")
        assert f".{os.getpid()}." in tmp.name
        tmp.write_text("x")
    assert dest.read_text() == "x" and [p.name for p in tmp_path.iterdir()] == ["m.json"]


def test_success_removes_dead_writers_temps_but_not_live_ones(tmp_path: Path, live_pid: int) -> None:
    dest = tmp_path / "metrics.json"
    dead = _dead_pid()
    stale = tmp_path / f"{writer_prefix(dest, dead)}abcd1234.tmp"
    stale_npz = tmp_path / f"{writer_prefix(dest, dead)}ab_d1234.npz.tmp"
    live = tmp_path / f"{writer_prefix(dest, live_pid)}abcd1234.tmp"
    other_dest = tmp_path / f"{writer_prefix(tmp_path / 'other.json', dead)}abcd1234.tmp"
    other_host = tmp_path / f".metrics.json.otherhost.{dead}.abcd1234.tmp"
    legacy = tmp_path / ".metrics.json.abcd1234.tmp"  # old naming: the writer is unknown, so it is kept
    for p in (stale, stale_npz, live, other_dest, other_host, legacy):
        p.write_text("partial")
    write_json(dest, {"a": 1})
    assert read_json(dest) == {"a": 1}
    assert not stale.exists() and not stale_npz.exists()
    assert live.exists() and other_dest.exists() and other_host.exists() and legacy.exists()


def test_temp_of_a_sigkilled_writer_is_removed_by_the_next_write(tmp_path: Path) -> None:
    dest = tmp_path / "seed0.npz"
    script = textwrap.dedent(f"""
        import os, signal
        from dpsynth.io import atomic_path
        with atomic_path({str(dest)!r}, suffix=".npz") as tmp:
            tmp.write_bytes(b"half a file")
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert res.returncode == -signal.SIGKILL
    left = [p for p in tmp_path.iterdir() if p.name.endswith(".npz.tmp")]
    assert len(left) == 1 and not dest.exists()
    write_npz(dest, x=np.arange(3))
    assert [p.name for p in tmp_path.iterdir()] == ["seed0.npz"]


# --------------------------------------------------------------------------- F: the report swaps whole folders


def _fail_after(n: int, real: Any) -> Any:
    calls = {"n": 0}

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] > n:
            raise RuntimeError("disk full (simulated)")
        return real(*args, **kwargs)
    return wrapper


@pytest.mark.parametrize("module, func, n", [
    ("dpsynth.report.tables", "write_table", 2),  # two tables written, the third fails
    ("dpsynth.report.figures", "privacy_utility", 0),  # every table and most figures written
])
def test_failed_report_leaves_the_previous_set_untouched(reported: Any, monkeypatch: pytest.MonkeyPatch,
                                                         module: str, func: str, n: int) -> None:
    import importlib

    params, res, snap = reported
    write_metrics(res, "dps_mnist", privacy=DPS_PRIVACY, dataset="mnist", method="dp_sinkhorn",
                  acc={"logreg": (0.5, 0.0), "mlp": (0.5, 0.0), "cnn": (0.5, 0.0)})  # new numbers
    mod = importlib.import_module(module)
    monkeypatch.setattr(mod, func, _fail_after(n, getattr(mod, func)))
    with pytest.raises(RuntimeError, match="disk full"):
        _report(params, res)
    assert _snapshot(res) == snap
    assert _leftovers(res) == [], "no staging folder may be left beside the real ones"


def test_successful_report_replaces_the_whole_set(reported: Any) -> None:
    params, res, snap = reported
    (res / "tables" / "stale_table.md").write_text("from a table since removed from params.yaml")
    write_metrics(res, "dps_mnist", privacy=DPS_PRIVACY, dataset="mnist", method="dp_sinkhorn",
                  acc={"logreg": (0.5, 0.0), "mlp": (0.5, 0.0), "cnn": (0.5, 0.0)})
    assert _report(params, res) == 0
    new = _snapshot(res)
    assert set(new) == set(snap)  # the stale file is gone with the old folder
    assert "50.0 (1 run, 5 sets, all equal)" in (res / "tables" / "table1_mnist.md").read_text()
    assert _leftovers(res) == []


def test_report_refuses_to_replace_a_folder_it_did_not_write(reported: Any,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    params, res, _ = reported
    (res / "figures" / "notes.txt").write_text("mine")
    assert _report(params, res) == 2
    assert "holds 'notes.txt', which `dpsynth report` does not write" in capsys.readouterr().err
    assert (res / "figures" / "notes.txt").read_text() == "mine"


_KILL_SCRIPT = """
import os, signal, sys
import dpsynth.io
import dpsynth.report.tables
from dpsynth.cli import main

def die():
    os.kill(os.getpid(), signal.SIGKILL)

where = os.environ["KILL_AT"]
if where == "tables_written":  # every table written into the staging folder, none swapped in
    real_index = dpsynth.report.tables.write_index
    def write_index(*a, **k):
        real_index(*a, **k)
        die()
    dpsynth.report.tables.write_index = write_index
elif where == "between_renames":  # no atomic exchange: tables moved aside, the new set not yet in
    dpsynth.io._exchange = lambda a, b: False
    real_rename = os.rename
    def rename(a, b):
        real_rename(a, b)
        if os.path.basename(a) == "tables" and str(b).endswith(".old"):
            die()
    os.rename = rename
elif where == "after_exchange":  # tables swapped in, the old set not yet deleted
    real_remove = dpsynth.io._remove_tree
    def remove(p):
        if p.name.startswith(".tables."):
            die()
        real_remove(p)
    dpsynth.io._remove_tree = remove
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("kill_at", ["tables_written", "between_renames", "after_exchange"])
def test_killed_report_leaves_a_complete_set_and_the_next_run_cleans_up(reported: Any, tmp_path: Path,
                                                                         kill_at: str) -> None:
    params, res, snap = reported
    old_tables = {k: v[0] for k, v in snap.items() if k.startswith("tables/")}
    write_metrics(res, "dps_mnist", privacy=DPS_PRIVACY, dataset="mnist", method="dp_sinkhorn",
                  acc={"logreg": (0.5, 0.0), "mlp": (0.5, 0.0), "cnn": (0.5, 0.0)})
    script = tmp_path / "kill_report.py"
    script.write_text(_KILL_SCRIPT)
    proc = subprocess.run([sys.executable, str(script), "report", "--params", str(params), "--results", str(res)],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "KILL_AT": kill_at})
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert _leftovers(res), "the killed run leaves its staging or aside folder"

    def tables_in(folder: Path) -> dict[str, bytes]:
        return {f"tables/{p.name}": p.read_bytes() for p in folder.iterdir()}

    if kill_at == "between_renames":
        assert not (res / "tables").exists()
        aside = [p for p in res.iterdir() if p.name.startswith(".tables.") and p.name.endswith(".old")]
        assert len(aside) == 1 and tables_in(aside[0]) == old_tables  # the old set, complete
        recover_staged_dir(res / "tables")
        assert tables_in(res / "tables") == old_tables
    elif kill_at == "tables_written":
        assert tables_in(res / "tables") == old_tables
    killed_state = tables_in(res / "tables")
    assert _report(params, res) == 0
    assert _leftovers(res) == []
    new_tables = tables_in(res / "tables")
    assert new_tables != old_tables and set(new_tables) == set(old_tables)
    if kill_at == "after_exchange":
        assert killed_state == new_tables  # the complete new set was already in place
