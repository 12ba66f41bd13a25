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
    assert stages["evaluate_pm_mnist"]["foreach"] == "${sweeps.pm_mnist.cells}"  # DVC wants foreach with do:
    cmd = stages["evaluate_pm_mnist"]["do"]["cmd"]
    assert cmd == ("dpsynth --record-settings results/settings/evaluate/pm_mnist-p${item.p}-m${item.m}.json "
                   "evaluate pm_mnist-p${item.p}-m${item.m} --params params.yaml")


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


def test_every_output_flag_follows_the_one_release_rule():
    """dvc.yaml's `cache: false` / `push: false` are derived from ``paths.release_rule``, output by output: the
    private root is never cached; what is computed on the records without noise (prepared records and their
    label counts, real-data rows, the W2-vs-noise sweep, privatized records' clear labels) is never pushed; nor are
    the report's folders that quote them, whatever data.public declares (the same flags for every data.public)."""
    from dpsynth.paths import release_rule

    raw = shipped()
    raw["sweeps"]["n_half_circle"]["grid"]["n"] = [500, 1000]
    raw["pipeline"]["sweeps"].append("n_half_circle")
    from dpsynth.workflow.dvc import render

    texts = set()
    for public in ([], list(raw["datasets"])[:1], list(raw["datasets"])[1:], list(raw["datasets"])):
        raw["data"]["public"] = public
        params = parse_params(raw)
        texts.add(render(params))
        seen: dict[str, dict] = {}
        for stage in dvc_stages(params)["stages"].values():
            body = stage.get("do", stage)
            for kind in ("outs", "metrics", "plots"):
                for out in body.get(kind, []):
                    path, flags = next(iter(out.items())) if isinstance(out, dict) else (out, {})
                    rule = release_rule(path)
                    cached, pushed = flags.get("cache", True), flags.get("push", True) and flags.get("cache", True)
                    assert (cached or not rule.cache or path == "results/settings") and cached <= rule.cache, path
                    assert pushed == rule.push or path == "results/settings", path  # (rewritten by every job)
                    seen[path] = flags
        never = ["data/processed/${item}.npz", "data/processed/${item}.json", "results/real/${item}/metrics.json",
                 "results/real/${item}/headline.json", "results/w2_noise/${key}.csv", "data/privatized/${key}.npz",
                 "data/privatized/n_half_circle-n${item.n}.npz"]
        assert all(seen[o] == {"push": False} for o in never), {o: seen[o] for o in never}
        assert all(seen[o] == {"cache": False} for o in seen if o.startswith("private/"))
        assert seen["results/tables"] == seen["results/figures"] == {"push": False}
        assert seen["models/${key}/generator.pt"] == seen["results/runs/${key}/metrics.json"] == {}
        assert seen["data/privatized/${key}.json"] == {}  # the local privacy report is released
    assert len(texts) == 1  # no flag reads data.public: no edit of it can leave a generated dvc.yaml stale
    with pytest.raises(ConfigError, match="data.public"):
        parse_params({**raw, "data": {**raw["data"], "public": ["mnistt"]}})


