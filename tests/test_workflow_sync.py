"""Snakemake and DVC declare the same stages, outputs and commands; both really run."""

from __future__ import annotations

import functools
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from dpsynth.workflow.code_deps import privatize_code_deps
from tests.conftest import REPO, require, venv_bin
from tests.pipelines import SMOKE_EXPERIMENTS, copy_workflow, env, run

# timeout: a test that asks for `smoke_pipelines` may wait for both runs (minutes; more on a loaded CPU)
pytestmark = [pytest.mark.pipeline, pytest.mark.timeout(2400)]

SETTINGS_OUT = "results/settings/"  # each job's own settings file: in DVC the `settings` stage's


def snakemake_outputs(cwd: Path) -> dict[str, set[str]]:
    """rule -> output files of the whole DAG (--forceall, so nothing is skipped as up to date), without the
    jobs' settings files (test_every_stage_reads_its_own_settings)."""
    out = run([venv_bin("snakemake"), "--summary", "--forceall"], cwd)
    rules: dict[str, set[str]] = {}
    for line in out.splitlines()[1:]:
        cols = line.split("\t")
        if len(cols) >= 3 and not cols[0].startswith(SETTINGS_OUT):
            rules.setdefault(cols[2], set()).add(cols[0])
    return rules


def snakemake_commands(cwd: Path) -> set[str]:
    out = run([venv_bin("snakemake"), "-n", "-p", "--forceall"], cwd)
    cmds = set()
    for line in out.splitlines():
        m = re.match(r"(?:Shell command: )?dpsynth (.*?)(?: > \S+ 2>&1)?$", line.strip())
        if m:
            # Snakemake's jobs read the run's validated snapshot of params.yaml (+ overrides)
            cmds.add(RUN_PARAMS_RE.sub("--params params.yaml", m.group(1).strip()))
    return cmds


RUN_PARAMS_RE = re.compile(r"--params \.snakemake/dpsynth/params-[0-9a-f]{12}\.yaml")


def snakemake_jobs(cwd: Path, settings: bool = False) -> list[tuple[str, frozenset[str], frozenset[str]]]:
    """(rule, inputs, outputs) of every job of the dry run; its settings file among the outputs only
    with ``settings``."""
    out = run([venv_bin("snakemake"), "-n", "--forceall"], cwd)
    jobs, cur = [], None
    for line in out.splitlines():
        m = re.match(r"^(?:local)?rule (\w+):$", line.strip())
        if m:
            cur = {"rule": m.group(1), "input": frozenset(), "output": frozenset()}
            jobs.append(cur)
            continue
        m = re.match(r"^(input|output): (.*)$", line.strip())
        if m and cur is not None:
            files = (x.strip() for x in m.group(2).split(","))
            cur[m.group(1)] = frozenset(f for f in files if settings or not f.startswith(SETTINGS_OUT))
    return [(j["rule"], j["input"], j["output"]) for j in jobs if j["rule"] != "all"]


def _rule_of(group: str, sweeps: list[str]) -> str:
    """DVC stage group -> Snakemake rule: `train_gswgan` and `train_<sweep target>` are `train`, `evaluate_local`
    (the runs on locally privatized records) is `evaluate`."""
    for suffix in ["gswgan", "local", *sweeps]:
        if group.endswith(f"_{suffix}"):
            return group[: -len(suffix) - 1]
    return group


def dvc_stage_list(cwd: Path) -> list[tuple[str, list[str], list[str], str]]:
    """(stage name, deps, outs, cmd) of every stage DVC builds from dvc.yaml + params.yaml."""
    import json

    code = ("import json; from dvc.repo import Repo; r = Repo('.');"
            "print(json.dumps([[s.name, [d.def_path for d in s.deps], [o.def_path for o in s.outs], s.cmd]"
            " for s in r.index.stages]))")
    return [tuple(x) for x in json.loads(run([venv_bin("python"), "-c", code], cwd))]


def dvc_stages(cwd: Path) -> dict[str, tuple[set[str], set[str]]]:
    """Snakemake rule -> (outputs, commands without the `dpsynth` prefix) of the DVC stages."""
    from dpsynth.config import load_params

    sweeps = load_params(cwd / "params.yaml").pipeline_sweeps()  # pipeline.sweeps and those of pipeline.tables
    stages: dict[str, tuple[set[str], set[str]]] = {}
    for name, _deps, outs, cmd in dvc_stage_list(cwd):
        if name == "settings":  # DVC's way to Snakemake's fingerprints (test_every_stage_reads_its_own_settings)
            continue
        o, c = stages.setdefault(_rule_of(name.split("@")[0], sweeps), (set(), set()))
        o.update(outs)
        c.add(cmd.removeprefix("dpsynth ").strip())
    return stages


