"""`dpsynth workflow budget <target> --scale S`: a target's jobs, GPU- and CPU-hours and memory, from the cost book
(benchmarks/costs.yaml) and the measurement files it cites; every figure labelled measured, extrapolated or no
measurement (issue 62)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from dpsynth.config import load_params
from dpsynth.errors import ConfigError
from dpsynth.workflow.budget import planned_steps, render_budget, target_budget, target_jobs
from tests.conftest import REPO

#: the targets the issue asks GPU-hours for
TABLES = ("iclr_table1", "neurips_table4", "neurips_table5", "iclr_table4", "iclr_table5", "gswgan_table1")
SLICE = "benchmarks/results/gpu_train_slice.json"


@pytest.fixture(scope="module")
def paper():
    return load_params(REPO / "params.yaml", scale="paper")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A project root holding the cost book, the measurement files it reads and the resources table (no data
    prepared: the training records come from the dataset registry)."""
    for name in ("benchmarks/costs.yaml", "benchmarks/results/dp_merf_variants_mnist.json", "workflow/resources.yaml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, tmp_path / name)
    return tmp_path


def _job(budget, stage: str, name: str):
    (job,) = [j for j in budget.jobs if (j.stage, j.name) == (stage, name)]
    return job


def test_planned_steps_are_the_ones_the_project_states(paper) -> None:
    """The step counts the docs and params.yaml state, computed by the methods' own mechanisms: dps_mnist's
    3,464,988 (docs/gpu-cluster.md), DP-CGAN's 24,702 and CelebA's 464,388 (params.yaml), GS-WGAN's 20,000
    (its privacy.steps), DP-MERF's 5 epochs of 600 steps; at the quick scale, its budget of 900."""
    assert [planned_steps(paper, r) for r in ("dps_mnist", "cgan_mnist", "dps_celeba_biggan", "gswgan_mnist",
                                               "merf_mnist")] == [3_464_988, 24_702, 464_388, 20_000, 3_000]
    assert planned_steps(load_params(REPO / "params.yaml", scale="quick"), "dps_mnist") == 900


def test_the_jobs_and_their_resources_are_the_targets(paper, root: Path) -> None:
    """One priced job per job of the target (the list tests/test_table_targets.py holds to Snakemake's dry run),
    on the device its rule asks for at this scale; a sweep trained together asks for a GPU, its cells' own jobs
    only release."""
    budget = target_budget(paper, "neurips_table4", root=root)
    assert [(j.stage, j.name) for j in budget.jobs] == target_jobs(paper, "neurips_table4")
    sweep = _job(budget, "train_sweep", "pm_mnist")
    assert (sweep.device, sweep.gpus, sweep.mem_mb) == ("gpu", 1, 16000)
    assert {j.cost for j in budget.jobs if j.stage == "train"} == {"release_cell"}
    assert {j.device for j in budget.jobs if j.stage == "sample"} == {"cpu"}
    without = target_budget(paper, "neurips_table4", gpus=False, root=root)
    assert without.gpu_hours() == 0 and {j.device for j in without.jobs} == {"cpu"}


def test_dps_mnist_is_its_measured_rate_over_its_steps_and_cites_it(paper, root: Path) -> None:
    """2.85 GPU-hours: 3,464,988 steps at the 337.7 steps/s measured on one H200, extrapolated, from the source
    the cost book names (docs/performance.md, whose JSON is not in the repository)."""
    budget = target_budget(paper, "iclr_table1", root=root)
    train = _job(budget, "train", "dps_mnist")
    assert train.hours == pytest.approx(3_464_988 / 337.7 / 3600, rel=1e-9) and train.device == "gpu"
    assert (train.basis, train.cost) == ("extrapolated", "dp_sinkhorn_graphed_gpu")
    assert budget.costs["dp_sinkhorn_graphed_gpu"].source.startswith("docs/performance.md")
    # another batch size scales by generated pixels per step: batch 100 at the same sigma, fewer steps
    cell = "batch_sigma_mnist-sigma1.1-batch_size100"
    t5 = target_budget(paper, "iclr_table5", root=root)
    assert [p.cost for p in [_job(t5, "train_sweep", "batch_sigma_mnist")]] == ["dp_sinkhorn_graphed_gpu"]
    assert planned_steps(paper, cell) == 863_997


def test_changing_a_cost_changes_the_estimate(paper, root: Path) -> None:
    """The estimate follows the cost book: twice the measured rate halves dps_mnist's hours; and a DP-MERF run
    follows the measurement file the book reads it from."""
    before = target_budget(paper, "iclr_table1", root=root)
    book = root / "benchmarks/costs.yaml"
    book.write_text(book.read_text().replace("steps_per_s: 337.7", "steps_per_s: 675.4"))
    after = target_budget(paper, "iclr_table1", root=root)
    assert _job(after, "train", "dps_mnist").hours == pytest.approx(_job(before, "train", "dps_mnist").hours / 2)
    merf = root / "benchmarks/results/dp_merf_variants_mnist.json"
    data = json.loads(merf.read_text())
    data["variants"]["conv_cond"]["train_seconds"] = 7200.0
    merf.write_text(json.dumps(data))
    job = _job(target_budget(paper, "iclr_table1", root=root), "train", "merf_mnist")
    assert job.hours == pytest.approx(2.0) and job.basis == "extrapolated"  # measured on a CPU, run on a GPU


def test_a_gpu_slice_measured_with_benchmarks_gpu_sh_replaces_the_documented_rate(paper, root: Path) -> None:
    """`bash benchmarks/gpu.sh` on a GPU node writes the slice the book reads instead of the documented rate;
    the CPU plumbing check (`--dry-run`) writes one the book ignores."""
    slice_file = root / SLICE
    slice_file.write_text(json.dumps({"steps_per_s": 1000.0, "dry_run": False, "scale": "paper",
                                      "experiment": "dps_mnist", "date": "2026-12-01T00:00:00+00:00"}))
    budget = target_budget(paper, "iclr_table1", root=root)
    assert _job(budget, "train", "dps_mnist").hours == pytest.approx(3_464_988 / 1000 / 3600)
    assert budget.costs["dp_sinkhorn_graphed_gpu"].source == f"{SLICE}, steps_per_s"
    slice_file.write_text(json.dumps({"steps_per_s": 5.0, "dry_run": True, "scale": "smoke",
                                      "experiment": "dps_mnist"}))
    assert _job(target_budget(paper, "iclr_table1", root=root), "train", "dps_mnist").hours == pytest.approx(
        3_464_988 / 337.7 / 3600)


def test_what_was_never_measured_says_so(paper, root: Path) -> None:
    """GS-WGAN's 1,000 critics, the grad-theta variant and paper-scale evaluation have no measurement: their jobs
    say "no measurement" and the assumption's reason is printed beside them, never a bare number."""
    budget = target_budget(paper, "iclr_table1", root=root)
    warm = _job(budget, "warmstart", "gswgan_mnist")
    assert warm.basis == "no measurement" and "1,000 critics x 2,000 steps" in warm.how
    assert _job(budget, "train", "dps_grad_mnist").basis == "no measurement"
    assert {j.basis for j in budget.jobs if j.stage in ("evaluate", "evaluate_real", "sample")} == {"no measurement"}
    for job in budget.jobs:
        cost = budget.costs[job.cost]
        assert (job.basis == "no measurement") == (cost.basis == "assumption"), job
        if cost.basis == "assumption":
            assert cost.note.startswith("no measurement"), cost.id
    text = render_budget(budget)
    for cid, cost in budget.costs.items():
        assert f"  {cid}: " in text and cost.note in text
    assert budget.gpu_hours("no measurement") < budget.gpu_hours()


def test_the_budget_prints_gpu_hours_and_sources_for_each_table(capsys: pytest.CaptureFixture[str]) -> None:
    """`dpsynth workflow budget <target> --scale paper` for the tables the issue names: GPU-hours, the part
    without a measurement, and the source of every figure."""
    from dpsynth.cli import main

    for target in TABLES:
        assert main(["workflow", "budget", target, "--scale", "paper", "--params", str(REPO / "params.yaml")]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"{target} at scale 'paper'") and "GPU-hours" in out, out
        assert "dp_sinkhorn_graphed_gpu: 337.7 steps/s, measured -- docs/performance.md" in out \
            or target == "gswgan_table1", out
        assert "cost entries (benchmarks/costs.yaml):" in out and "no measurement" in out
    assert main(["workflow", "budget", "iclr_table1", "--scale", "paper", "--json", "--params",
                 str(REPO / "params.yaml")]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["jobs"] == len(record["job_list"]) and record["gpu_hours"] > record["gpu_hours_no_measurement"]


def test_bad_input_is_one_line(paper, root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dpsynth.cli import main

    assert main(["workflow", "budget", "iclr_tabel1", "--params", str(REPO / "params.yaml")]) == 2
    assert "no build target 'iclr_tabel1'; did you mean 'iclr_table1'?" in capsys.readouterr().err
    book = root / "benchmarks/costs.yaml"
    raw = yaml.safe_load(book.read_text())
    raw["costs"]["report"]["basis"] = "guessed"
    book.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"costs\.report\.basis: 'guessed' is not one of measured, extrapolated, "
                                          r"assumption"):
        target_budget(paper, "iclr_table1", root=root)
    del raw["costs"]["report"]
    book.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"no entry of the cost book applies to iclr_table1 \(report"):
        target_budget(paper, "iclr_table1", root=root)
    quick = load_params(REPO / "params.yaml", scale="quick")
    with pytest.raises(ConfigError, match=r"sweeps\.batch_sigma_mnist: at scale 'quick', batch_size 100 and 200"):
        target_budget(quick, "iclr_table5", root=root)


def test_the_gpu_hours_docs_gpu_cluster_states_are_the_budgets(paper) -> None:
    """docs/gpu-cluster.md's table of targets is what the budget prints with the cost book of the commit."""
    import re

    text = (REPO / "docs" / "gpu-cluster.md").read_text()
    rows = re.findall(r"^\s*\| `(\w+)` \| (\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", text, re.M)
    assert {r[0] for r in rows} >= set(TABLES), rows
    for target, jobs, gpu, unmeasured, cpu in rows:
        budget = target_budget(paper, target, root=REPO)
        assert (int(jobs), gpu, unmeasured, cpu) == (
            len(budget.jobs), f"{budget.gpu_hours():.1f}", f"{budget.gpu_hours('no measurement'):.1f}",
            f"{budget.cpu_hours():.1f}"), target
