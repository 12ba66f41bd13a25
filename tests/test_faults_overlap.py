"""Private and released folders never overlap, in either direction (issue 45, faults 6 and 8).

``train --out X --private-out X`` (or ``X/private``) would put ``checkpoint.pt`` -- with the secret
noise generators' state -- and the un-noised diagnostics inside the folder that is released; a
released folder inside the private one mixes the two the other way. Each is refused in one line,
exit 2, before the parameters or any private record are read and before anything is created."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpsynth.cli import main
from dpsynth.errors import DpsynthError
from dpsynth.locations import check_apart
from tests.conftest import REPO

PARAMS = str(REPO / "params.yaml")


def _refused(rc: int, err: str, *words: str) -> str:
    assert rc == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for w in words:
        assert w in err, err
    return err


@pytest.mark.parametrize(("out", "private"), [("X", "X"), ("X", "X/private"), ("X", "X/./private/.."),
                                              ("P/models", "P")])
@pytest.mark.parametrize("stage", [["train", "exp"], ["train-sweep", "sweep"]])
def test_train_refuses_overlapping_release_and_private_folders(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        stage: list[str], out: str, private: str) -> None:
    monkeypatch.chdir(tmp_path)
    rc = main([*stage, "--out", out, "--private-out", private, "--params", "no-such.yaml"])
    _refused(rc, capsys.readouterr().err, f"--out {out} and --private-out {private} overlap",
             "nothing was read or written")
    assert list(tmp_path.iterdir()) == []  # nothing created (and no params read: the file does not exist)


def test_a_symlink_into_the_private_folder_is_an_overlap(tmp_path: Path) -> None:
    (tmp_path / "private").mkdir()
    (tmp_path / "models").symlink_to(tmp_path / "private")
    with pytest.raises(DpsynthError, match="they are the same folder"):
        check_apart(("--private-out", tmp_path / "private"), ("--out", tmp_path / "models"))
    check_apart(("--private-out", tmp_path / "private"), ("--out", tmp_path / "private2"))  # a prefix is not a parent


@pytest.mark.parametrize("flags", [["--out", "private/synthetic"], ["--results", "private"],
                                   ["--private-out", "data/synthetic/p"], ["--private-out", "results/x"]])
def test_sample_refuses_an_output_overlapping_the_private_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], flags: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    rc = main(["sample", "dps_mnist", "--params", PARAMS, *flags])
    _refused(rc, capsys.readouterr().err, "overlap", "--private-out")
    assert list(tmp_path.iterdir()) == []


def test_evaluate_refuses_results_inside_the_private_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    rc = main(["evaluate", "dps_mnist", "--params", PARAMS, "--results", "private/results"])
    _refused(rc, capsys.readouterr().err, "--results private/results and --private-out private overlap")
    assert list(tmp_path.iterdir()) == []
