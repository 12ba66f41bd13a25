"""Bad input refused in one line (exit 2, no traceback), naming the file, BEFORE the stage reads a private
record or releases anything (issue 58, item 8 of its review):

- ``dpsynth workflow plan`` on a damaged dvc.lock (broken YAML, a YAML list, random bytes);
- ``--record-settings FILE`` where FILE is a directory, its folder is a file, or it names another job or a
  job the parameters do not configure: refused before ``train`` runs (for train, that run is a release);
- params.yaml with lists nested 1,000 deep (was a RecursionError) and 100,000 deep (was a segfault in the
  C YAML parser, rc 139 and no word): the depth is bounded before the file is parsed;
- a ``run.lock`` that is a directory.

The re-privatization case (a second release over an existing one, said in one line before any noise is
drawn) is in tests/test_release_ledger.py, with the ledger it is recorded in.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from dpsynth.cli import main
from tests.conftest import REPO, digits28_smoke_params, run_cli, with_digits28

EXP = "dps_digits"
TRAIN = ["train", EXP, "--device", "cpu", "--no-progress", "--json"]


def _one_line(rc: int, err: str) -> str:
    """The refusal's line: exit 2, no traceback, one line starting with dpsynth's error prefix."""
    assert rc == 2, err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dpsynth: error: "), err
    return lines[0]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory, digits28_processed: Path) -> Path:
    """params.yaml (one 2-step DP-Sinkhorn run on digits28) and the prepared data."""
    d = tmp_path_factory.mktemp("refusals")
    params = digits28_smoke_params(EXP, 2)
    (d / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    with_digits28(digits28_processed, d / params["data"]["root"])
    return d


@pytest.fixture
def work(prepared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "w"
    shutil.copytree(prepared, d)
    monkeypatch.chdir(d)
    return d


# --------------------------------------------------------------------------- dvc.lock damaged


@pytest.mark.parametrize("content, expected", [
    (b"stages:\n  settings: [a\n", "dvc.lock: not valid YAML at line "),
    (b"- a\n- b\n", "dvc.lock: expected a mapping with a 'stages' mapping, got list"),
    (bytes(range(256)) * 3, "dvc.lock: not UTF-8 text"),
    (b"stages: " + b"[" * 5000 + b"]" * 5000 + b"\n", "dvc.lock: nested deeper than 100 levels"),
], ids=["broken-yaml", "yaml-list", "random-bytes", "deep"])
def test_plan_on_a_damaged_dvc_lock_is_one_line_before_anything_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], content: bytes,
        expected: str) -> None:
    from dpsynth.config import load_params
    from dpsynth.workflow.dvc import render

    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    (tmp_path / "dvc.yaml").write_text(render(load_params(tmp_path / "params.yaml")))
    (tmp_path / "dvc.lock").write_bytes(content)
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    line = _one_line(main(["workflow", "plan"]), capsys.readouterr().err)
    assert expected in line and "restore it (git checkout dvc.lock) or remove it" in line, line
    assert not (tmp_path / "results").exists()  # no settings file was brought up to date


# --------------------------------------------------------------------------- --record-settings


def _refused_before_train(work: Path, capsys: pytest.CaptureFixture[str], private_reads: list[str],
                          path: str, *command: str) -> str:
    capsys.readouterr()
    line = _one_line(main(["--record-settings", path, *(command or TRAIN)]), capsys.readouterr().err)
    assert f"--record-settings {path}: " in line and "(nothing was run)" in line, line
    assert private_reads == []  # the stage never started: no record read, no budget spent
    assert not (work / "models").exists() and not (work / "private").exists()  # nothing released or trained
    return line


def test_a_settings_file_that_is_a_directory_is_refused_before_train_runs(
        work: Path, capsys: pytest.CaptureFixture[str], private_reads: list[str]) -> None:
    path = f"results/settings/train/{EXP}.json"
    Path(path).mkdir(parents=True)
    line = _refused_before_train(work, capsys, private_reads, path)
    assert "is a directory" in line, line


def test_a_settings_file_whose_folder_is_a_file_is_refused_before_train_runs(
        work: Path, capsys: pytest.CaptureFixture[str], private_reads: list[str]) -> None:
    Path("results/settings").mkdir(parents=True)
    Path("results/settings/train").write_text("a file\n")
    line = _refused_before_train(work, capsys, private_reads, f"results/settings/train/{EXP}.json")
    assert "results/settings/train is a file, not a directory" in line, line
    assert Path("results/settings/train").read_text() == "a file\n"


def test_a_settings_file_of_another_job_is_refused(work: Path, capsys: pytest.CaptureFixture[str],
                                                   private_reads: list[str]) -> None:
    line = _refused_before_train(work, capsys, private_reads, f"results/settings/sample/{EXP}.json")
    assert f"the settings file of job sample/{EXP}, but this command runs job train/{EXP}" in line, line
    assert not Path("results").exists()


def test_a_settings_file_of_a_job_that_does_not_exist_is_refused(
        work: Path, capsys: pytest.CaptureFixture[str], private_reads: list[str]) -> None:
    line = _refused_before_train(work, capsys, private_reads, "results/settings/train/nope.json")
    assert f"the settings file of job train/nope, but this command runs job train/{EXP}" in line, line
    line = _refused_before_train(work, capsys, private_reads, "results/settings/train/nope.json",
                                 "train", "nope", "--device", "cpu")
    assert "params.yaml configures no job train/nope" in line, line
    assert not Path("results").exists()


def test_a_command_that_is_no_pipeline_job_records_no_settings(
        work: Path, capsys: pytest.CaptureFixture[str], private_reads: list[str]) -> None:
    line = _refused_before_train(work, capsys, private_reads, "results/settings/report/report.json",
                                 "experiments", "list")
    assert "`dpsynth experiments` is not one pipeline job" in line, line


# --------------------------------------------------------------------------- params.yaml nested too deep


def _deep(kind: str, n: int) -> str:
    if kind == "flow":
        return "scale: smoke\nx: " + "[" * n + "]" * n + "\n"
    return "scale: smoke\nx:\n  " + "- " * n + "1\n"


@pytest.mark.parametrize("kind", ["flow", "block"])
def test_params_nested_1000_deep_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    """Was a RecursionError in the duplicate-key check."""
    path = tmp_path / "params.yaml"
    path.write_text(_deep(kind, 1000))
    capsys.readouterr()
    line = _one_line(main(["config", "check", str(path)]), capsys.readouterr().err)
    assert f"{path}: nested deeper than 100 levels (line {2 if kind == 'flow' else 3})" in line, line


@pytest.mark.parametrize("kind", ["flow", "block"])
def test_params_nested_100000_deep_is_one_line_not_a_segfault(tmp_path: Path, kind: str) -> None:
    """Was a segfault in the C YAML composer (rc 139, no output): bounded before parsing. In a subprocess,
    so that the crash, were it back, would fail this test instead of killing pytest."""
    path = tmp_path / "params.yaml"
    path.write_text(_deep(kind, 100_000))
    for argv in (["config", "check", str(path)], [*TRAIN, "--params", str(path)]):
        r = run_cli(*argv, cwd=tmp_path)
        line = _one_line(r.returncode, r.stderr)
        assert f"{path}: nested deeper than 100 levels" in line, line
    assert not (tmp_path / "models").exists()


def test_the_depth_bound_leaves_the_shipped_params_alone() -> None:
    from dpsynth.config.loader import yaml_depth_problem

    assert yaml_depth_problem((REPO / "params.yaml").read_text()) is None
    # the top-level mapping is one level: 99 lists inside it reach the bound, 100 pass it
    assert yaml_depth_problem("a: " + "[" * 99 + "]" * 99) is None
    assert yaml_depth_problem("a: " + "[" * 100 + "]" * 100) is not None


# --------------------------------------------------------------------------- run.lock a directory


def test_a_run_lock_that_is_a_directory_is_refused_before_any_record_is_read(
        work: Path, capsys: pytest.CaptureFixture[str], private_reads: list[str]) -> None:
    lock = Path("private/runs") / EXP / "run.lock"
    lock.mkdir(parents=True)
    capsys.readouterr()
    line = _one_line(main(TRAIN), capsys.readouterr().err)
    assert f"{lock}: is a directory, not experiment {EXP}'s lock file" in line, line
    assert private_reads == []
    assert not (work / "models").exists() and lock.is_dir()
