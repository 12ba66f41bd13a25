"""A sweep trained together (`dpsynth train-sweep`, sweeps.<name>.train_together) equals its cells
trained one by one, keeps each cell's own secret noise and accountant, and releases through each
cell's own `dpsynth train`."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
import yaml

from tests.conftest import digits28_smoke_params, run_cli, venv_bin, with_digits28

# slow; one xdist worker for the module: its module-scoped runs are computed once, not once per worker
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("sweep_train")]


def _params(tmp_path: Path, processed: Path, grid: dict, *, steps: int, noise: str, together: bool = True) -> Path:
    """A params.yaml with the sweep ``sw`` over ``grid``, and the session's prepared digits28 in its data root."""
    p = digits28_smoke_params("dps_d28", steps, privacy_noise=noise)
    p["sweeps"]["sw"] = {"base": "dps_d28", "grid": grid, "train_together": together}
    p["pipeline"]["sweeps"] = ["sw"]
    p["data"]["root"] = str(tmp_path / "data")
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(p))
    with_digits28(processed, tmp_path / "data")
    return path


def _dirs(root: Path) -> list[str]:
    return ["--out", str(root / "models"), "--private-out", str(root / "private")]


def _weights(path: Path) -> dict[str, torch.Tensor]:
    from dpsynth.methods.artifacts import load_generator

    G, _ = load_generator(path)
    return {k: v.double() for k, v in G.state_dict().items()}


@pytest.fixture(scope="module")
def together_and_alone(tmp_path_factory: pytest.TempPathFactory, digits28_processed: Path) -> dict:
    """Two cells (m = 0 and m = 1) of one sweep, 3 steps, reproducible noise: trained together and
    released by their own train jobs, and, in other directories, each trained alone."""
    from dpsynth.cli import main

    tmp = tmp_path_factory.mktemp("sweep_train")
    params = _params(tmp, digits28_processed, {"m": [0, 1]}, steps=3, noise="reproducible")
    cells = ["sw-m0", "sw-m1"]
    r = run_cli("train-sweep", "sw", "--params", str(params), *_dirs(tmp / "together"), timeout=600)
    assert r.returncode == 0, r.stderr
    out = {"params": params, "sweep_stdout": r.stdout, "release": {}, "tmp": tmp}
    for cell in cells:
        rel = run_cli("train", cell, "--params", str(params), "--no-progress", *_dirs(tmp / "together"))
        assert rel.returncode == 0, rel.stderr
        out["release"][cell] = rel
        # alone: `dpsynth train` in this process (the same parser and stage; no job start-up to pay)
        assert main(["train", cell, "--params", str(params), "--no-progress", *_dirs(tmp / "alone")]) == 0, cell
    return out


@pytest.mark.parametrize("cell", ["sw-m0", "sw-m1"])
def test_a_cell_trained_together_equals_the_cell_trained_alone(together_and_alone: dict, cell: str) -> None:
    """Same weights, same accountant, same log. Tolerance, measured: float32 stacked and single
    kernels sum in other orders and Adam turns a near-zero gradient's rounding into a step of up to
    lr, so after 3 steps the two exact paths differ by up to 5.0e-5 (0.04 after 30 steps). With the
    mutation "the members share one sampling and noise stream" the difference was 0.032 (cell m0)
    and 0.047 (m1). atol 1e-3 sits 20x above the first and 30x below the second. (The step itself
    is equal to 1e-9 in float64: tests/test_batched_sweep.py.)"""
    tmp = together_and_alone["tmp"]
    a = _weights(tmp / "together" / "models" / cell / "generator.pt")
    b = _weights(tmp / "alone" / "models" / cell / "generator.pt")
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-3, msg=f"{cell}: {k}")
    pa = json.loads((tmp / "together" / "models" / cell / "privacy.json").read_text())
    pb = json.loads((tmp / "alone" / "models" / cell / "privacy.json").read_text())
    assert pa["epsilon"] == pb["epsilon"] and pa["steps"] == pb["steps"] == 3 and pa["sigma"] == pb["sigma"]
    logs = []
    for where in ("together", "alone"):
        with open(tmp / where / "models" / cell / "train_log.csv", newline="") as fh:
            logs.append([(r["step"], r["epsilon"]) for r in csv.DictReader(fh)])
    assert logs[0] == logs[1] and logs[0][-1][0] == "3"