def test_same_stages_outputs_and_commands():
    sm = snakemake_outputs(REPO)
    dv = dvc_stages(REPO)
    sm.pop("all", None)
    assert set(sm) == set(dv), f"stages differ: snakemake {sorted(sm)} vs dvc {sorted(dv)}"
    for rule, outs in sm.items():
        assert outs == dv[rule][0], f"{rule}: outputs differ"
    dvc_cmds = set().union(*(c for _, c in dv.values()))
    assert snakemake_commands(REPO) == dvc_cmds


def _two_datasets(p: dict) -> None:
    p["datasets"] = ["digits", "manifold2d_ellipse"]
    p["pipeline"], p["w2_noise"] = {"experiments": [], "sweeps": []}, {}
    p["evaluation"]["real_datasets"] = []
    p["tables"]["local_privacy_w2"]["dataset"] = None


def test_every_stage_has_the_same_inputs_in_both():
    """Job by job (matched by outputs), DVC's deps are Snakemake's inputs: the GS-WGAN training
    needs its warm start, local-DP training its privatized data, the report every run. DVC's
    code deps (src/...) have no Snakemake counterpart; DVC's report depends on the folders
    models (the training logs), results/runs, results/real and results/w2_noise, whose every
    file is a Snakemake input."""
    jobs = {outs: (rule, ins) for rule, ins, outs in snakemake_jobs(REPO)}
    stages = [s for s in dvc_stage_list(REPO) if s[0] != "settings"]
    assert len(stages) == len(jobs)
    for name, deps, outs, _cmd in stages:
        rule, ins = jobs[frozenset(outs)]
        deps = {d for d in deps if not d.startswith(("src/", "results/settings/"))}
        if name == "report":
            folders = {"models", "results/runs", "results/real", "results/w2_noise"}
            assert deps == folders
            assert ins and all(any(i.startswith(f + "/") for f in folders) for i in ins)
            assert {i for i in ins if i.endswith("metrics.json")} == {
                o for other, _ in jobs.items() for o in other if o.endswith("metrics.json")}
        else:
            assert deps == set(ins), f"{name}: DVC deps {sorted(deps)} vs Snakemake inputs {sorted(ins)}"


def test_every_stage_reads_its_own_settings():
    """DVC's stages depend on what their job reads through one file each, written by the `settings`
    stage (all of params.yaml) from the function Snakemake's fingerprints hash: job by job, the
    file named is that job's (stage, name), every job of the pipeline has one, and nothing else
    of params.yaml is a stage's param. In Snakemake the same file is the job's own output, written
    by the job (`dpsynth --record-settings`), so `dvc commit` after a run records what each job read."""
    from dpsynth.config import load_params
    from dpsynth.workflow.settings import pipeline_jobs, settings_path

    sweeps = yaml.safe_load((REPO / "params.yaml").read_text())["pipeline"]["sweeps"]
    stages = dvc_stage_list(REPO)
    settings = [s for s in stages if s[0] == "settings"]
    assert len(settings) == 1 and settings[0][2] == ["results/settings"]
    assert "params.yaml" in settings[0][1]  # the whole file
    read = set()
    for name, deps, _outs, _cmd in stages:
        if name == "settings":
            continue
        own = [d for d in deps if d.startswith("results/settings/")]
        assert len(own) == 1, f"{name}: {own}"
        group, _, item = name.partition("@")
        rule = _rule_of(group, sweeps)
        stage, job = own[0].removeprefix("results/settings/").removesuffix(".json").split("/")
        assert stage == rule, (name, own)
        if rule in ("report", "train_sweep"):
            assert job == {"report": "report", "train_sweep": group.removeprefix("train_sweep_")}[rule], (name, own)
        elif (sweep := group.removeprefix(f"{rule}_")) in sweeps:  # a cell: stage named by values, file by cell
            assert job.startswith(f"{sweep}-"), (name, own)
        else:
            assert job == item, (name, own)
        read.add((stage, "" if rule == "report" else job))
    want = {(s, n) for s, n in pipeline_jobs(load_params(REPO / "params.yaml"))}
    assert read == want
    assert {settings_path(s, n) for s, n in want} == {f"results/settings/{s}/{n or s}.json" for s, n in read}
    # Snakemake: job by job (matched by its other outputs), the one settings output is the file DVC's stage reads
    own_dep = {frozenset(outs): next(d for d in deps if d.startswith(SETTINGS_OUT))
               for name, deps, outs, _cmd in stages if name != "settings"}
    jobs = snakemake_jobs(REPO, settings=True)
    assert len(jobs) == len(own_dep)
    for rule, _ins, outs in jobs:
        mine = [o for o in outs if o.startswith(SETTINGS_OUT)]
        assert mine == [own_dep[frozenset(outs - set(mine))]], (rule, sorted(outs))
    commands = run([venv_bin("snakemake"), "-n", "-p", "--forceall"], REPO)
    assert len(re.findall(r"dpsynth --record-settings results/settings/\S+\.json ", commands)) == len(jobs)


