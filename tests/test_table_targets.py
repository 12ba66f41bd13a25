"""One build target per paper table (issue 62): `snakemake <target>` runs exactly the table's runs at any scale,
`dvc repro` reaches the same stages once `pipeline.tables` lists it, and both read the table -> runs mapping from
params.yaml through ``dpsynth.config.targets``. Checked on real dry runs of copies of the workflow."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from dpsynth.config import load_params, parse_params, table_targets
from dpsynth.errors import ConfigError
from dpsynth.workflow.budget import target_jobs
from tests.conftest import REPO, venv_bin
from tests.pipelines import copy_workflow, env, run, smoke_patch

pytestmark = [pytest.mark.pipeline, pytest.mark.timeout(900)]

#: the targets the issue names, with the runs each paper table has (NeurIPS Tables 4-5: 19 + 12 cells; ICLR Table 1:
#: its 13 runs and the central baseline's two rows, ours)
NAMED = {"iclr_table1": 15, "neurips_table4": 19, "neurips_table5": 12, "iclr_table4": 10, "iclr_table5": 7,
         "gswgan_table1": 6}


@pytest.fixture(scope="module")
def params():
    return load_params(REPO / "params.yaml", scale="paper")


@pytest.fixture(scope="module")
def workflow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh clone's workflow (no data prepared, nothing run)."""
    return copy_workflow(tmp_path_factory.mktemp("targets"))


def _raw() -> dict:
    return yaml.safe_load((REPO / "params.yaml").read_text())


# --------------------------------------------------------------------------- the mapping (config)


def test_each_named_target_holds_its_tables_runs(params) -> None:
    """The runs are the tables' own: rows (DP-CGAN's, DP-MERF's, GS-WGAN's included), experiments, the grids'
    every cell; the quick pipeline's share of a grid is left out, its cells being the paper sweep's cells."""
    targets = table_targets(params)
    assert {name: len(targets[name].runs(params)) for name in NAMED} == NAMED
    t4 = targets["neurips_table4"]
    assert t4.tables == ("pm_grid_mnist",) and t4.sweeps == ("pm_mnist",)
    assert t4.runs(params) == params.cells_of("pm_mnist") and t4.left_out == (("pm_mnist_quick", "pm_mnist"),)
    assert t4.train_sweeps(params) == ["pm_mnist"]  # train_together: one job trains the 19 cells
    t1 = targets["iclr_table1"]
    assert t1.tables == ("table1_mnist", "table1_fmnist") and t1.real == ("mnist", "fashion_mnist")
    rows = {r.experiment for t in ("table1_mnist", "table1_fmnist") for r in params.tables[t].rows if r.experiment}
    assert set(t1.runs(params)) == rows and {"cgan_mnist", "cgan_fmnist"} <= rows
    gs = targets["gswgan_table1"]
    assert set(gs.runs(params)) == {"cgan_mnist", "merf_mnist", "gswgan_mnist", "cgan_fmnist", "merf_fmnist",
                                    "gswgan_fmnist"}
    assert targets["iclr_table5"].runs(params) == params.cells_of("batch_sigma_mnist")
    assert "ewgan_mnist_gauss_fig11_steps2x" in targets["reshetova_fig11_mnist"].runs(params)  # its step_check
    assert targets["reshetova_fig5"].w2_noise == ("mnist",)
    assert "privacy" not in targets and all(t not in targets for t in ("table1_mnist", "pm_grid_mnist"))


def test_a_target_named_like_another_targets_table_is_refused() -> None:
    raw = _raw()
    raw["tables"]["table1_fmnist"]["target"] = "table1_mnist"  # table1_mnist is iclr_table1's
    with pytest.raises(ConfigError, match=r"tables\.table1_mnist\.target: 'table1_mnist' is the name of another "
                                          r"target"):
        parse_params(raw)


@pytest.mark.parametrize(("tables", "message"), [
    (["neurips_tabel4"], r"pipeline\.tables: unknown target 'neurips_tabel4'; did you mean 'neurips_table4'\?"),
    (["iclr_table2_3"], r"pipeline\.tables: target 'iclr_table2_3' trains '\w+' on 'celeba', which is not in "
                        r"datasets"),
])
def test_pipeline_tables_refuses_what_the_pipeline_cannot_build(tables: list[str], message: str) -> None:
    raw = _raw()
    raw["pipeline"]["tables"] = tables
    with pytest.raises(ConfigError, match=rf"^params\.yaml: {message}"):
        parse_params(raw)


