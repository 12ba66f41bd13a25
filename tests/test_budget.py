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
SLICE = "benchmarks/results/gpu_train_slice.json"  # what `bash benchmarks/gpu.sh` writes on your GPU node
GPU = "benchmarks/results/gpu-2026-11-28"  # the newest committed GPU measurement
COMMITTED_SLICE, STEP_SWEEP = f"{GPU}/gpu_train_slice.json", f"{GPU}/gpu_step_sweep_200steps.json"


def _json(name: str) -> dict:
    return json.loads((REPO / name).read_text())


@pytest.fixture(scope="module")
def paper():
    return load_params(REPO / "params.yaml", scale="paper")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A project root holding the cost book, the measurement files it reads and the resources table (no data
    prepared: the training records come from the dataset registry)."""
    for name in ("benchmarks/costs.yaml", "benchmarks/results/dp_merf_variants_mnist.json", "workflow/resources.yaml",
                 COMMITTED_SLICE, STEP_SWEEP):
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
    # a cell's own job only releases its checkpoint: no GPU, workflow/resources.yaml's `release` row
    assert {(j.device, j.gpus, j.mem_mb) for j in budget.jobs if j.stage == "train"} == {("cpu", 0, 8000)}
    assert {j.device for j in budget.jobs if j.stage == "sample"} == {"cpu"}
    without = target_budget(paper, "neurips_table4", gpus=False, root=root)
    assert without.gpu_hours() == 0 and {j.device for j in without.jobs} == {"cpu"}


def test_dps_mnist_is_its_measured_rate_over_its_steps_and_cites_it(paper, root: Path) -> None:
    """3,464,988 steps at the rate the newest committed GPU slice measured (257.78 steps/s through `dpsynth train`
    on one H200, 2026-11-28), extrapolated, citing that file and its date."""
    rate = _json(COMMITTED_SLICE)["steps_per_s"]
    budget = target_budget(paper, "iclr_table1", root=root)
    train = _job(budget, "train", "dps_mnist")
    assert train.hours == pytest.approx(3_464_988 / rate / 3600, rel=1e-9) and train.device == "gpu"
    assert (train.basis, train.cost) == ("extrapolated", "dp_sinkhorn_graphed_gpu")
    cost = budget.costs["dp_sinkhorn_graphed_gpu"]
    assert cost.source == f"{COMMITTED_SLICE}, steps_per_s" and "(measured 2026-11-28)" in cost.note
    # the grad-theta step: the eager image step's measured rate, an assumption
    grad = _job(budget, "train", "dps_grad_mnist")
    assert grad.hours == pytest.approx(3_464_988 / _json(STEP_SWEEP)["steps"]["fast_eager"]["steps_per_s"] / 3600)
    cell = "batch_sigma_mnist-sigma1.1-batch_size100"
    t5 = target_budget(paper, "iclr_table5", root=root)
    assert [p.cost for p in [_job(t5, "train_sweep", "batch_sigma_mnist")]] == ["dp_sinkhorn_packed_gpu"]
    assert planned_steps(paper, cell) == 863_997


def test_changing_a_measurement_changes_the_estimate(paper, root: Path) -> None:
    """The estimate follows the measurement files the book reads: twice the slice's rate halves dps_mnist's hours;
    a DP-MERF run follows its own file."""
    before = target_budget(paper, "iclr_table1", root=root)
    slice_file = root / COMMITTED_SLICE
    data = json.loads(slice_file.read_text())
    data["steps_per_s"] *= 2
    slice_file.write_text(json.dumps(data))
    after = target_budget(paper, "iclr_table1", root=root)
    assert _job(after, "train", "dps_mnist").hours == pytest.approx(_job(before, "train", "dps_mnist").hours / 2)
    merf = root / "benchmarks/results/dp_merf_variants_mnist.json"
    data = json.loads(merf.read_text())
    data["variants"]["conv_cond"]["train_seconds"] = 7200.0
    merf.write_text(json.dumps(data))
    job = _job(target_budget(paper, "iclr_table1", root=root), "train", "merf_mnist")
    assert job.hours == pytest.approx(2.0) and job.basis == "extrapolated"  # measured on a CPU, run on a GPU


def test_a_gpu_slice_measured_with_benchmarks_gpu_sh_replaces_the_committed_rate(paper, root: Path) -> None:
    """`bash benchmarks/gpu.sh` on a GPU node writes the slice the book reads before the committed one; the CPU
    plumbing check (`--dry-run`) writes one the book ignores."""
    slice_file = root / SLICE
    slice_file.write_text(json.dumps({"steps_per_s": 1000.0, "dry_run": False, "scale": "paper",
                                      "experiment": "dps_mnist", "date": "2026-12-01T00:00:00+00:00"}))
    budget = target_budget(paper, "iclr_table1", root=root)
    assert _job(budget, "train", "dps_mnist").hours == pytest.approx(3_464_988 / 1000 / 3600)
    assert budget.costs["dp_sinkhorn_graphed_gpu"].source == f"{SLICE}, steps_per_s"
    slice_file.write_text(json.dumps({"steps_per_s": 5.0, "dry_run": True, "scale": "smoke",
                                      "experiment": "dps_mnist"}))
    assert _job(target_budget(paper, "iclr_table1", root=root), "train", "dps_mnist").hours == pytest.approx(
        3_464_988 / _json(COMMITTED_SLICE)["steps_per_s"] / 3600)


def test_the_cost_book_reads_the_newest_committed_gpu_measurement() -> None:
    """Every GPU measurement the book reads is in the newest dated folder benchmarks/results/gpu-<date>/."""
    newest = max(p.name for p in (REPO / "benchmarks/results").glob("gpu-*") if p.is_dir())
    book = yaml.safe_load((REPO / "benchmarks/costs.yaml").read_text())["costs"]
    files = [f for e in book.values() for f in ([e["file"]] if isinstance(e.get("file"), str) else e.get("file", []))]
    files += [e["packed"]["file"] for e in book.values() if "packed" in e]
    dated = [f for f in files if "/gpu-" in f]
    assert len(dated) >= 3 and all(f.startswith(f"benchmarks/results/{newest}/") for f in dated), dated
    # the value written beside `file` (a book read without it) is the file's own
    graphed = book["dp_sinkhorn_graphed_gpu"]
    assert graphed["steps_per_s"] == _json(COMMITTED_SLICE)["steps_per_s"]


def _recomputed_packed_hours(paper, sweep: str) -> float:
    """A packed sweep's hours from the JSON alone: the K = 1 step and the K = 8 packed step's rates give
    T(K) = T1 + (T8 - T1) (K - 1) / 7 seconds; each p group runs its cells' steps at its K."""
    data = _json(STEP_SWEEP)
    t1 = 1 / data["steps"]["fast"]["steps_per_s"]
    t8 = 1 / data["sweep"]["trials"]["batched"]["steps_per_s"]
    k8 = data["sweep"]["configs"]
    groups: dict[float, list[str]] = {}
    for cell in paper.cells_of(sweep):
        groups.setdefault(paper.all_experiments()[cell].hparams.p, []).append(cell)
    return sum(max(planned_steps(paper, c) for c in cells) * (t1 + (t8 - t1) * (len(cells) - 1) / (k8 - 1))
               for cells in groups.values()) / 3600