def test_dvc_report_runs_after_every_run():
    """The report's folder deps give DVC an edge from every sample, evaluate and W2 stage."""
    dot = run([venv_bin("dvc"), "dag", "--dot", "report"], REPO)
    before = {m.group(1) for m in re.finditer(r'"([^"]+)" -> "report"', dot)}
    want = {n for n, *_ in dvc_stage_list(REPO) if n.split("@")[0].split("_")[0] in ("sample", "evaluate", "w2")}
    assert want and want <= before, sorted(want - before)


def _sweep_lists(p_values: list[float], epsilons: list[float]):
    """The targeted p x m sweep's `p` list, and a targeted sweep over the privacy target (the
    privacy-utility curve's points; dvc.yaml regenerated: its matrix groups)."""
    def patch(p: dict) -> None:
        p["sweeps"]["pm_fmnist_quick"]["grid"]["p"] = p_values
        p["sweeps"]["eps_fmnist"] = {"base": "dps_fmnist", "grid": {"epsilon": epsilons}, "train_together": False}
        p["pipeline"]["sweeps"] = [*p["pipeline"]["sweeps"], "eps_fmnist"]
    return patch


def assert_adds_exactly(base: Path, more: Path, cells: list[str], privatized: tuple[str, ...] = ()) -> None:
    """``more``'s DAG is ``base``'s plus ``cells``' train, sample and evaluate outputs (and the privatized
    copies of the ``privatized`` ones), in both runners."""
    want = {f"models/{cell}/{f}" for cell in cells
            for f in ("generator.pt", "privacy.json", "train_summary.json", "train_log.csv")}
    want |= {f"data/privatized/{cell}.{ext}" for cell in privatized for ext in ("npz", "json")}
    want |= {f for cell in cells for f in (f"data/synthetic/{cell}", f"results/runs/{cell}/samples.png",
                                           f"results/runs/{cell}/metrics.json", f"results/runs/{cell}/headline.json")}
    for outputs in (snakemake_outputs, lambda d: {k: v[0] for k, v in dvc_stages(d).items()}):
        a, b = outputs(base), outputs(more)
        a.pop("all", None), b.pop("all", None)
        assert set(a) == set(b)
        added = set().union(*b.values()) - set().union(*a.values())
        removed = set().union(*a.values()) - set().union(*b.values())
        assert added == want and not removed


def test_one_more_sweep_value_adds_exactly_its_cell_in_both_dags(tmp_path):
    """Adding a value to a targeted sweep's list -- `p` of the p x m grid, and the target epsilon of
    an epsilon sweep -- adds exactly that cell's train, sample and evaluate jobs, in Snakemake
    (expand) and DVC (matrix) alike; nothing else changes."""
    base = copy_workflow(tmp_path / "a", _sweep_lists([0.2, 1.0], [1.0, 10.0]))
    more = copy_workflow(tmp_path / "b", _sweep_lists([0.2, 0.5, 1.0], [1.0, 3.0, 10.0]))
    # the generated dvc.yaml reads the lists from params.yaml: the same file serves both
    assert (base / "dvc.yaml").read_text() == (more / "dvc.yaml").read_text()
    assert_adds_exactly(base, more, ["pm_fmnist_quick-p0.5-m1", "eps_fmnist-epsilon3.0"])
    dvc_names = {n for n, *_ in dvc_stage_list(more)} - {n for n, *_ in dvc_stage_list(base)}
    assert dvc_names == {f"{r}_{cell}" for r in ("train", "sample", "evaluate")
                         for cell in ("pm_fmnist_quick@0.5-1", "eps_fmnist@3.0")}