def test_each_cell_is_released_by_its_own_train_job_without_training(together_and_alone: dict) -> None:
    tmp = together_and_alone["tmp"]
    for cell, rel in together_and_alone["release"].items():
        assert "trained by the batched sweep" in rel.stderr
        summary = json.loads((tmp / "together" / "models" / cell / "train_summary.json").read_text())
        assert summary["trained_together"] == "group0" and summary["steps"] == 3
    marker = json.loads((tmp / "together" / "private" / "sweeps" / "sw" / "group.json").read_text())
    assert marker == {"sweep": "sw", "mode": "together", "trained_together": ["sw-m0", "sw-m1"]}
    # released: a second train is a no-op; the group kept no checkpoint of its own, only the cells'
    again = run_cli("train", "sw-m0", "--params", str(together_and_alone["params"]), "--no-progress",
                    *_dirs(tmp / "together"))
    assert again.returncode == 0 and again.stdout.startswith("train sw-m0: already done"), again.stdout
    assert not (tmp / "together" / "private" / "sweep_groups").exists()


def test_secret_noise_is_drawn_per_run_and_cells_of_two_p_values_form_two_groups(tmp_path: Path,
                                                                                 digits28_processed: Path) -> None:
    """Secret mode: the same sweep trained twice gives different generators (the sampling and the
    noise come from OS entropy, not the seed); a p grid trains as one group per p. Fails if the
    batched path fell back to seeded noise. The generators compared are the cells' finished
    checkpoints, which each cell's `dpsynth train` releases as they are (the fixture above checks
    that release); releasing them here too cost four more CLI jobs."""
    params = _params(tmp_path, digits28_processed, {"p": [0.2, 0.5]}, steps=4, noise="secret")
    runs = []
    for k in range(2):
        r = run_cli("train-sweep", "sw", "--params", str(params), "--no-progress", "--json",
                    *_dirs(tmp_path / f"run{k}"), timeout=600)
        assert r.returncode == 0, r.stderr
        groups = {v["trained_together"] for v in json.loads(r.stdout)["cells"].values()}
        assert groups == {"group0", "group1"}
        finished = {}
        for cell in ("sw-p0.2", "sw-p0.5"):
            state = torch.load(tmp_path / f"run{k}" / "private" / "runs" / cell / "checkpoint.pt", weights_only=False)
            assert state["done"] and state["step"] == 4, (cell, state["step"])
            finished[cell] = state["generator"]
        runs.append(finished)
    for cell in runs[0]:
        assert any(not torch.equal(runs[0][cell][k], runs[1][cell][k]) for k in runs[0][cell]), cell


def test_without_train_together_the_markers_say_alone_and_nothing_trains(tmp_path: Path,
                                                                        digits28_processed: Path) -> None:
    params = _params(tmp_path, digits28_processed, {"m": [0, 1]}, steps=4, noise="secret", together=False)
    r = run_cli("train-sweep", "sw", "--params", str(params), *_dirs(tmp_path))
    assert r.returncode == 0, r.stderr
    marker = json.loads((tmp_path / "private" / "sweeps" / "sw" / "group.json").read_text())
    assert marker == {"sweep": "sw", "mode": "alone", "trained_together": []}
    assert not (tmp_path / "private" / "runs").exists() and not (tmp_path / "models").exists()
    bad = run_cli("train-sweep", "sww", "--params", str(params), *_dirs(tmp_path))
    assert bad.returncode != 0 and "sweeps.sww: no such sweep" in bad.stderr and "Traceback" not in bad.stderr


