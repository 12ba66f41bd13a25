"""`dpsynth workflow dvc`: dvc.yaml is generated from params.yaml, the committed one is current,
a stale one is refused by `--check`, and what has stages follows from `pipeline:`. (The DAG it
gives is compared with Snakemake's, job by job, in tests/test_workflow_sync.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dpsynth.cli import main
from dpsynth.config import parse_params
from dpsynth.errors import ConfigError
from dpsynth.workflow.dvc import dvc_stages, render
from tests.conftest import REPO


def shipped() -> dict:
    return yaml.safe_load((REPO / "params.yaml").read_text())


def test_the_committed_dvc_yaml_is_what_params_yaml_gives(capsys):
    assert (REPO / "dvc.yaml").read_text() == render(parse_params(shipped()))
    assert main(["workflow", "dvc", "--check", "--params", str(REPO / "params.yaml"),
                 "--output", str(REPO / "dvc.yaml")]) == 0
    assert "up to date" in capsys.readouterr().out


def test_check_refuses_a_stale_file_and_writing_regenerates_it(tmp_path: Path, capsys):
    raw = shipped()
    raw["pipeline"]["experiments"].append("gswgan_fmnist_loose")
    params, out = tmp_path / "params.yaml", tmp_path / "dvc.yaml"
    params.write_text(yaml.safe_dump(raw))
    out.write_text((REPO / "dvc.yaml").read_text())
    assert main(["workflow", "dvc", "--check", "--params", str(params), "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"dpsynth: error: {out} is stale for {params}: run `dpsynth workflow dvc`") and "\n" not in err
    assert out.read_text() == (REPO / "dvc.yaml").read_text()  # --check writes nothing
    assert main(["workflow", "dvc", "--params", str(params), "--output", str(out)]) == 0
    assert main(["workflow", "dvc", "--check", "--params", str(params), "--output", str(out)]) == 0
    stages = yaml.safe_load(out.read_text())["stages"]
    assert "gswgan_fmnist_loose" in stages["train_gswgan"]["foreach"] and "gswgan_fmnist_loose" in stages["warmstart"]["foreach"]


def test_stages_follow_from_the_experiments_through_the_method_registry():
    raw = shipped()
    raw["pipeline"] = {"experiments": ["dps_fmnist", "ewgan_half_circle_gauss", "gswgan_fmnist"], "sweeps": []}
    stages = dvc_stages(parse_params(raw))["stages"]
    assert stages["privatize"]["foreach"] == {"ewgan_half_circle_gauss": "manifold2d_half_circle"}
    assert stages["warmstart"]["foreach"] == {"gswgan_fmnist": "fashion_mnist"}
    assert set(stages["train"]["foreach"]) == {"dps_fmnist", "ewgan_half_circle_gauss"}
    assert stages["train"]["foreach"]["ewgan_half_circle_gauss"]["data"] == "privatized/ewgan_half_circle_gauss"
    assert stages["train_gswgan"]["foreach"] == {"gswgan_fmnist": {"dataset": "fashion_mnist",
                                                                   "data": "processed/fashion_mnist",
                                                                   "warmstart": "gswgan_fmnist"}}
    assert "private/warmstart/${item.warmstart}/critics.pt" in stages["train_gswgan"]["do"]["deps"]
    assert not any(name.startswith("train_sweep") for name in stages)
    raw["pipeline"] = {"experiments": ["dps_fmnist"], "sweeps": []}
    stages = dvc_stages(parse_params(raw))["stages"]
    assert "privatize" not in stages and "warmstart" not in stages and "train_gswgan" not in stages


def test_a_sweep_is_a_matrix_over_its_lists_in_params_yaml():
    raw = shipped()
    raw["sweeps"]["gs_sigma"] = {"base": "gswgan_fmnist", "grid": {"sigma": [0.8, 1.2]}}
    raw["pipeline"]["sweeps"] = ["gs_sigma"]
    stages = dvc_stages(parse_params(raw))["stages"]
    train = stages["train_gs_sigma"]
    assert train["matrix"] == {"sigma": "${sweeps.gs_sigma.grid.sigma}"}
    assert train["cmd"] == ("dpsynth --record-settings results/settings/train/gs_sigma-sigma${item.sigma}.json "
                            "train gs_sigma-sigma${item.sigma} --params params.yaml --no-progress")
    # a sigma sweep leaves the critics alone: every cell trains from its base's warm start; its cells train
    # alone, so they do not wait for the sweep's train_sweep stage (which DVC still runs: it is a stage)
    assert train["deps"][:3] == ["results/settings/train/gs_sigma-sigma${item.sigma}.json",
                                 "data/processed/fashion_mnist.npz", "private/warmstart/gswgan_fmnist/critics.pt"]
    assert "private/sweeps/gs_sigma" not in train["deps"] and "train_sweep_gs_sigma" in stages
    assert "gswgan_fmnist" in stages["warmstart"]["foreach"]
    # trained together, the cells come after the job that trains them
    raw["sweeps"]["pm_fmnist_quick"]["train_together"] = True
    raw["pipeline"]["sweeps"] = ["pm_fmnist_quick"]
    together = dvc_stages(parse_params(raw))["stages"]["train_pm_fmnist_quick"]
    assert together["deps"][1:3] == ["data/processed/fashion_mnist.npz", "private/sweeps/pm_fmnist_quick"]


def test_a_sweep_of_explicit_cells_is_a_foreach_over_them():
    raw = shipped()
    raw["pipeline"]["sweeps"] = ["pm_mnist"]  # the NeurIPS Table 4 cells
    stages = dvc_stages(parse_params(raw))["stages"]
    assert stages["train_pm_mnist"]["foreach"] == "${sweeps.pm_mnist.cells}"
    assert stages["evaluate_pm_mnist"]["cmd"] == ("dpsynth --record-settings results/settings/evaluate/pm_mnist-p${item.p}"
                                                  "-m${item.m}.json evaluate pm_mnist-p${item.p}-m${item.m} --params params.yaml")


def test_a_sweep_whose_cells_need_different_warm_starts_is_refused_by_name():
    raw = shipped()
    raw["sweeps"]["s"] = {"base": "gswgan_fmnist", "grid": {"batch_size": [16, 32]}}
    raw["pipeline"]["sweeps"] = ["s"]
    with pytest.raises(ConfigError, match="pipeline.sweeps: sweep 's' varies the warm-started critics' settings"):
        render(parse_params(raw))


def test_code_dependencies_are_what_each_stage_imports():
    stages = dvc_stages(parse_params(shipped()))["stages"]
    train = [d for d in stages["train"]["do"]["deps"] if d.startswith("src/")]
    assert "src/dpsynth/cli/train.py" in train and "src/dpsynth/methods" in train  # trainers load by name
    # (of the workflow package, only what writes the job's settings file: `dpsynth --record-settings`)
    assert not any(d.startswith(("src/dpsynth/evaluate", "src/dpsynth/report", "src/dpsynth/workflow/dvc")) for d in train)
    assert "src/dpsynth/workflow/settings.py" in train
    report = [d for d in stages["report"]["deps"] if d.startswith("src/")]
    assert "src/dpsynth/report" in report and "src/dpsynth/cli/train.py" not in report
    for name, stage in stages.items():  # every listed path exists
        for dep in (stage.get("do", stage))["deps"]:
            if dep.startswith("src/"):
                assert (REPO / dep).exists(), (name, dep)


def test_dvc_push_never_sends_the_prepared_training_records(tmp_path: Path):
    """A real `dvc push` to a local remote after the prepare stage ran: the dataset's metadata (.json)
    arrives, the training records (data/processed/*.npz, `push: false`) do not -- a DVC remote is
    shared storage, and the records are the private data itself."""
    import hashlib
    import json

    from tests.conftest import clear_pipeline, venv_bin
    from tests.pipelines import copy_workflow, run

    def patch(p: dict) -> None:
        p.update(scale="smoke", datasets=["digits28"])
        clear_pipeline(p)
        p["evaluation"]["real_datasets"] = []

    d = copy_workflow(tmp_path / "w", patch)
    dvc = venv_bin("dvc")
    run([dvc, "repro", "prepare_data@digits28"], d, timeout=600)
    remote = tmp_path / "remote"
    run([dvc, "remote", "add", "-d", "store", str(remote)], d)
    run([dvc, "push"], d, timeout=300)
    pushed = {f.parent.name + f.name for f in remote.rglob("*") if f.is_file()}
    md5 = {rel: hashlib.md5((d / rel).read_bytes()).hexdigest()
           for rel in ("data/processed/digits28.npz", "data/processed/digits28.json")}
    assert md5["data/processed/digits28.json"] in pushed, (sorted(pushed), md5)  # the push itself worked
    assert md5["data/processed/digits28.npz"] not in pushed, "dvc push sent the training records to the remote"
    lock = json.dumps(yaml.safe_load((d / "dvc.lock").read_text()))
    assert md5["data/processed/digits28.npz"] in lock  # still cached and recorded: checkout restores it



def test_plan_refuses_outside_a_dvc_project_in_one_line_and_writes_nothing(tmp_path: Path, capsys, monkeypatch):
    """`dpsynth workflow plan` where it cannot plan: no dvc.yaml, a stale dvc.yaml, no DVC repository. One line
    each, naming what to do, and no settings file written (the plan itself: tests/test_dvc.py)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text((REPO / "params.yaml").read_text())
    assert main(["workflow", "plan"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("dpsynth: error: no dvc.yaml in this folder: run `dpsynth workflow plan` in the project's root "
                   "(or write it with `dpsynth workflow dvc`)"), err

    raw = shipped()
    raw["pipeline"]["experiments"].append("gswgan_fmnist_loose")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    (tmp_path / "dvc.yaml").write_text((REPO / "dvc.yaml").read_text())
    assert main(["workflow", "plan"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dpsynth: error: dvc.yaml is stale for params.yaml") and "\n" not in err, err

    (tmp_path / "params.yaml").write_text((REPO / "params.yaml").read_text())
    assert main(["workflow", "plan"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dpsynth: error: dvc: you are not inside of a DVC repository") and "\n" not in err, err
    assert not (tmp_path / "results").exists()