def test_a_tables_gpu_hours_recomputed_from_the_json_are_the_commands_within_10_percent(
        paper, capsys: pytest.CaptureFixture[str]) -> None:
    """What `dpsynth workflow budget <target> --scale paper --json` prints for training, against the same hours
    recomputed here from the committed GPU JSONs: NeurIPS Table 4's packed sweep and ICLR Table 1's DP-Sinkhorn
    runs (the image step at the slice's rate, grad-theta at the eager step's)."""
    from dpsynth.cli import main

    def printed(target: str) -> list[dict]:
        assert main(["workflow", "budget", target, "--scale", "paper", "--json", "--params",
                     str(REPO / "params.yaml")]) == 0
        return json.loads(capsys.readouterr().out)["job_list"]

    (sweep,) = [j for j in printed("neurips_table4") if j["stage"] == "train_sweep"]
    assert sweep["hours"] == pytest.approx(_recomputed_packed_hours(paper, "pm_mnist"), rel=0.10)
    assert sweep["hours"] < 0.6 * 19 * 3_464_988 / _json(COMMITTED_SLICE)["steps_per_s"] / 3600  # not the sum
    slice_rate = _json(COMMITTED_SLICE)["steps_per_s"]
    eager = _json(STEP_SWEEP)["steps"]["fast_eager"]["steps_per_s"]
    jobs = [j for j in printed("iclr_table1") if j["stage"] == "train" and j["cost"].startswith("dp_sinkhorn")]
    experiments = paper.all_experiments()
    recomputed = sum(planned_steps(paper, j["name"]) / (
        eager if experiments[j["name"]].hparams.sanitizer == "param" else slice_rate) / 3600 for j in jobs)
    assert len(jobs) == 6 and sum(j["hours"] for j in jobs) == pytest.approx(recomputed, rel=0.10)