def test_snakemake_trains_a_together_sweep_in_one_job_and_adds_a_cell_alone(tmp_path: Path) -> None:
    """The real Snakemake pipeline with sweeps.sw.train_together: one train_sweep job trains both
    cells, each cell's train job releases its own outputs from the checkpoint; afterwards
    nothing is planned, and one more m value plans only the new cell's train job (it trains
    alone): neither the sweep job nor the finished cells re-run."""
    from tests.pipelines import copy_workflow, run
    from tests.test_workflow_sync import dry_run_plan

    def patch(p: dict, ms: list[int]) -> None:
        small = digits28_smoke_params("dps_d28", 3)
        p.update({k: small[k] for k in ("scale", "datasets", "pipeline", "w2_noise", "evaluation", "scales")})
        p["experiments"]["dps_d28"] = small["experiments"]["dps_d28"]
        p["sweeps"]["sw"] = {"base": "dps_d28", "grid": {"m": ms}, "train_together": True}
        p["pipeline"]["sweeps"] = ["sw"]

    d = copy_workflow(tmp_path / "w", lambda p: patch(p, [0, 1]))
    cells = ["sw-m0", "sw-m1"]
    targets = [f"models/{c}/generator.pt" for c in cells]
    run([venv_bin("snakemake"), "--cores", "2", *targets], d, timeout=900)
    assert "train-sweep sw: step" not in (d / "logs/train_sweep/sw.log").read_text()  # --no-progress
    for c in cells:
        summary = json.loads((d / f"models/{c}/train_summary.json").read_text())
        assert summary["trained_together"] == "group0" and summary["steps"] == 3
        assert "trained by the batched sweep" in (d / f"logs/train/{c}.log").read_text()
    assert dry_run_plan(d, *targets) == []
    p = yaml.safe_load((d / "params.yaml").read_text())
    p["sweeps"]["sw"]["grid"]["m"] = [0, 1, 3]
    (d / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    plan = {(rule, w) for rule, w, _ in dry_run_plan(d, *targets, "models/sw-m3/generator.pt")}
    assert plan == {("train", "sw-m3")}


def test_a_stopped_group_resumes_to_the_same_cells(together_and_alone: dict, tmp_path: Path) -> None:
    """A group stopped after 2 of 3 steps (as a killed job: each cell's own checkpoint written at step 2,
    none finished, no group checkpoint) and run again ends with the same cell checkpoints as the
    uninterrupted group: weights, Adam's moments, accountant and log rows (reproducible noise, so the
    replay is exact)."""
    from dpsynth.methods.dp_sinkhorn.together import cell_done, resume_step, train_together
    from dpsynth.stages.train import build_context

    params = together_and_alone["params"]

    def contexts(stop: int | None) -> list:
        return [build_context(c, params_file=str(params), out=str(tmp_path / "models"),
                              private_out=str(tmp_path / "private"), device="cpu", progress=False,
                              max_steps_this_run=stop) for c in ("sw-m0", "sw-m1")]

    first = train_together(contexts(2), "group0")
    assert [s["finished"] for s in first] == [False, False]
    assert [resume_step(c) for c in contexts(None)] == [2, 2]  # each cell's own checkpoint, unfinished
    assert not any(cell_done(c) for c in contexts(None))
    assert not (tmp_path / "private" / "sweep_groups").exists()
    # a member's checkpoint is its own run's: `dpsynth train` resumes it alone, through the one loop
    import shutil

    from dpsynth.cli import main

    shutil.copytree(tmp_path / "private", tmp_path / "copy" / "private")
    assert main(["train", "sw-m1", "--params", str(params), "--no-progress", "--json",
                 *_dirs(tmp_path / "copy")]) == 0
    alone = json.loads((tmp_path / "copy" / "models" / "sw-m1" / "train_summary.json").read_text())
    assert alone["resumed_from"] == 2 and alone["steps_this_run"] == 1 and alone["steps"] == 3
    ref_models = together_and_alone["tmp"] / "together" / "models" / "sw-m1"
    a, b = _weights(tmp_path / "copy" / "models" / "sw-m1" / "generator.pt"), _weights(ref_models / "generator.pt")
    for k in a:  # one step alone after two together: the together/alone tolerance above
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=1e-3, msg=k)
    second = train_together(contexts(None), "group0")
    assert [s["finished"] for s in second] == [True, True]
    ref_root = together_and_alone["tmp"] / "together" / "private" / "runs"
    for c in contexts(None):
        got = torch.load(c.checkpoint_path, weights_only=False)
        # the reference cells were released since: compare with what they were trained to
        ref = torch.load(ref_root / c.name / "checkpoint.pt", weights_only=False)
        assert got["step"] == ref["step"] == 3
        for k, v in ref["generator"].items():
            assert torch.equal(got["generator"][k], v), (c.name, k)
        for j, st in ref["optimizer"]["state"].items():  # the member's Adam, resumed from its own slice
            assert all(torch.equal(got["optimizer"]["state"][j][k], v) for k, v in st.items()), (c.name, j)
        assert got["guard"] == ref["guard"]
        assert [r["step"] for r in got["log_rows"]] == [r["step"] for r in ref["log_rows"]]
        # the member's checkpoint is its run's (the one loop's RunRecord): the keys of the checkpoint its
        # own `dpsynth train` finished above from the copy, plus the group's mark
        assert got["trained_together"] == "group0"
        if c.name == "sw-m1":
            own = torch.load(tmp_path / "copy" / c.checkpoint_path.relative_to(tmp_path), weights_only=False)
            assert own["done"] and set(got) - {"trained_together"} == set(own)