def test_pipeline_tables_adds_the_targets_runs_to_both_dags() -> None:
    """`pipeline.tables: [neurips_table4]`: its sweep joins the pipeline's (dvc.yaml's groups, Snakemake's `all`),
    and a sweep cell the pipeline already runs is not declared twice."""
    from dpsynth.workflow.dvc import dvc_stages

    raw = _raw()
    raw["pipeline"]["tables"] = ["neurips_table4", "iclr_table1"]
    p = parse_params(raw)
    assert p.pipeline_sweeps() == ["pm_mnist_quick", "pm_fmnist_quick", "pm_mnist"]
    assert set(table_targets(p)["neurips_table4"].runs(p)) <= set(p.pipeline_targets())
    assert {"cgan_mnist", "dps_grad_fmnist", "gswgan_fmnist_loose"} <= set(p.pipeline_experiments())
    stages = dvc_stages(p)["stages"]
    assert {"train_sweep_pm_mnist", "train_pm_mnist", "evaluate_pm_mnist"} <= set(stages)
    assert {"cgan_mnist", "dps_grad_fmnist"} <= set(stages["train"]["foreach"])
    assert "gswgan_fmnist_loose" in stages["train_gswgan"]["foreach"]


# --------------------------------------------------------------------------- Snakemake


def _planned(d: Path, target: str, *config: str) -> set[tuple[str, str]]:
    from tests.test_workflow_sync import dry_run_plan

    return {(rule, wildcard) for rule, wildcard, _ in dry_run_plan(d, target, "--forceall", "--config", *config)}


@pytest.mark.parametrize("target", sorted(NAMED))
def test_the_dry_run_at_paper_scale_is_exactly_the_tables_jobs(workflow: Path, params, target: str) -> None:
    """`snakemake -n <target> --config scale=paper` in a fresh clone: the train, sample and evaluate jobs are the
    table's runs, nothing else; the rest is what those runs need (their data, warm starts, a sweep's train_sweep
    job, the real-data rows) and the target's own job -- the list `dpsynth workflow budget` prices."""
    planned = _planned(workflow, target, "scale=paper")
    runs = table_targets(params)[target].runs(params)
    for stage in ("train", "sample", "evaluate"):
        assert sorted(w for r, w in planned if r == stage) == sorted(runs), stage
    expected = {(target if stage == "report" else stage, "" if stage == "report" else name)
                for stage, name in target_jobs(params, target)}
    assert planned == expected


def test_a_target_this_scale_cannot_honour_is_one_line(workflow: Path) -> None:
    """ICLR Table 5 at the quick scale: its batch sizes 100 and 200 would both train at the quick cap of 64."""
    res = subprocess.run([venv_bin("snakemake"), "-n", "iclr_table5", "--config", "scale=quick"], cwd=workflow,
                         capture_output=True, text=True, timeout=300, env=env())
    assert res.returncode != 0
    assert ("iclr_table5: sweeps.batch_sigma_mnist: at scale 'quick', batch_size 100 and 200 would both train "
            "with batch_size 64") in res.stdout + res.stderr


def test_a_target_named_like_a_rule_is_refused(tmp_path: Path) -> None:
    """A target called `report` would replace the report's rule: Snakemake stops, naming the tables to rename."""

    def named_report(p: dict) -> None:
        p["tables"]["pm_grid_fmnist"]["target"] = "report"

    d = copy_workflow(tmp_path / "wf", named_report)
    res = subprocess.run([venv_bin("snakemake"), "-n"], cwd=d, capture_output=True, text=True, timeout=300, env=env())
    assert res.returncode != 0
    assert "the build target 'report' has the name of a workflow rule; set another `target:` on its tables " \
           "(pm_grid_fmnist)" in res.stdout + res.stderr


def test_a_target_runs_at_the_smoke_scale_too(workflow: Path, params) -> None:
    """The same target at another scale: the same runs (only the scale's settings change)."""
    planned = _planned(workflow, "neurips_table5", "scale=smoke")
    assert sorted(w for r, w in planned if r == "train") == sorted(params.cells_of("pm_fmnist"))


# --------------------------------------------------------------------------- DVC


def _targeted(p: dict) -> None:
    """The smoke pipeline, with NeurIPS Table 5 (two of its cells) in `pipeline.tables`."""
    smoke_patch(p)
    p["sweeps"]["pm_fmnist"]["cells"] = p["sweeps"]["pm_fmnist"]["cells"][:2]
    p["pipeline"]["tables"] = ["neurips_table5"]