def test_the_w2_sweep_is_priced_with_its_own_seeds(paper, root: Path) -> None:
    """MNIST Fig. 5's sweep trains every (noise, loss) run and step check once per seed of w2_noise.mnist.seeds
    (3: 45 runs), not of the top-level seeds (1)."""
    from dpsynth.config import parse_params

    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    own = raw["w2_noise"]["mnist"]["seeds"]
    assert len(own) == 3 and len(raw["seeds"]) == 1

    def w2(raw_params: dict):  # type: ignore[no-untyped-def]
        p = parse_params(raw_params, scale="paper_cpu")
        return _job(target_budget(p, "reshetova_fig5", root=root), "w2_noise", "mnist")

    three = w2(raw)
    assert "45 runs (3 seed(s))" in three.how
    one = w2({**raw, "w2_noise": {**raw["w2_noise"], "mnist": {**raw["w2_noise"]["mnist"], "seeds": [0]}}})
    assert "15 runs (1 seed(s))" in one.how and three.hours == pytest.approx(3 * one.hours)
    more_top = w2({**raw, "seeds": [0, 1, 2, 3, 4]})  # the top-level seeds are not the sweep's
    assert more_top.hours == pytest.approx(three.hours)


def test_runs_that_need_no_classifier_are_not_charged_for_one(paper, root: Path) -> None:
    """An unconditional generator (the entropic WGAN) is scored without classifiers: its paper-scale evaluate
    job is priced by its own entry, not the classifiers' 2 h."""
    budget = target_budget(paper, "reshetova_fig2", root=root)
    uncond = [j for j in budget.jobs if j.stage == "evaluate" and not paper.all_experiments()[j.name].spec.conditional]
    assert uncond and {j.cost for j in uncond} == {"evaluate_unconditional_paper"}


@pytest.mark.parametrize(("edit", "message"), [
    ("steps_per_s: .inf", r"costs\.dp_sinkhorn_quick_cpu\.steps_per_s: inf is not a number of steps_per_s from"),
    ("steps_per_s: 1.0e-300", r"costs\.dp_sinkhorn_quick_cpu\.steps_per_s: 1e-300 is not a number of steps_per_s"),
    ("steps_per_s: -8.5", r"costs\.dp_sinkhorn_quick_cpu\.steps_per_s: -8.5 is not a number of steps_per_s"),
    ("steps_per_s: .nan", r"costs\.dp_sinkhorn_quick_cpu\.steps_per_s: nan is not a number of steps_per_s"),
    ("steps_per_s: fast", r"costs\.dp_sinkhorn_quick_cpu\.steps_per_s: 'fast' is not a number of steps_per_s"),
])
def test_a_rate_that_is_not_finite_positive_and_in_range_is_one_line(paper, root: Path, edit: str,
                                                                     message: str) -> None:
    """Issue 71 item 6: a cost-book rate is finite, positive and within RANGES, else refused in one line naming
    the file, the key and the value (a `.inf` rate budgeted every job at 0.00 h; 1e-300 printed ~300 digits)."""
    book = root / "benchmarks/costs.yaml"
    text = book.read_text()
    assert "    steps_per_s: 8.5\n" in text
    book.write_text(text.replace("    steps_per_s: 8.5\n", f"    {edit}\n", 1))
    with pytest.raises(ConfigError, match=rf"^{book}: {message}") as err:
        target_budget(paper, "iclr_table1", root=root)
    assert "\n" not in str(err.value) and len(str(err.value)) < 200


def test_a_packed_entry_prices_train_sweep_jobs_only(paper, root: Path) -> None:
    book = root / "benchmarks/costs.yaml"
    text = book.read_text()
    assert text.count("    stage: train_sweep\n") == 1
    book.write_text(text.replace("    stage: train_sweep\n", "    stage: train\n"))
    with pytest.raises(ConfigError, match=r"costs\.dp_sinkhorn_packed_gpu: packed prices a train_sweep job and "
                                          r"nothing else"):
        target_budget(paper, "neurips_table4", root=root)