def test_cells_on_different_records_never_share_a_group(tmp_path: Path, digits28_processed: Path) -> None:
    """A seed sweep under a train_subset trains each seed on another subset: such cells form one
    group each (a shared batched sweep would train both on the first cell's records)."""
    from dpsynth.methods.dp_sinkhorn.together import group_by_shape
    from dpsynth.stages.train import build_context

    p = digits28_smoke_params("dps_d28", 3)
    p["scales"]["smoke"]["train_subset"] = 500
    p["sweeps"]["sw"] = {"base": "dps_d28", "grid": {"seed": [0, 1], "m": [0, 1]}, "train_together": True}
    p["pipeline"]["sweeps"] = ["sw"]
    p["data"]["root"] = str(tmp_path / "data")
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(p))
    with_digits28(digits28_processed, tmp_path / "data")
    cells = ["sw-m0-seed0", "sw-m0-seed1", "sw-m1-seed0", "sw-m1-seed1"]
    ctxs = [build_context(c, params_file=str(params), out=str(tmp_path / "m"), private_out=str(tmp_path / "p"),
                          device="cpu", progress=False) for c in cells]
    assert group_by_shape(ctxs) == [[0, 2], [1, 3]]  # the m values share; the seeds do not


def test_an_optimizer_by_learning_rate_sweep_is_one_group(tmp_path: Path, digits28_processed: Path) -> None:
    """ICLR Table 4's kind of grid (optimizer x lr) trains as ONE batched sweep (each cell with its own
    optimizer over its own parameters); a batch-size grid cannot (the batch fixes the tensors' shape)."""
    from dpsynth.methods.dp_sinkhorn.together import group_by_shape
    from dpsynth.stages.train import build_context

    p = digits28_smoke_params("dps_d28", 3)
    p["sweeps"]["ol"] = {"base": "dps_d28", "grid": {"optimizer": ["adam", "rmsprop", "sgd"], "lr": [1.0e-4, 1.0e-3]},
                         "train_together": True}
    p["sweeps"]["bs"] = {"base": "dps_d28", "grid": {"batch_size": [20, 40]}, "train_together": True}
    p["pipeline"]["sweeps"] = ["ol", "bs"]
    p["data"]["root"] = str(tmp_path / "data")
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(p))
    with_digits28(digits28_processed, tmp_path / "data")

    def groups(sweep: str, cells: list[str]) -> list[list[int]]:
        return group_by_shape([build_context(c, params_file=str(params), out=str(tmp_path / "m"),
                                             private_out=str(tmp_path / "p"), device="cpu", progress=False)
                               for c in cells])

    assert groups("ol", [f"ol-lr{lr}-optimizer{o}" for o in ("adam", "rmsprop", "sgd") for lr in ("0.0001", "0.001")]) \
        == [[0, 1, 2, 3, 4, 5]]
    assert groups("bs", ["bs-batch_size20", "bs-batch_size40"]) == [[0], [1]]


def test_cells_with_their_own_step_counts_train_as_one_group(tmp_path: Path, digits28_processed: Path) -> None:
    """A sigma sweep at a step budget gives each cell its own step count (budget x N(cell) / N(base)):
    the cells still form ONE group, which steps to the first member's end, finishes it there and goes on
    with the rest from their checkpoints. Each cell ends at its own step count with the weights it gets
    trained alone (reproducible noise; the together/alone tolerance of the test above) and its accountant's
    steps. Before, each such cell was a group of one (ICLR Table 5's batch x sigma grid could not pack)."""
    from dpsynth.cli import main
    from dpsynth.methods.dp_sinkhorn.together import group_by_shape, train_together
    from dpsynth.stages.train import build_context

    params = _params(tmp_path, digits28_processed, {"sigma": [0.8, 1.6]}, steps=3, noise="reproducible")
    cells = ["sw-sigma0.8", "sw-sigma1.6"]

    def contexts(root: str) -> list:
        return [build_context(c, params_file=str(params), out=str(tmp_path / root / "models"),
                              private_out=str(tmp_path / root / "private"), device="cpu", progress=False)
                for c in cells]

    assert group_by_shape(contexts("together")) == [[0, 1]]
    out = train_together(contexts("together"), "group0")
    own = [s["steps"] for s in out]
    assert all(s["finished"] for s in out) and own[0] < own[1], out  # the larger sigma buys more steps
    for cell, steps in zip(cells, own):
        assert main(["train", cell, "--params", str(params), "--no-progress", *_dirs(tmp_path / "alone")]) == 0
        alone = json.loads((tmp_path / "alone" / "models" / cell / "privacy.json").read_text())
        assert alone["steps"] == steps, (cell, alone["steps"], steps)
        got = torch.load(tmp_path / "together" / "private" / "runs" / cell / "checkpoint.pt", weights_only=False)
        assert got["done"] and got["step"] == got["total_steps"] == steps
        ref = _weights(tmp_path / "alone" / "models" / cell / "generator.pt")
        for k, v in ref.items():
            torch.testing.assert_close(got["generator"][k].double(), v, rtol=0, atol=1e-3, msg=f"{cell}: {k}")