def test_a_dvc_yaml_whose_push_flags_the_rule_forbids_stops_both_runners(tmp_path: Path):
    """A dvc.yaml that would push the report's folders (an older dpsynth's, whose flags followed data.public, or a
    hand edit): `dvc repro` stops at its first stage and Snakemake before any job, each with one line naming the
    file and the fix; nothing is made, so `dvc push` sends nothing. Regenerated, both run. Editing data.public
    never makes a generated file stale."""
    import subprocess

    from dpsynth.workflow.dvc import stale_release_flags
    from tests.conftest import clear_pipeline, venv_bin
    from tests.pipelines import copy_workflow, env, run

    def patch(p: dict) -> None:
        p.update(scale="smoke", datasets=["digits28", "manifold2d_half_circle"], privacy_noise="reproducible")
        p["data"]["public"] = ["digits28", "manifold2d_half_circle"]
        clear_pipeline(p)
        p["evaluation"].update(real_datasets=["digits28"], classifiers=["logreg"], fid_download=False)

    d = copy_workflow(tmp_path / "w", patch)
    raw = yaml.safe_load((d / "params.yaml").read_text())
    assert stale_release_flags(d / "dvc.yaml") == []
    raw["data"]["public"] = []  # un-declared, dvc.yaml not regenerated: still nothing to refuse
    (d / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    assert stale_release_flags(d / "dvc.yaml") == []
    doc = (d / "dvc.yaml").read_text()
    old = doc.replace("- results/tables:\n        push: false", "- results/tables").replace(
        "- results/figures:\n        push: false", "- results/figures")
    assert old != doc
    (d / "dvc.yaml").write_text(old)  # what an older dpsynth wrote while every dataset was public
    assert stale_release_flags(d / "dvc.yaml") == [
        f"results/{f} (quotes noise-free rows (real data, the W2 sweep); rebuilt from the pushed runs by "
        "`dpsynth report`)" for f in ("tables", "figures")]

    def refused(*cmd: str) -> str:
        res = subprocess.run(list(cmd), cwd=d, capture_output=True, text=True, timeout=300, env=env())
        out = res.stdout + res.stderr
        assert res.returncode != 0, out[-3000:]
        lines = [ln for ln in out.splitlines() if "push flags are stale" in ln]
        assert len(lines) == 1 and "dvc.yaml" in lines[0] and "run `dpsynth workflow dvc`" in lines[0], out[-3000:]
        return out

    refused(venv_bin("dvc"), "repro")
    refused(venv_bin("snakemake"), "--cores", "1")
    assert not (d / "data" / "processed").exists() and not (d / "results" / "tables").exists()  # nothing made
    run([venv_bin("dvc"), "remote", "add", "-d", "store", str(tmp_path / "remote")], d)
    run([venv_bin("dvc"), "push"], d)
    assert not any(f.is_file() for f in (tmp_path / "remote").rglob("*"))
    # regenerated: the tables are `push: false`, and both runners go on (the settings stage runs, Snakemake plans)
    run([venv_bin("python"), "-m", "dpsynth.cli", "workflow", "dvc", "--params", "params.yaml"], d)
    assert (d / "dvc.yaml").read_text() == doc and stale_release_flags(d / "dvc.yaml") == []
    run([venv_bin("dvc"), "repro", "settings"], d)
    run([venv_bin("snakemake"), "-n"], d)


def test_dvc_push_sends_nothing_computed_on_the_training_records_without_noise(tmp_path: Path):
    """A real `dvc push` of a smoke workspace to a local remote: a real-data row, a cell of the training-set-size
    sweep (Fig. 11: the W2 to its own clean training records is measured) and the report, run by `dvc repro`.
    On the remote: the released files, and none of the prepared records, their label counts, the real-data row,
    the privatized records (labels in clear), the W2 to the training records, nor anything under private/, nor
    the report's tables and figures -- made while every dataset was declared public, pushed once then and once
    after `data.public: []` without regenerating dvc.yaml or re-running (issue 63: no order of edits and pushes
    sends a table). The tables name where the train W2 lies and hold none of it."""
    import hashlib
    import json

    from dpsynth.paths import w2_train_file
    from tests.conftest import clear_pipeline, venv_bin
    from tests.pipelines import copy_workflow, run

    cell = "n_half_circle-n400"

    def patch(p: dict) -> None:
        p.update(scale="smoke", datasets=["digits28", "manifold2d_half_circle"], privacy_noise="reproducible")
        p["data"]["public"] = ["digits28", "manifold2d_half_circle"]  # the tables are made while both are public
        clear_pipeline(p)
        p["pipeline"]["sweeps"] = ["n_half_circle"]
        p["sweeps"]["n_half_circle"]["grid"]["n"] = [200, 400]  # (Fig. 11 needs two sizes)
        p["evaluation"].update(real_datasets=["digits28"], classifiers=["logreg"], fid_download=False)
        p["tables"]["local_privacy_w2"]["dataset"] = "manifold2d_half_circle"
        p["w2_noise"] = {"manifold2d_half_circle": {"noise_levels": [0.5], "losses": ["exact"], "steps": 5,
                                                    "n_eval": 100}}

    d = copy_workflow(tmp_path / "w", patch)
    dvc = venv_bin("dvc")
    run([dvc, "repro"], d, timeout=900)
    private_w2 = w2_train_file(d / "private", cell)
    assert private_w2.is_file()  # measured, and kept on this machine

    def md5(path: Path) -> str:
        return hashlib.md5(path.read_bytes()).hexdigest()

    def push(remote: Path) -> set[str]:
        run([dvc, "remote", "add", "-f", "-d", "store", str(remote)], d)
        run([dvc, "push"], d, timeout=300)
        return {f.parent.name + f.name for f in remote.rglob("*") if f.is_file()}

    pushed = push(tmp_path / "remote")
    released = [d / "models" / cell / "generator.pt", d / "models" / cell / "privacy.json",
                d / "results" / "runs" / cell / "metrics.json", d / "data" / "privatized" / f"{cell}.json"]
    assert all(md5(f) in pushed for f in released), sorted(pushed)  # the push itself worked
    noise_free = [d / "data" / "processed" / f"{ds}.{ext}" for ds in ("digits28", "manifold2d_half_circle")
                  for ext in ("npz", "json")]
    noise_free += [d / "results" / "real" / "digits28" / "metrics.json", d / "data" / "privatized" / f"{cell}.npz",
                   d / "results" / "w2_noise" / "manifold2d_half_circle.csv", private_w2]
    private = [f for f in (d / "private").rglob("*") if f.is_file()]
    assert private and all(f.stat().st_size for f in private)
    report = [f for f in (d / "results").glob("[tf]*/*") if f.is_file()]  # results/tables, results/figures
    for f in noise_free + private + report:
        assert md5(f) not in pushed, f"dvc push sent {f.relative_to(d)}"
    assert "W2 to clean train ours" not in json.dumps(json.loads(released[2].read_text()))  # (a metrics.json)

    table = d / "results" / "tables" / "reshetova_fig11.csv"
    assert table in report and d / "results" / "figures" / "reshetova_fig11.png" in report
    # both datasets un-declared, dvc.yaml neither regenerated nor the pipeline re-run, then pushed: still no table
    raw = yaml.safe_load((d / "params.yaml").read_text())
    raw["data"]["public"] = []
    (d / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    pushed = push(tmp_path / "remote-undeclared")
    assert all(md5(f) in pushed for f in released), sorted(pushed)
    for f in noise_free + private + report:
        assert md5(f) not in pushed, f"dvc push sent {f.relative_to(d)}"
    value = repr(json.loads(private_w2.read_text())["w2_train"]["mean"])
    texts = [f.read_text(errors="replace") for f in report if f.suffix in (".csv", ".md", ".tex", ".html", ".json")]
    assert not any(value in t or value[:6] in t for t in texts)  # the train W2 is in no pushed table
    assert f"private/runs/{cell}/w2_train.json" in table.read_text()  # which names where it lies


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
