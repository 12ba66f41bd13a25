"""Job fingerprints: an edit to params.yaml changes exactly the jobs whose settings it changes.

The Snakemake half (the fingerprint as a rule param re-plans those jobs after a real run) is in
tests/test_dvc.py, beside DVC's view of the same edit; the override half (`--config` reaching the
jobs) is in tests/test_workflow_sync.py.
"""

from __future__ import annotations

import copy
import hashlib
import re
import subprocess
from collections.abc import Callable

import yaml

from dpsynth.config import Params, parse_params
from dpsynth.fingerprint import fingerprint
from tests.conftest import REPO, venv_bin

SHIPPED = yaml.safe_load((REPO / "params.yaml").read_text())


def jobs(p: Params) -> list[tuple[str, str]]:
    """Every (stage, name) job of the pipeline, as the Snakefile builds its DAG."""
    out = [("prepare_data", d) for d in p.datasets]
    out += [("privatize", e) for e in p.privatized_targets()] + [("warmstart", e) for e in p.warm_starts()]
    out += [(s, t) for t in p.pipeline_targets() for s in ("train", "sample", "evaluate")]
    out += [("evaluate_real", d) for d in p.evaluation.real_datasets] + [("w2_noise", d) for d in p.w2_noise]
    return out + [("report", "")]


def changed_by(edit: Callable[[dict], None]) -> set[tuple[str, str]]:
    raw = copy.deepcopy(SHIPPED)
    edit(raw)
    a, b = parse_params(SHIPPED), parse_params(raw)
    assert jobs(a) == jobs(b)
    return {j for j in jobs(a) if fingerprint(a, *j) != fingerprint(b, *j)}


def per_run(*names: str) -> set[tuple[str, str]]:
    return {(s, n) for n in names for s in ("train", "sample", "evaluate")}


def cells_of(base: str) -> list[str]:
    p = parse_params(SHIPPED)
    return [t for t in p.pipeline_targets() if t in p._sweep_cells() and p.sweeps[p._sweep_cells()[t][0]].base == base]


def test_an_lr_edit_changes_that_experiment_its_sweep_cells_and_the_report():
    cells = cells_of("dps_fmnist")
    assert cells  # the shipped Table 5 cell is a sweep over dps_fmnist
    got = changed_by(lambda p: p["experiments"]["dps_fmnist"]["hparams"].update(lr=3e-5))
    assert got == per_run("dps_fmnist", *cells) | {("report", "")}


def test_a_sweep_cell_that_sets_the_key_itself_is_not_affected():
    raw = copy.deepcopy(SHIPPED)
    raw["sweeps"]["pm_fmnist_quick"]["grid"]["lr"] = [1e-3]  # the cells now fix lr themselves
    edited = copy.deepcopy(raw)
    edited["experiments"]["dps_fmnist"]["hparams"]["lr"] = 3e-5
    a, b = parse_params(raw), parse_params(edited)
    changed = {j for j in jobs(a) if fingerprint(a, *j) != fingerprint(b, *j)}
    assert changed == per_run("dps_fmnist") | {("report", "")}, changed


def test_evaluation_and_preset_edits_reach_only_the_stages_that_read_them():
    scale = SHIPPED["scale"]
    fid = changed_by(lambda p: p["scales"][scale].update(fid_samples=123))
    assert {s for s, _ in fid} == {"evaluate", "evaluate_real", "report"}
    assert fid >= {("evaluate", t) for t in parse_params(SHIPPED).pipeline_targets()}
    scored = changed_by(lambda p: p["scales"][scale].update(classifier_test_subset=321))
    assert {s for s, _ in scored} == {"evaluate", "evaluate_real", "report"}
    n_syn = changed_by(lambda p: p["scales"][scale].update(n_synthetic=777))
    assert {s for s, _ in n_syn} == {"sample", "report"}
    steps = changed_by(lambda p: p["scales"][scale].update(train_steps=11))
    # (sample and evaluate carry the experiment's privacy plan: they re-run after train anyway)
    assert {s for s, _ in steps} >= {"train"} and not {s for s, _ in steps} & {"evaluate_real", "w2_noise"}
    other_scale = changed_by(lambda p: p["scales"]["paper"].update(fid_samples=5))
    assert other_scale == {("report", "")}  # a preset that is not running
    w2 = changed_by(lambda p: p["w2_noise"]["manifold2d_half_circle"].update(steps=7))
    assert w2 == {("w2_noise", "manifold2d_half_circle"), ("report", "")}