def _local_epsilons(epsilons: list[float]):
    """A targeted sweep over the LOCAL epsilon of the half circle's Gaussian-privatized experiment
    (Reshetova et al.'s figures at several local epsilons)."""
    def patch(p: dict) -> None:
        p["sweeps"]["leps"] = {"base": "ewgan_half_circle_gauss", "grid": {"epsilon": epsilons}}
        p["pipeline"]["sweeps"] = [*p["pipeline"]["sweeps"], "leps"]
    return patch


def test_a_local_epsilon_sweep_privatizes_each_cell_in_both_dags(tmp_path):
    """The local epsilon is a sweep key: each cell privatizes its own copy of the records at its epsilon
    (a privatize job per cell) and trains on it; one more value adds exactly that cell's privatize, train,
    sample and evaluate jobs, in Snakemake and DVC alike. (Before, a sweep over a local-DP experiment was
    refused.) The cells' privatized data are separate releases: the ledger composes them (basic
    composition, report/ledger.py)."""
    from dpsynth.config import load_params

    base = copy_workflow(tmp_path / "a", _local_epsilons([2.0, 5.0]))
    more = copy_workflow(tmp_path / "b", _local_epsilons([2.0, 5.0, 10.0]))
    params = load_params(more / "params.yaml")
    cell = params.all_experiments()["leps-epsilon10.0"]
    assert cell.local is not None and cell.local.epsilon == 10.0 and cell.local.mechanism == "gaussian"
    assert params.privatized_targets()["leps-epsilon10.0"] == "manifold2d_half_circle"
    assert (base / "dvc.yaml").read_text() == (more / "dvc.yaml").read_text()  # the list lives in params.yaml
    assert_adds_exactly(base, more, ["leps-epsilon10.0"], privatized=("leps-epsilon10.0",))
    stages = {n: (deps, cmd) for n, deps, _, cmd in dvc_stage_list(more)}
    deps, _ = stages["train_leps@10.0"]
    assert "data/privatized/leps-epsilon10.0.npz" in deps and "data/processed/manifold2d_half_circle.npz" not in deps
    assert stages["privatize_leps@10.0"][1] == ("dpsynth --record-settings results/settings/privatize/leps-epsilon10.0.json "
                                               "privatize leps-epsilon10.0 --params params.yaml")


def test_changing_datasets_changes_both_dags(tmp_path):
    d = copy_workflow(tmp_path / "w", _two_datasets)
    sm, dv = snakemake_outputs(d), dvc_stages(d)
    want = {f"data/processed/{n}.{ext}" for n in ("digits", "manifold2d_ellipse") for ext in ("npz", "json")}
    assert sm["prepare_data"] == want == dv["prepare_data"][0]


def test_lint_and_dry_runs_on_shipped_params():
    """`snakemake --lint`, `snakemake -n` and DVC's view of the shipped pipeline.

    `dvc repro --dry` hashes every stage's dependencies, so on a fresh tree it fails at the
    first stage whose input an upstream stage has not produced yet (treeverse/dvc#9021);
    here it is run for the stages whose inputs exist (after the settings files every stage
    depends on are written, as `dpsynth workflow plan` does: docs/dvc-and-snakemake.md), `dvc dag` checks the
    whole graph, and the full `dvc repro --dry` is checked after a real run (test below)."""
    out = subprocess.run([venv_bin("snakemake"), "--lint"], cwd=REPO, capture_output=True, text=True,
                         timeout=120, env=env())
    assert out.returncode == 0, out.stdout + out.stderr
    dry = run([venv_bin("snakemake"), "-n", "--forceall"], REPO)
    for rule in ("prepare_data", "privatize", "warmstart", "train", "sample", "evaluate", "evaluate_real", "w2_noise"):
        assert re.search(rf"^{rule}\s+\d+$", dry, re.M), f"rule {rule} missing from the DAG"
    run([venv_bin("dpsynth"), "workflow", "settings", "--params", "params.yaml"], REPO)
    run([venv_bin("dvc"), "repro", "--dry", "prepare_data"], REPO)
    dag = run([venv_bin("dvc"), "dag", "--md"], REPO)
    for stage in ("evaluate@dps_fmnist", "train@dps_fmnist", "warmstart@gswgan_fmnist", "train_gswgan@gswgan_fmnist",
                  "train_pm_fmnist_quick@0.2-1", "w2_noise@manifold2d_half_circle"):
        assert stage in dag