def test_a_thread_count_that_is_not_one_is_one_line(paper, root: Path) -> None:
    book = root / "benchmarks/costs.yaml"
    book.write_text(book.read_text().replace("    steps_per_s: 8.5\n    threads: 1\n", "    steps_per_s: 8.5\n    threads: two\n"))
    with pytest.raises(ConfigError, match=rf"^{book}: costs\.dp_sinkhorn_quick_cpu\.threads: 'two' is not a thread count"):
        target_budget(paper, "iclr_table1", root=root)


def test_a_measurement_file_with_an_infinite_rate_is_one_line(paper, root: Path) -> None:
    slice_file = root / COMMITTED_SLICE
    slice_file.write_text(slice_file.read_text().replace('"steps_per_s": 257.78', '"steps_per_s": Infinity'))
    with pytest.raises(ConfigError, match=rf"costs\.dp_sinkhorn_graphed_gpu\.key: {COMMITTED_SLICE} steps_per_s: "
                                          r"inf is not a number of steps_per_s"):
        target_budget(paper, "iclr_table1", root=root)


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
        assert f"dp_sinkhorn_graphed_gpu: 257.78 steps/s, measured -- {COMMITTED_SLICE}" in out \
            or f"dp_sinkhorn_packed_gpu: T(K) = " in out or target == "gswgan_table1", out
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
    # the example printout of step 2 and the train_sweep hours step 4 sizes the submission by
    t4 = target_budget(paper, "neurips_table4", root=REPO)
    shown = render_budget(t4).splitlines()
    for line in shown[:4] + [ln for ln in shown if ln.lstrip().startswith(("train_sweep pm_mnist", "train x19",
                                                                          "evaluate x19"))]:
        head = re.sub(r"\s+", " ", line.strip())[:60]
        assert head in re.sub(r"[ \t]+", " ", text), line
    (sweep,) = [j for j in t4.jobs if j.stage == "train_sweep"]
    assert f"The budget's {sweep.hours:.1f} hours for the `train_sweep` job" in text


@pytest.mark.pipeline
def test_snakemake_asks_no_gpu_and_minutes_for_a_job_that_only_releases(tmp_path: Path) -> None:
    """`snakemake -n -p neurips_table4 --config scale=paper` in a fresh clone: the train_sweep job asks for the
    GPU and a day; each cell's own train job, which only releases the checkpoint the sweep's job left, asks for
    no GPU and workflow/resources.yaml's `release` minutes -- what the budget prices it as; a run trained alone
    (ICLR Table 1's dps_mnist) still asks for its GPU."""
    import re

    from tests.pipelines import copy_workflow, run
    from tests.conftest import venv_bin

    d = copy_workflow(tmp_path / "wf")
    release = yaml.safe_load((REPO / "workflow/resources.yaml").read_text())["release"]["paper"]

    def resources(target: str) -> dict[tuple[str, str], dict[str, str]]:
        out = run([venv_bin("snakemake"), "-n", "-p", "--forceall", target, "--cores", "8", "--config",
                   "scale=paper"], d)
        jobs = {}
        for block in re.split(r"\n(?=(?:local)?rule \w+:)", out):
            m = re.match(r"(?:local)?rule (\w+):", block)
            w = re.search(r"wildcards: \w+=(\S+)", block)
            r = re.search(r"resources: (.*)", block)
            if m and w and r:
                jobs[(m.group(1), w.group(1))] = dict(kv.strip().split("=", 1) for kv in r.group(1).split(","))
        return jobs

    jobs = resources("neurips_table4")
    cells = [w for (rule, w) in jobs if rule == "train"]
    assert len(cells) == 19
    assert {(jobs[("train", c)]["gpu"], jobs[("train", c)]["runtime"]) for c in cells} == {
        ("0", str(release["runtime"]))}
    assert (jobs[("train_sweep", "pm_mnist")]["gpu"], jobs[("train_sweep", "pm_mnist")]["runtime"]) == ("1", "1440")
    alone = resources("iclr_table1")[("train", "dps_mnist")]
    assert (alone["gpu"], alone["runtime"]) == ("1", "1440")