def test_run_wide_settings_reach_every_computing_job():
    for key, value in (("threads", 2), ("privacy_noise", "reproducible"), ("seeds", [0, 1])):
        got = changed_by(lambda p, k=key, v=value: p.update({k: v}))
        want = {j for j in jobs(parse_params(SHIPPED)) if j[0] not in ("prepare_data",)}
        assert got == want, (key, sorted(want - got), sorted(got - want))


def test_a_description_edit_retrains_nothing():
    got = changed_by(lambda p: p["experiments"]["dps_fmnist"].update(description="renamed"))
    assert got == {("report", "")}


def test_snakemake_jobs_read_the_validated_overrides():
    """`--config scale=smoke` changes no file, yet every job's command names the snapshot of
    params.yaml with smoke: the jobs run at the scale Snakemake validated. A snapshot is named by
    its content's hash, and a dry run names it without writing it (the real runs are in
    tests/test_workflow_sync.py)."""
    out = subprocess.run([venv_bin("snakemake"), "-n", "-p", "--forceall", "--config", "scale=smoke"], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    files = set(re.findall(r"--params (\.snakemake/dpsynth/params-[0-9a-f]{12}\.yaml)", out.stdout))
    assert SHIPPED["scale"] != "smoke"
    # the text workflow/rules/common.smk hashes: params.yaml's key order (the report lists its tables
    # in it), no YAML anchors (_PlainDumper)
    plain = type("Plain", (yaml.SafeDumper,), {"ignore_aliases": lambda self, data: True})
    text = yaml.dump({**SHIPPED, "scale": "smoke"}, Dumper=plain, sort_keys=False)
    assert files == {f".snakemake/dpsynth/params-{hashlib.sha256(text.encode()).hexdigest()[:12]}.yaml"}, files


def test_writing_a_default_out_changes_nothing():
    """`threads: 1` written out, or an experiment's lr set to the value it already has: the same
    settings, so the same fingerprints (a new field with a default does not re-run a pipeline)."""
    lr = SHIPPED["experiments"]["dps_mnist"]["hparams"]["lr"]
    assert changed_by(lambda p: p.update(threads=1)) == set()
    assert changed_by(lambda p: p["experiments"]["dps_mnist"]["hparams"].update(lr=lr)) == set()
    assert changed_by(lambda p: p["experiments"]["dps_mnist"].update(seed=None)) == set()


def test_a_sigma_the_scale_budget_replaces_re_runs_only_the_report_and_the_cells_measured_against_it():
    """At the quick scale a step budget replaces the experiment's sigma (PrivacyPlan calibrate_sigma:
    sigma is calibrated from the target), so editing it cannot change the run: only the report (which
    prints it) re-runs, and a sweep cell whose step share is measured against this run (its ``reference``,
    read with the base's sigma). At the paper scale sigma sets the steps: every job of the run re-runs."""
    from dpsynth.config.run import resolve_run

    p = parse_params(SHIPPED)
    assert p.scale == "quick" and resolve_run(p, "dps_fmnist").privacy.mode == "calibrate_sigma"
    measured = [c for c in cells_of("dps_fmnist") if resolve_run(p, c).privacy.reference is not None]
    got = changed_by(lambda raw: raw["experiments"]["dps_fmnist"]["privacy"].update(sigma=1.3))
    assert got == per_run(*measured) | {("report", "")}, got

    paper = copy.deepcopy(SHIPPED)
    paper["scale"] = "paper"
    edited = copy.deepcopy(paper)
    edited["experiments"]["dps_fmnist"]["privacy"]["sigma"] = 1.3
    a, b = parse_params(paper), parse_params(edited)
    assert {("train", "dps_fmnist"), ("sample", "dps_fmnist"), ("evaluate", "dps_fmnist")} <= {
        j for j in jobs(a) if fingerprint(a, *j) != fingerprint(b, *j)}