def test_dry_runs_write_no_snapshot_and_a_real_run_keeps_only_its_own(tmp_path):
    """The validated params.yaml the jobs read (.snakemake/dpsynth/params-<hash>.yaml): a dry run
    names its snapshot but writes none and removes none (a dry run takes no lock; another
    pipeline's jobs may be reading one), so `snakemake -n --config ...` leaves nothing behind. A
    real run writes its own and removes every other one, except one a running Snakemake holds
    (read-locked, as each holds its own: here this test process holds one)."""
    import fcntl

    d = copy_workflow(tmp_path / "wf")
    snapshots = d / ".snakemake" / "dpsynth"
    snapshots.mkdir(parents=True)
    (snapshots / "params-000000000000.yaml").write_text("scale: paper\n")  # an earlier run's

    def named(*config: str) -> str:
        out = run([venv_bin("snakemake"), "-n", "-p", "data/processed/digits.npz", "--config", *config], d)
        files = set(re.findall(r"--params \.snakemake/dpsynth/(params-[0-9a-f]{12}\.yaml)", out))
        assert len(files) == 1, out
        return files.pop()

    smoke, threads = named("scale=smoke"), named("scale=smoke", "threads=2")
    assert smoke != threads
    assert sorted(p.name for p in snapshots.iterdir()) == ["params-000000000000.yaml"]

    held = snapshots / "params-111111111111.yaml"
    held.write_text("scale: quick\n")
    fd = os.open(held, os.O_RDONLY)
    try:
        fcntl.lockf(fd, fcntl.LOCK_SH)
        run([venv_bin("snakemake"), "-c1", "data/processed/digits.npz", "--config", "scale=smoke"], d)
    finally:
        os.close(fd)
    assert sorted(p.name for p in snapshots.iterdir()) == sorted([smoke, held.name])
    assert yaml.safe_load((snapshots / smoke).read_text())["scale"] == "smoke"  # what the job read
    assert (d / "data/processed/digits.npz").is_file()


def dry_run_plan(cwd: Path, *args: str) -> list[tuple[str, str, str]]:
    """(rule, the job's wildcard value, reason) of every job `snakemake -n` plans."""
    out = run([venv_bin("snakemake"), "-n", *args], cwd)
    jobs: list[list[str]] = []
    for line in out.splitlines():
        m = re.match(r"^(?:local)?rule (\w+):$", line.strip())
        if m:
            jobs.append([m.group(1), "", ""])
            continue
        m = re.match(r"^(wildcards|reason): (.*)$", line.strip())
        if m and jobs and m.group(1) == "wildcards":
            jobs[-1][1] = m.group(2).split("=", 1)[-1]  # every rule has at most one wildcard
        elif m and jobs:
            jobs[-1][2] = m.group(2)
    return [(r, w, why) for r, w, why in jobs if r != "all"]


def test_a_moved_clone_through_another_path_to_its_venv_plans_nothing(smoke_snakemake, tmp_path):
    """No rule holds the interpreter's path (issue 47): the finished smoke workspace copied to another
    folder, and Snakemake started as `<another path to the same venv>/bin/python -m snakemake`, has
    nothing to do. (With the interpreter as a rule param every job was planned: "Params have changed".)"""
    import sys

    from tests.pipelines import copy_workspace

    moved = copy_workspace(smoke_snakemake, tmp_path / "moved")
    venv = tmp_path / "venv"
    venv.symlink_to(Path(sys.executable).parent.parent, target_is_directory=True)
    out = run([str(venv / "bin" / "python"), "-m", "snakemake", "-n"], moved)
    assert "Nothing to be done" in out, out[-3000:]


