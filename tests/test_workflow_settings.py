"""Each job's settings file (dpsynth.workflow.settings): written by the job itself in a Snakemake run
(`dpsynth --record-settings FILE <stage> ...`, FILE the rule's declared output), by DVC's `settings`
stage otherwise, with the same text. The end-to-end half (a targeted run leaves the other jobs' files
alone; `dvc commit` after a run leaves both tools clean) is in tests/test_dvc.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpsynth.config import load_params
from dpsynth.workflow.settings import job_of, pipeline_jobs, record_settings, settings_path, settings_text, write_settings
from tests.conftest import REPO, run_cli

PARAMS = load_params(REPO / "params.yaml")


def test_a_settings_path_names_its_job_for_every_job_of_the_pipeline():
    jobs = pipeline_jobs(PARAMS)
    assert {job_of(settings_path(stage, name)) for stage, name in jobs} == set(jobs)


@pytest.mark.parametrize("path", ["results/settings/trian/dps_mnist.json", "results/settings/train/dps_mnist.yaml",
                                  "results/train/dps_mnist.json", "dps_mnist.json"])
def test_a_path_that_is_no_jobs_settings_file_is_refused(path: str):
    with pytest.raises(ValueError, match="settings"):
        job_of(path)


def test_a_job_records_the_text_the_settings_stage_writes(tmp_path: Path, monkeypatch):
    """The job's own file and DVC's `settings` stage's are one text, so `dvc commit` after a Snakemake
    run finds the settings stage up to date. A job rewrites an unchanged file too, so that its time is
    the job's end (after a `dvc repro` Snakemake compares it with the job's inputs); the settings
    stage does not (DVC compares content, and an unchanged file keeps its time)."""
    monkeypatch.chdir(tmp_path)
    assert write_settings(PARAMS, Path("all"))
    assert not write_settings(PARAMS, Path("all"))
    for stage, name in pipeline_jobs(PARAMS)[:6] + [("report", "")]:
        path = Path(settings_path(stage, name))
        record_settings(PARAMS, path)
        assert path.read_text() == (Path("all") / path).read_text() == settings_text(PARAMS, stage, name)
        first = path.stat().st_ino
        record_settings(PARAMS, path)
        assert path.stat().st_ino != first and path.read_text() == settings_text(PARAMS, stage, name)


def test_the_cli_refuses_a_bad_settings_path_before_the_stage_runs(tmp_path: Path):
    """One line naming the option and the path; the stage (here a data preparation) never starts, so
    nothing is written."""
    r = run_cli("--record-settings", "results/settings/trian/mnist.json", "data", "prepare", "mnist",
                "--params", str(REPO / "params.yaml"), cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "dpsynth: error: --record-settings: results/settings/trian/mnist.json: unknown stage 'trian'; one of "
        "prepare_data, privatize, warmstart, train_sweep, train, sample, evaluate, evaluate_real, w2_noise, report"]
    assert not any(tmp_path.iterdir())


def test_the_cli_records_a_finished_stages_settings(tmp_path: Path):
    """After the command succeeds, the file holds the settings of the job it names, read from the same
    parameters file (the generated half circle: a job that needs no download). A command that is no one
    job of the pipeline is refused (tests/test_bad_input_refusals.py)."""
    path = "results/settings/prepare_data/manifold2d_half_circle.json"
    r = run_cli("--record-settings", path, "data", "prepare", "manifold2d_half_circle",
                "--params", str(REPO / "params.yaml"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / path).read_text() == settings_text(PARAMS, "prepare_data", "manifold2d_half_circle")