def test_dvc_declares_a_listed_targets_stages_as_snakemake_runs_them(tmp_path: Path) -> None:
    """With `pipeline.tables`, dvc.yaml's stages are still Snakemake's jobs, output for output."""
    from tests.test_workflow_sync import dvc_stages, snakemake_outputs

    d = copy_workflow(tmp_path / "wf", _targeted)
    sm, dv = snakemake_outputs(d), dvc_stages(d)
    sm.pop("all", None)
    assert set(sm) == set(dv) and all(outs == dv[rule][0] for rule, outs in sm.items())
    assert {"models/pm_fmnist-p1.0-m1/generator.pt", "models/pm_fmnist-p1.0-m3/generator.pt"} <= sm["train"]


def test_the_dvc_plan_of_a_target_is_its_snakemake_jobs(tmp_path: Path) -> None:
    """`dpsynth workflow plan neurips_table5` in a fresh clone: the stages `dvc repro <its stages>` runs are the
    jobs `snakemake -n neurips_table5` plans (less the target's own report job, and DVC's settings stage)."""
    from tests.test_workflow_sync import dvc_stage_list

    d = copy_workflow(tmp_path / "wf", _targeted)
    out = run([venv_bin("dpsynth"), "workflow", "plan", "neurips_table5", "--json"], d)
    plan = json.loads(out.strip().splitlines()[-1])
    stage_of = {}
    for name, deps, _outs, _cmd in dvc_stage_list(d):
        own = [x for x in deps if x.startswith("results/settings/")]
        if own:
            rule, job = own[0].removeprefix("results/settings/").removesuffix(".json").split("/")
            stage_of[(rule, "" if rule == "report" else job)] = name
    planned = _planned(d, "neurips_table5", "scale=smoke")
    assert {stage_of[j] for j in planned if j[0] != "neurips_table5"} == set(plan["stages"]) - {"settings"}
    assert plan["repro"] == ["evaluate_pm_fmnist"]  # the whole group: every cell of it is the table's
    human = run([venv_bin("dpsynth"), "workflow", "plan", "neurips_table5"], d)
    assert "neurips_table5 with DVC: dvc repro evaluate_pm_fmnist" in human, human


def test_the_dvc_plan_of_an_unlisted_target_says_how_to_list_it(tmp_path: Path) -> None:
    d = copy_workflow(tmp_path / "wf", smoke_patch)
    res = subprocess.run([venv_bin("dpsynth"), "workflow", "plan", "neurips_table5"], cwd=d, capture_output=True,
                         text=True, timeout=300, env=env())
    assert res.returncode == 2
    assert res.stderr.strip().splitlines()[-1].startswith(
        "dpsynth: error: dvc.yaml declares no stage for 12 of the 12 results of target neurips_table5")
    assert "add neurips_table5 to pipeline.tables in params.yaml, run `dpsynth workflow dvc`" in res.stderr
    assert not (d / "results" / "settings").exists()  # refused before any settings file was written


def test_targets_lists_every_target_and_one_targets_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from dpsynth.cli import main

    assert main(["workflow", "targets", "--params", str(REPO / "params.yaml")]) == 0
    listed = capsys.readouterr().out
    assert all(f"\n{name} " in listed for name in NAMED), listed
    assert main(["workflow", "targets", "neurips_table4", "--params", str(REPO / "params.yaml"), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert len(record["runs"]) == 19 and record["left_out"] == [["pm_mnist_quick", "pm_mnist"]]
    assert main(["workflow", "targets", "neurips_tabel4", "--params", str(REPO / "params.yaml")]) == 2
    assert "no build target 'neurips_tabel4'; did you mean 'neurips_table4'?" in capsys.readouterr().err


def test_a_target_trains_every_training_run_of_its_rows() -> None:
    """Issue 64: a row's repeated training runs (a sweep over seed alone based on its experiment) are the row's,
    so the target that builds the table trains them too: Fig. 11's step check runs three times."""
    from dpsynth.config import load_params
    from dpsynth.config.targets import table_targets

    params = load_params(REPO / "params.yaml")
    runs = table_targets(params)["reshetova_fig11_mnist"].runs(params)
    check = params.tables["reshetova_fig11_mnist"].step_check
    assert check is not None and len(params.replicates_of(check)) == 3
    assert set(params.replicates_of(check)) <= set(runs) and len(runs) == 18 + 3