def test_snakemake_and_dvc_really_run_the_smoke_pipeline(smoke_pipelines):
    """A real `snakemake` run and a real `dvc repro` (temporary git repo, no remote) of the whole
    smoke pipeline (tests/pipelines.py) give the same generators and the same synthetic data; both
    are then clean. (That `--config scale=...` reaches every job of a real run is shown by the SLURM
    test, whose params.yaml says quick and whose outputs equal these bit for bit.)"""
    sm_dir, dvc_dir = smoke_pipelines.snakemake, smoke_pipelines.dvc
    assert "Nothing to be done" in run([venv_bin("snakemake"), "-n"], sm_dir)
    # with `--config scale=quick` the settings of every scale-dependent job differ: they are planned
    # because their params changed (a job downstream of a planned one is listed for that instead);
    # the data, the same at every scale, is not
    plan = dry_run_plan(sm_dir, "--config", "scale=quick")
    assert {(r, w) for r, w, _ in plan if r == "train"} == {("train", e) for e in SMOKE_EXPERIMENTS}
    why = {(r, w): reason for r, w, reason in plan}
    for job in (("train", "dps_fmnist"), ("train_sweep", "pm_fmnist_quick"), ("warmstart", "gswgan_fmnist"),
                ("w2_noise", "fashion_mnist"), ("evaluate_real", "fashion_mnist")):
        assert "Params have changed" in why[job], (job, why[job])
    # the sweep cell comes after its (planned) sweep job, so Snakemake gives that as its reason
    cell_why = why[("train", "pm_fmnist_quick-p1.0-m1")]
    assert "Params have changed" in cell_why or "private/sweeps/pm_fmnist_quick" in cell_why, cell_why
    assert not any(r == "prepare_data" for r, _, _ in plan), plan
    assert "Running stage 'train@dps_fmnist'" in smoke_pipelines.dvc_log
    status = run([venv_bin("dvc"), "status"], dvc_dir)
    assert "up to date" in status.lower(), status
    run([venv_bin("dvc"), "repro", "--dry"], dvc_dir)  # everything exists now: nothing to run
    import torch

    for exp in SMOKE_EXPERIMENTS:
        ga = torch.load(sm_dir / f"models/{exp}/generator.pt", weights_only=True)["state_dict"]
        gb = torch.load(dvc_dir / f"models/{exp}/generator.pt", weights_only=True)["state_dict"]
        assert ga.keys() == gb.keys() and all(torch.equal(ga[k], gb[k]) for k in ga), exp
    with np.load(sm_dir / "data/synthetic/dps_fmnist/seed0.npz") as a, \
            np.load(dvc_dir / "data/synthetic/dps_fmnist/seed0.npz") as b:
        assert np.array_equal(a["x"], b["x"]) and np.array_equal(a["y"], b["y"])
    import json

    from dpsynth.evaluate import fid_helper_weights as fhw

    require(fhw.check_file(fhw.default_path()) is None, "the offline FID network is not installed "
                                                        "(scripts/fetch-fid-weights.sh; make test installs it)")
    for d in (sm_dir, dvc_dir):
        m = json.loads((d / "results/runs/dps_fmnist/metrics.json").read_text())
        assert m["scale"] == "smoke" and set(m["classifiers"]) == {"logreg", "mlp", "cnn"}
        assert m["privacy"]["epsilon"]["rdp_classic"] <= 10.0
        assert m["train"]["scale_overrides"]["lr"] == {"paper": 1e-5, "this_scale": 1e-3}  # recorded, not silent
        fid = m["fid"]  # offline: a number from the shipped extractor (recorded), with KID and FID-infinity
        assert fid["available"] is True and fid["mean"] > 0 and fid["extractor"], fid
        assert fid["kid"]["available"] and fid["fid_inf"]["available"], fid
        real = json.loads((d / "results/real/fashion_mnist/metrics.json").read_text())
        assert real["classifiers"]["logreg"]["mean"] > 0.7
        gs = json.loads((d / "results/runs/gswgan_fmnist/metrics.json").read_text())
        assert gs["method"] == "gs_wgan" and gs["privacy"]["headline"].startswith("sound")
        assert {"sound.rdp_classic", "as_published.rdp_classic"} <= set(gs["privacy"]["epsilon"])
        ws = json.loads((d / "private/warmstart/gswgan_fmnist/warmstart.json").read_text())
        assert ws["settings"]["n_critics"] == 4 and ws["steps"] == 5  # the smoke preset's N_d and warm-up
        cell = json.loads((d / "results/runs/pm_fmnist_quick-p1.0-m1/metrics.json").read_text())
        assert cell["train"]["hparams"]["p"] == 1.0 and cell["train"]["hparams"]["m"] == 1
        w2 = (d / "results/w2_noise/fashion_mnist.csv").read_text().splitlines()
        # 3 losses x 1 noise level, the 5 reference rows (real, blurred, shrunk, a Gaussian fit, mean image), then
        # the 3 trivial baselines fitted to that level's privatized records (k-means k = 10 and 100, the de-noised
        # Gaussian)
        assert len(w2) == 1 + 3 + 5 + 3 and w2[0].startswith("loss,noise_std,role,seed,w2")
        every = pd.read_csv(d / "results/w2_noise/fashion_mnist.csv")
        assert list(every["role"]) == ["figure"] * 3 + ["reference"] * 5 + ["baseline"] * 3
        fig5 = every[every["role"] == "figure"]  # both panels of Fig. 5 on images
        assert (fig5["entropic_w2_privatized"] > 0).all() and fig5["entropic_w2_privatized_clean"].nunique() == 1
        table = (d / "results/tables/pm_grid_fmnist.md").read_text()
        assert "pm_fmnist_quick-p1.0-m1" in table


