"""DVC at the smoke scale in temporary git repositories (offline, no remote).

- `dvc repro` runs the pipeline; `dvc status` is then clean.
- `dvc exp run -S <sweep key>` trains a variant; `dvc exp show` lists it with its params/metrics.
- Data, generators and synthetic sets are cached: going back to the old params.yaml restores the
  old results (`dvc checkout`), and a params.yaml that was run before is reproduced from the run
  cache without retraining.
- After a Snakemake run, `dvc commit --force` records its outputs, so `dvc status` is clean, and
  Snakemake still has nothing to do; after a `dvc repro`, neither has Snakemake (one workspace).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml

from tests.conftest import REPO, venv_bin
from tests.pipelines import copy_workspace, env

# timeout: a test that asks for `smoke_pipelines` may wait for both runs (minutes; more on a loaded CPU)
# xdist: one worker runs the module, so the experiment below (minutes) is run once, not once per worker
pytestmark = [pytest.mark.pipeline, pytest.mark.slow, pytest.mark.timeout(2400), pytest.mark.xdist_group("dvc")]

EXP = "dps_fmnist"
GS = "gswgan_fmnist"  # the shared smoke pipeline also trains GS-WGAN: edits of what it reads re-run it
GEN = Path(f"models/{EXP}/generator.pt")
SYNTH = Path(f"data/synthetic/{EXP}")
SWEEP_KEY = f"experiments.{EXP}.hparams.m"  # the L1 weight m of the p x m sweeps (NeurIPS Table 5)
SETTINGS = "results/settings"  # each job's settings file (dpsynth.workflow.settings)


def sh(cwd: Path, *cmd: str, timeout: float = 1200) -> str:
    """Run a command, demand success, return stdout + stderr (DVC reports stages on both)."""
    res = subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env())
    out = res.stdout + res.stderr
    assert res.returncode == 0, f"{' '.join(cmd)} failed:\n{out[-5000:]}"
    return out


def dvc(cwd: Path, *args: str, timeout: float = 1200) -> str:
    return sh(cwd, venv_bin("dvc"), *args, timeout=timeout)


def assert_clean(cwd: Path) -> None:
    status = dvc(cwd, "status")
    assert "Data and pipelines are up to date" in status, status


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def weights(d: Path) -> dict[str, torch.Tensor]:
    return torch.load(d / GEN, weights_only=True)["state_dict"]


def edit_params(d: Path, change: Callable[[dict], None]) -> None:
    p = yaml.safe_load((d / "params.yaml").read_text())
    change(p)
    (d / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))


@dataclass
class Repos:
    dvc: Path  # pipeline run by `dvc repro`, committed to git
    snakemake: Path  # pipeline run by `snakemake`, nothing recorded in DVC yet


@pytest.fixture(scope="module")
def repos(smoke_pipelines, tmp_path_factory) -> Repos:
    """This module's copies of the session's smoke pipelines (tests/pipelines.py): its tests change them."""
    base = tmp_path_factory.mktemp("dvc")
    return Repos(copy_workspace(smoke_pipelines.dvc, base / "dvc"),
                 copy_workspace(smoke_pipelines.snakemake, base / "snakemake"))


#: One `dvc exp run` sets both keys two tests check: a sweep key of a target (its stages retrain) and a
#: targeted sweep's grid (one more cell). Each retrain is minutes of a 2-core machine; the two used to be
#: two experiments, each with its own report stage and DVC's experiment set-up.
EXPERIMENT = (f"{SWEEP_KEY}=1.0", "sweeps.pm_fmnist_quick.grid.p=[1.0,0.5]")
NEW_CELL = "pm_fmnist_quick-p0.5-m1"
#: The README's comparison view: what differs between the experiments (params and headline metrics), without the
#: hash columns of the changed inputs and outputs. Plain `dvc exp show` lists every key of params.yaml (DVC always
#: reads all of the default params file) and every stage's inputs: ~870 columns at the smoke scale.
EXP_COMPARE = ("--only-changed", "--drop", "^(data|models|results|src)(/[^:]*)?$")


@dataclass
class Experiment:
    out: str  # what `dvc exp run` printed
    base_gen: str  # the baseline generator's digest, and its weights
    base_w: dict[str, torch.Tensor]
    base_synth: dict[str, str]  # the baseline synthetic sets' digests
    exp_gen: str  # the experiment's generator's digest, and its weights
    exp_w: dict[str, torch.Tensor]
    shown: list  # `dvc exp show --json`
    compared: list[str]  # the columns of the README's comparison view (EXP_COMPARE)
    all_columns: int  # the columns of plain `dvc exp show`
    cell_metrics: dict  # the new sweep cell's metrics.json and the report's grid table, as the run left them
    grid_table: str


@pytest.fixture(scope="module")
def experiment(repos) -> Experiment:
    """`dvc exp run -S` (EXPERIMENT) in the DVC copy, once, from its clean baseline; left applied."""
    d = repos.dvc
    assert_clean(d)
    assert "Data and pipelines are up to date" in dvc(d, "repro")  # nothing re-runs
    base_gen, base_w = digest(d / GEN), weights(d)
    base_synth = {f.name: digest(f) for f in (d / SYNTH).iterdir()}
    out = dvc(d, "exp", "run", *(a for kv in EXPERIMENT for a in ("-S", kv)))
    assert "Ran experiment(s)" in out, out[-3000:]
    assert_clean(d)
    shown = json.loads(dvc(d, "exp", "show", "--json"))
    compared = dvc(d, "exp", "show", *EXP_COMPARE, "--csv").strip().splitlines()[0].split(",")
    all_columns = len(dvc(d, "exp", "show", "--csv").strip().splitlines()[0].split(","))
    return Experiment(out, base_gen, base_w, base_synth, digest(d / GEN), weights(d), shown, compared, all_columns,
                      json.loads((d / f"results/runs/{NEW_CELL}/metrics.json").read_text()),
                      (d / "results/tables/pm_grid_fmnist.md").read_text())


def _experiments(shown: list) -> list[dict]:
    return [rev["data"] for row in shown for e in (row.get("experiments") or []) for rev in e["revs"]]


def _back_to_baseline(d: Path) -> None:
    """The committed params.yaml and dvc.lock, and the outputs they record (from the cache); the outputs
    of stages the baseline does not have (the experiment's new sweep cell) removed: untracked by git and
    no longer ignored once its .gitignore files are back (ignored files, e.g. checkpoints, stay)."""
    sh(d, "git", "checkout", "--", ".")
    sh(d, "git", "clean", "-fdq")
    dvc(d, "checkout", "--force")


def test_repro_status_experiment_and_cache(repos, experiment):
    d, out = repos.dvc, experiment.out
    # An experiment on a sweep key: only the stages that depend on it run.
    assert f"Running stage 'train@{EXP}'" in out, out[-3000:]
    assert "Stage 'prepare_data@fashion_mnist' didn't change" in out
    assert any(not torch.equal(experiment.base_w[k], experiment.exp_w[k]) for k in experiment.base_w), \
        "the experiment (m=1.0) released the baseline's weights: training resumed a stale checkpoint"
    summary = json.loads((d / f"models/{EXP}/train_summary.json").read_text())
    assert summary["steps_per_s_this_run"] > 0, f"the experiment trained no step: {summary}"

    exps = _experiments(experiment.shown)
    assert len(exps) == 1, experiment.shown
    data = exps[0]
    assert data["params"]["params.yaml"]["data"]["experiments"][EXP]["hparams"]["m"] == 1.0
    # `dvc metrics show`: the headline numbers, a few columns, not the ~130 of metrics.json
    headline = data["metrics"][f"results/runs/{EXP}/headline.json"]["data"]
    assert set(headline) == {"accuracy", "fid", "kid", "fid_inf", "precision", "recall", "epsilon", "lr", "sigma",
                             "steps"}
    assert headline["epsilon"] <= 10
    assert f"results/runs/{EXP}/metrics.json" not in data["metrics"]

    # The old params.yaml: its results come back from the cache.
    _back_to_baseline(d)
    assert digest(d / GEN) == experiment.base_gen
    assert {f.name: digest(f) for f in (d / SYNTH).iterdir()} == experiment.base_synth
    assert_clean(d)

    # A params.yaml that ran before (m=1.0, edited by hand): the run cache restores its results.
    edit_params(d, lambda p: p["experiments"][EXP]["hparams"].__setitem__("m", 1.0))
    out = dvc(d, "repro")
    assert f"Stage 'train@{EXP}' is cached - skipping run" in out, out[-3000:]
    assert f"Running stage 'train@{EXP}'" not in out and f"Running stage 'sample@{EXP}'" not in out
    assert digest(d / GEN) == experiment.exp_gen
    assert_clean(d)
    _back_to_baseline(d)


CELL_STAGES = {f"{r}_pm_fmnist_quick@1.0-1" for r in ("train", "sample", "evaluate")}
RUN = {f"{r}@{EXP}" for r in ("train", "sample", "evaluate")} | CELL_STAGES | {"train_sweep_pm_fmnist_quick", "report"}

#: (what a user edits, the stages that re-run: those whose own settings changed and what follows them)
EDITS: list[tuple[str, Callable[[dict], None], set[str]]] = [
    ("experiments.dps_fmnist.hparams.lr", lambda p: p["experiments"][EXP]["hparams"].__setitem__("lr", 2e-5), RUN),
    ("experiments.dps_fmnist.description", lambda p: p["experiments"][EXP].__setitem__("description", "x"),
     {"report"}),
    # p is swept by pm_fmnist_quick (not trained together): its cell sets its own p and re-runs nothing; the
    # sweep's marker job does (its base changed). Snakemake used to re-run the cell after that job (issue 47).
    ("experiments.dps_fmnist.hparams.p (swept)", lambda p: p["experiments"][EXP]["hparams"].__setitem__("p", 0.5),
     {f"{r}@{EXP}" for r in ("train", "sample", "evaluate")} | {"train_sweep_pm_fmnist_quick", "report"}),
    ("scales.paper.n_synthetic_sets (another scale)", lambda p: p["scales"]["paper"].__setitem__("n_synthetic_sets", 2),
     {"report"}),
    ("scales.smoke.n_synthetic", lambda p: p["scales"]["smoke"].__setitem__("n_synthetic", 400),
     {f"sample@{EXP}", f"evaluate@{EXP}", "sample_pm_fmnist_quick@1.0-1", "evaluate_pm_fmnist_quick@1.0-1",
      f"sample_gswgan@{GS}", f"evaluate_gswgan@{GS}", "report"}),
    ("evaluation.classifiers", lambda p: p["evaluation"].__setitem__("classifiers", ["logreg", "mlp"]),
     {f"evaluate@{EXP}", "evaluate_pm_fmnist_quick@1.0-1", "evaluate_real@fashion_mnist", f"evaluate_gswgan@{GS}",
      "report"}),
]


def _stage_of_job(d: Path) -> dict[tuple[str, str], str]:
    """The DVC stage of each job (rule, wildcard), through its settings file."""
    from tests.test_workflow_sync import dvc_stage_list

    job_of = {}
    for name, deps, _outs, _cmd in dvc_stage_list(d):
        if name == "settings":
            continue
        (own,) = [x for x in deps if x.startswith("results/settings/")]
        rule, job = own.removeprefix("results/settings/").removesuffix(".json").split("/")
        job_of[(rule, "" if rule == "report" else job)] = name
    return job_of


def dvc_plan(d: Path) -> dict:
    """`dpsynth workflow plan --json`: the stages `dvc repro` will run (DVC's status after the settings files
    are brought up to date, and every stage after those in DVC's graph), and why."""
    return json.loads(sh(d, venv_bin("dpsynth"), "workflow", "plan", "--json").strip().splitlines()[-1])


def dvc_reruns(d: Path) -> tuple[set[str], set[str]]:
    """(the stages DVC finds changed, those and everything after them), without the cheap `settings` stage."""
    plan = dvc_plan(d)
    return set(plan["changed"]) - {"settings"}, set(plan["stages"]) - {"settings"}


def test_edits_re_run_the_same_stages_in_both_dags(repos):
    """Each edit of EDITS after a real run by each runner: the jobs `snakemake -n` plans are the
    stages `dvc repro` re-runs (those DVC finds changed and what follows them), by name, and both
    are what the edit means -- a description or another scale's preset re-runs nothing but the
    report. Reverted, both are clean again. (The Snakemake copy is checked before `dvc commit`
    touches its files.)"""
    from tests.test_workflow_sync import dry_run_plan

    sm, dv = repos.snakemake, repos.dvc
    job_of = _stage_of_job(dv)
    assert "Nothing to be done" in sh(sm, venv_bin("snakemake"), "-n")
    original = (sm / "params.yaml").read_text()
    _back_to_baseline(dv)
    assert_clean(dv)
    for key, edit, want in EDITS:
        try:
            edit_params(sm, edit)
            edit_params(dv, edit)
            planned = {job_of[(rule, wildcard)] for rule, wildcard, _why in dry_run_plan(sm)}
            changed, reruns = dvc_reruns(dv)
        finally:
            (sm / "params.yaml").write_text(original)
            _back_to_baseline(dv)
        assert planned == reruns == want, f"{key}: snakemake {sorted(planned)}, dvc {sorted(reruns)}"
        assert "report" in changed and changed <= want
    assert "Nothing to be done" in sh(sm, venv_bin("snakemake"), "-n")
    assert_clean(dv)


def test_the_dvc_plan_names_a_new_cells_stages_as_snakemake_does(repos):
    """A new sweep cell (one more `p` in a grid DVC's matrix reads): `dpsynth workflow plan` names the cell's
    train, sample and evaluate stages and the report -- the jobs `snakemake -n` plans -- where `dvc status`
    named only `settings` and `dvc repro --dry` stopped at the cell's missing settings file, then at its
    model no stage had made yet (issue 47; treeverse/dvc#9021)."""
    from tests.test_workflow_sync import dry_run_plan

    sm, dv = repos.snakemake, repos.dvc
    original = (sm / "params.yaml").read_text()
    _back_to_baseline(dv)

    def more_cells(p: dict) -> None:
        p["sweeps"]["pm_fmnist_quick"]["grid"]["p"] = [1.0, 0.5]

    try:
        edit_params(sm, more_cells)
        edit_params(dv, more_cells)
        job_of = _stage_of_job(dv)
        planned = {job_of[(rule, wildcard)] for rule, wildcard, _why in dry_run_plan(sm)}
        plan = dvc_plan(dv)
    finally:
        (sm / "params.yaml").write_text(original)
        _back_to_baseline(dv)
    cell = {f"{r}_pm_fmnist_quick@0.5-1" for r in ("train", "sample", "evaluate")}
    assert cell | {"report"} <= planned, sorted(planned)
    assert set(plan["stages"]) - {"settings"} == planned, (sorted(plan["stages"]), sorted(planned))
    assert all(plan["reasons"][s] == "new: not in dvc.lock" for s in cell), plan["reasons"]
    assert cell <= set(plan["changed"]) <= set(plan["stages"])
    assert plan["stages"].index("train_pm_fmnist_quick@0.5-1") < plan["stages"].index("sample_pm_fmnist_quick@0.5-1")
    assert not CELL_STAGES & set(plan["stages"])  # the old cell stays as it is
    assert_clean(dv)


def test_the_dvc_plan_of_a_fresh_clone_is_every_stage(tmp_path):
    """In a fresh clone nothing has run: the plan is every stage, in an order DVC can run them, and the
    same jobs as `snakemake -n` (where `dvc repro --dry` stops at the first input no stage has made yet)."""
    from tests.pipelines import copy_workflow, smoke_patch
    from tests.test_workflow_sync import dry_run_plan

    d = copy_workflow(tmp_path / "fresh", smoke_patch)
    plan = dvc_plan(d)
    job_of = _stage_of_job(d)
    assert set(plan["stages"]) == set(job_of.values()) | {"settings"}
    assert {job_of[(rule, wildcard)] for rule, wildcard, _why in dry_run_plan(d)} == set(job_of.values())
    order = plan["stages"]
    assert set(plan["changed"]) <= set(order) and f"train@{EXP}" in plan["changed"]  # nothing ran: its outputs are missing
    assert order[0] == "settings" and order.index(f"train@{EXP}") < order.index(f"sample@{EXP}") \
        < order.index(f"evaluate@{EXP}") < order.index("report")
    human = sh(d, venv_bin("dpsynth"), "workflow", "plan")
    assert f"dvc repro will run {len(order)} stage(s)" in human, human


def snakemake_plans_nothing(d: Path) -> None:
    out = sh(d, venv_bin("snakemake"), "-n")
    assert "Nothing to be done" in out, out[-3000:]


def test_dvc_commit_records_a_snakemake_run(repos, tmp_path):
    """`dvc commit --force` after `snakemake`: one command, then DVC sees a clean pipeline
    (dvc.lock written from the outputs Snakemake made) and has nothing to reproduce -- and Snakemake
    still has nothing to do, in the workspace and in a copy of it in another folder (one
    workspace for both tools, issue 47). The outputs keep their times because the cache hard-links them
    (.dvc/config) and DVC leaves Snakemake's `.snakemake_timestamp` files alone (.dvcignore); with a copy
    (DVC's default) `snakemake -n` planned every job after the data, and with the timestamps tracked the
    four jobs after the sampled folders and the report's."""
    d = repos.snakemake
    assert not (d / "dvc.lock").exists()
    assert "Data and pipelines are up to date" not in dvc(d, "status")
    snakemake_plans_nothing(d)
    dvc(d, "commit", "--force")
    assert_clean(d)
    snakemake_plans_nothing(d)
    moved = copy_workspace(d, tmp_path / "moved")  # `cp -a`: another folder, the same files and times
    snakemake_plans_nothing(moved)
    assert_clean(moved)
    assert "Data and pipelines are up to date" in dvc(d, "repro")

    # Then DVC re-runs a job Snakemake ran (an edit the report alone reads): Snakemake's records hold the
    # old parameters until `snakemake --touch` (docs/dvc-and-snakemake.md, "Moving between the two tools"), then both are clean.
    edit_params(moved, lambda p: p["experiments"][EXP].__setitem__("description", "edited"))
    assert "Running stage 'report'" in dvc(moved, "repro")
    assert_clean(moved)
    planned = sh(moved, venv_bin("snakemake"), "-n")
    assert "rule report:" in planned and "rule train:" not in planned, planned[-3000:]
    sh(moved, venv_bin("snakemake"), "--touch", "--cores", "1")
    snakemake_plans_nothing(moved)
    assert_clean(moved)


def test_snakemake_has_nothing_to_do_after_dvc_ran_the_pipeline(smoke_pipelines, tmp_path):
    """DVC, then Snakemake: in a workspace only `dvc repro` ran, `snakemake -n` plans nothing. Each DVC
    stage rewrites its settings file when it ends (`--record-settings`, the command the Snakemake rule
    runs): with the times the `settings` stage gave them, before every job's inputs, Snakemake saw each
    job's settings output older than its inputs and planned every job after the data."""
    d = copy_workspace(smoke_pipelines.dvc, tmp_path / "dvc")
    assert_clean(d)
    snakemake_plans_nothing(d)
    lock = yaml.safe_load((d / "dvc.lock").read_text())
    train = lock["stages"][f"train@{EXP}"]
    recorded = {o["path"]: o["md5"] for o in train["outs"]}
    assert recorded[str(GEN)] == hashlib.md5((d / GEN).read_bytes()).hexdigest()
    # (that Snakemake and DVC make the same generators: test_workflow_sync's end-to-end test)


def test_a_targeted_run_records_only_the_settings_of_the_jobs_it_ran(smoke_pipelines, tmp_path):
    """Each Snakemake job writes its own settings file, a declared output (`dpsynth --record-settings`),
    not a hook writing every job's: a run of one job at another scale (`--config scale=quick`) rewrites
    that job's file and leaves every other job's as it was, so `dvc status` names what really changed
    and `dvc commit` records no quick-scale settings beside smoke-scale models (issue 47: the
    `onsuccess` hook rewrote all of them at the run's scale)."""
    d = copy_workspace(smoke_pipelines.snakemake, tmp_path / "targeted")
    folder = d / SETTINGS

    def recorded() -> dict[str, tuple[bytes, int]]:
        return {f.relative_to(folder).as_posix(): (f.read_bytes(), f.stat().st_mtime_ns) for f in folder.rglob("*.json")}

    from dpsynth.config import load_params
    from dpsynth.workflow.settings import pipeline_jobs, settings_path

    before = recorded()  # one file per job of the run, each written by its job
    jobs = pipeline_jobs(load_params(d / "params.yaml"))
    assert {f"{SETTINGS}/{k}" for k in before} == {settings_path(*job) for job in jobs}
    out = sh(d, venv_bin("snakemake"), "data/processed/fashion_mnist.json", "--cores", "1",
             "--forcerun", "prepare_data", "--config", "scale=quick")
    assert "1 of 1 steps (100%) done" in out, out[-3000:]
    after = recorded()
    assert set(after) == set(before)
    ran = "prepare_data/fashion_mnist.json"
    assert after[ran][1] > before[ran][1], "the job that ran did not write its settings"
    assert after[ran][0] == before[ran][0]  # data preparation reads nothing the scale sets
    assert {k: v for k, v in after.items() if k != ran} == {k: v for k, v in before.items() if k != ran}


def test_exp_run_on_a_sweep_list_runs_exactly_the_new_cell(repos, experiment):
    """`dvc exp run -S` on a targeted sweep's `p` list: DVC's matrix gains one cell, only that
    cell's stages (and the report) run, and `dvc exp show` lists the new cell's metrics. (The same
    experiment retrains dps_fmnist: its other key.)"""
    out = experiment.out
    for r in ("train", "sample", "evaluate"):
        assert f"Running stage '{r}_pm_fmnist_quick@0.5-1'" in out, out[-3000:]
        assert f"Running stage '{r}_pm_fmnist_quick@1.0-1'" not in out
    assert f"Running stage 'train@{EXP}'" in out and "Running stage 'report'" in out  # (its other key)

    exps = _experiments(experiment.shown)
    mine = [x for x in exps if x["params"]["params.yaml"]["data"]["sweeps"]["pm_fmnist_quick"]["grid"]["p"] == [1.0, 0.5]]
    assert len(mine) == 1, exps
    metrics = mine[0]["metrics"][f"results/runs/{NEW_CELL}/headline.json"]["data"]
    assert set(metrics["accuracy"]) == {"logreg", "mlp", "cnn"}
    assert experiment.cell_metrics["train"]["hparams"]["p"] == 0.5
    assert NEW_CELL in experiment.grid_table

    # The README's comparison view: the two keys set, the runs' headline numbers, nothing else.
    columns = experiment.compared
    assert f"dvc exp show {EXP_COMPARE[0]} {EXP_COMPARE[1]} '{EXP_COMPARE[2]}'" in (REPO / "README.md").read_text()
    assert {SWEEP_KEY.removeprefix("params.yaml:"), "sweeps.pm_fmnist_quick.grid.p"} <= set(columns), columns
    assert f"results/runs/{NEW_CELL}/headline.json:epsilon" in columns, columns
    assert all(c in ("Experiment", "rev", "typ", "Created", "parent") or ":" in c or "/" not in c for c in columns), columns
    assert len(columns) <= 40 < experiment.all_columns, (len(columns), experiment.all_columns)


def test_metrics_and_plots_diff_read_the_committed_run_from_the_cache(smoke_pipelines, tmp_path):
    """`dvc metrics diff HEAD` and `dvc plots diff HEAD` in a clone, where results/ is not in git (the project's
    .gitignore): the committed run's headline numbers and figure data come from the DVC cache. Uncached, as they
    were, HEAD's could be read from nowhere (issue 47)."""
    d = copy_workspace(smoke_pipelines.dvc, tmp_path / "clone")
    with open(d / ".gitignore", "a") as fh:
        fh.write("/results/\n")
    sh(d, "git", "rm", "-r", "-q", "--cached", "results")
    sh(d, "git", "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-am", "results/ out of git")
    assert not sh(d, "git", "ls-files", "results").strip()
    diff = json.loads(dvc(d, "metrics", "diff", "HEAD", "--all", "--json").strip().splitlines()[-1])
    for run in (EXP, "pm_fmnist_quick-p1.0-m1", GS):
        path = f"results/runs/{run}/headline.json"
        head = json.loads((d / path).read_text())
        mine = diff.get(path)
        assert mine, (path, diff)
        # HEAD's values (read from the cache) beside the workspace's: the same run, so equal
        assert mine["epsilon"]["old"] == mine["epsilon"]["new"] == head["epsilon"], mine["epsilon"]
        assert mine["accuracy.cnn"]["old"] == head["accuracy"]["cnn"], mine
    plots = json.loads(dvc(d, "plots", "diff", "HEAD", "--json").strip().splitlines()[-1])
    assert not plots.get("errors"), plots.get("errors")
    for path in ("results/figures/accuracy_vs_epsilon.csv", f"models/{EXP}/train_log.csv"):
        (entry,) = plots["data"][path]
        assert entry["revisions"] == ["workspace", "HEAD"], (path, entry["revisions"])
        rows = {rev: [r for r in entry["content"]["data"]["values"] if r["rev"] == rev] for rev in entry["revisions"]}
        assert rows["HEAD"] == [{**r, "rev": "HEAD"} for r in rows["workspace"]], path


def test_dvc_plots_show_each_run_and_one_quantity_per_file(repos):
    """`dvc plots show`: every run's training log (epsilon vs step) and the report's one-quantity
    files, with the columns the definitions name."""
    d = repos.dvc
    _back_to_baseline(d)
    shown = json.loads(dvc(d, "plots", "show", "--json").strip().splitlines()[-1])
    assert not shown.get("errors"), shown.get("errors")
    data = shown["data"]
    for path in (f"models/{EXP}/train_log.csv", "models/pm_fmnist_quick-p1.0-m1/train_log.csv",
                 "results/figures/w2_noise_by_loss.csv", "results/figures/accuracy_vs_epsilon.csv",
                 "results/figures/fid_vs_epsilon.csv"):
        assert path in data, sorted(data)
    log = data[f"models/{EXP}/train_log.csv"][0]["content"]
    assert log["encoding"]["x"]["field"] == "step"
    values = log["data"]["values"]
    assert values and all(float(v["epsilon"]) <= 10.0 for v in values)  # never past the target