def test_no_file_an_all_private_smoke_run_may_push_holds_a_statistic_of_the_training_records(smoke_pipelines):
    """The smoke pipeline declares no dataset public (``data.public: []``): every metrics.json DVC may push, and
    every other JSON file it may push (privacy reports, training summaries), holds no statistic of the training
    records -- GS-WGAN's IS and training-split FID are kept under the private root, labelled, and its table says
    so; the real-data row, computed on the records, stays here; no file holds the IS network's key."""
    import json

    from dpsynth.paths import OUTSIDE_GUARANTEE, gswgan_train_file, release_rule
    from dpsynth.report.tables.gswgan import KEPT_PRIVATE
    from tests.conftest import train_split_statistics

    for d in (smoke_pipelines.snakemake, smoke_pipelines.dvc):
        assert yaml.safe_load((d / "params.yaml").read_text())["data"]["public"] == []
        metrics = {f.relative_to(d).as_posix(): json.loads(f.read_text())
                   for f in (d / "results").rglob("metrics.json")}
        assert {"results/runs/gswgan_fmnist/metrics.json", "results/runs/dps_fmnist/metrics.json",
                "results/real/fashion_mnist/metrics.json"} <= set(metrics)
        pushed = {rel: m for rel, m in metrics.items() if release_rule(rel).push}
        assert set(metrics) - set(pushed) == {"results/real/fashion_mnist/metrics.json"}  # the real-data row
        for f in d.rglob("*.json"):
            rel = f.relative_to(d).as_posix()
            if release_rule(rel).push and not rel.startswith((".", "src/", "results/settings/")):
                pushed[rel] = json.loads(f.read_text())
        assert any(rel.startswith("models/") for rel in pushed), sorted(pushed)
        for rel, m in pushed.items():
            assert train_split_statistics(m) == [], (d.name, rel, train_split_statistics(m))
        gs = metrics["results/runs/gswgan_fmnist/metrics.json"]["protocols"]["gs_wgan"]
        where = str(gswgan_train_file("private", "gswgan_fmnist"))
        assert gs["is"]["private"] == gs["fid_train"]["private"] == where
        kept = json.loads((d / where).read_text())
        assert kept["privacy"] == OUTSIDE_GUARANTEE and kept["gswgan_train"]["is"]["available"] is True
        real = metrics["results/real/fashion_mnist/metrics.json"]["protocols"]["gs_wgan"]
        assert real["is"]["available"] is True and "key" not in real["is"]["classifier"]
        table = (d / "results/tables/gswgan_t1_fmnist.md").read_text()
        assert KEPT_PRIVATE in table and f"kept under the private root ({where})" in table


def _module_file(name: str) -> Path | None:
    p = REPO / "src" / Path(*name.split("."))
    return p / "__init__.py" if (p / "__init__.py").is_file() else p.with_suffix(".py") if p.with_suffix(
        ".py").is_file() else None


@functools.cache
def imported_code(module: str) -> frozenset[str]:
    """The dpsynth source files `module` can import (statically, function-level imports included,
    plus the packages they sit in), as paths relative to the repository. Cached: ~60 DVC stages run
    eleven CLI modules, and parsing the package again per stage cost ~17 s."""
    import ast

    seen: set[Path] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        f = _module_file(name)
        if f is None or f in seen:
            continue
        seen.add(f)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        package = parts if f.name == "__init__.py" else parts[:-1]
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                todo += [a.name for a in node.names if a.name.startswith("dpsynth")]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(package[:len(package) - node.level + 1] + [node.module or ""]).strip(".") \
                    if node.level else node.module or ""
                if base.startswith("dpsynth"):
                    todo += [base, *(f"{base}.{a.name}" for a in node.names)]
    return frozenset(str(f.relative_to(REPO)) for f in seen)


# DVC stage group -> the CLI module its command runs
_STAGE_CLI = {"settings": "workflow", "prepare_data": "data", "privatize": "privatize", "warmstart": "warmstart", "train": "train",
              "train_sweep": "train", "sample": "sample", "evaluate": "evaluate", "evaluate_real": "evaluate",
              "w2_noise": "w2noise", "report": "report"}


def test_privatize_depends_on_what_can_change_its_output_and_nothing_else():
    """Each re-run of privatize draws fresh noise: a second release of every record (issue 58). So its DVC
    stage depends on the code that reads, selects, maps, noises and writes the records -- and not on the CLI,
    the settings files, the fingerprint or the central mechanisms, whose edits re-ran it before."""
    import inspect

    from dpsynth.config.run import RunSpec
    from dpsynth.data.dataset import load_processed
    from dpsynth.io import write_npz
    from dpsynth.methods.entropic_wgan.loss import to_records
    from dpsynth.privacy import mechanisms
    from dpsynth.privacy.local import gaussian_mechanism, laplace_mechanism
    from dpsynth.privacy.local_mechanisms import LocalGaussian
    from dpsynth.privacy.randomness import NoiseSource
    from dpsynth.stages.privatize import privatize

    deps = set(privatize_code_deps())
    for obj in (privatize, RunSpec, load_processed, to_records, mechanisms.local, LocalGaussian, gaussian_mechanism,
                laplace_mechanism, NoiseSource, write_npz):
        assert str(Path(inspect.getfile(obj)).relative_to(REPO)) in deps, obj
    for other in ("src/dpsynth/cli/privatize.py", "src/dpsynth/cli/__init__.py", "src/dpsynth/workflow/settings.py",
                  "src/dpsynth/fingerprint.py", "src/dpsynth/privacy/central_mechanisms.py",
                  "src/dpsynth/privacy/releases.py", "src/dpsynth/stages/common.py"):
        assert other not in deps, other
    # and it is what the generator writes into every privatize group of dvc.yaml (not only the committed file)
    from dpsynth.config import load_params
    from dpsynth.workflow.dvc import render

    stages = yaml.safe_load(render(load_params(REPO / "params.yaml")))["stages"]
    groups = {k: v.get("do", v) for k, v in stages.items() if k.startswith("privatize")}
    assert groups
    for name, stage in groups.items():
        assert {d for d in stage["deps"] if d.startswith("src/")} == deps, name


def test_dvc_stages_depend_on_the_code_they_run_and_not_on_the_rest():
    """Each stage's `src/` deps cover every dpsynth file its CLI module imports (where it loads a
    trainer through the method registry, the whole methods package counts), so a code change re-runs DVC's stages;
    and training does not depend on the report or the evaluation code, so editing them does not
    retrain."""
    sweeps = yaml.safe_load((REPO / "params.yaml").read_text())["pipeline"]["sweeps"]
    for name, deps, _outs, _cmd in dvc_stage_list(REPO):
        group = name.split("@")[0]
        rule = "evaluate_real" if group == "evaluate_real" else _rule_of(group, sweeps)
        code = [d for d in deps if d.startswith("src/")]
        covered = {str(f.relative_to(REPO)) for d in code for f in
                   ([REPO / d] if (REPO / d).is_file() else (REPO / d).rglob("*.py"))}
        if rule == "privatize":  # what can change its output, not every import: a re-run is a new release
            assert covered == set(privatize_code_deps()), name
            continue
        need = set(imported_code(f"dpsynth.cli.{_STAGE_CLI[rule]}"))
        if any(".load_trainer()" in (REPO / f).read_text() for f in need):
            # the method registry imports each method's trainer by name: all of methods/ counts
            need |= {str(f.relative_to(REPO)) for f in (REPO / "src/dpsynth/methods").rglob("*.py")}
        assert need <= covered, f"{name}: imports {sorted(need - covered)} but DVC does not depend on them"
        if rule in ("train", "warmstart", "privatize", "prepare_data", "sample"):
            assert not any(d.startswith(("src/dpsynth/report", "src/dpsynth/cli/report.py")) for d in code), name
        if rule in ("train", "train_sweep", "warmstart"):
            assert not any(d.startswith("src/dpsynth/evaluate") for d in code), name
