"""`dpsynth --help` is fast, `dpsynth experiments list` lists every experiment, typos get a did-you-mean.

Start-up is guarded by what gets imported, not by a stopwatch: building the parser (every
stage's ``register``) must not import torch, numpy, pydantic, dp_accounting and the like. A
stage module that imports one of them at module level again makes every ``dpsynth`` command
(and every Snakemake/DVC job's start) seconds slower; the import check names it at once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

PARAMS = str(REPO / "params.yaml")

#: Modules a parser build must leave unimported (each costs 0.1 s to seconds to import).
HEAVY = ("torch", "numpy", "pydantic", "dp_accounting", "scipy", "pandas", "yaml", "matplotlib",
         "dpsynth.config", "dpsynth.data", "dpsynth.privacy", "dpsynth.methods", "dpsynth.evaluate", "dpsynth.io")

_IMPORTS_OF_A_PARSER_BUILD = f"""
import contextlib, io, json, sys
import dpsynth.cli as cli
parser = cli.build_parser()
for stage in cli._STAGES:  # every stage's --help too: argparse only, no handler runs
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        parser.parse_args([stage, "--help"])
heavy = {HEAVY!r}
print(json.dumps([m for m in heavy if m in sys.modules]))  # a package is there once any of it is
"""


def test_building_the_parser_imports_nothing_heavy() -> None:
    res = subprocess.run([sys.executable, "-c", _IMPORTS_OF_A_PARSER_BUILD], capture_output=True, text=True,
                         timeout=60, cwd=REPO)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == [], "imported at parser build (move into the handler): " + res.stdout


def test_help_is_fast() -> None:
    t0 = time.perf_counter()
    res = run_cli("--help", timeout=60)
    wall = time.perf_counter() - t0
    assert res.returncode == 0, res.stderr
    assert all(stage in res.stdout for stage in ("train", "experiments", "privacy", "bench"))
    # ~0.1 s here against ~4.5 s when the stages imported torch at module level. The bound is
    # loose on purpose: CI machines are shared and a cold interpreter start can take a second or
    # two under contention; the import check above is the precise guard.
    assert wall < 3.0, f"`dpsynth --help` took {wall:.2f} s"


def test_privacy_sampling_choices_match_the_accountant() -> None:
    """The privacy stage spells the accountant's samplings out so that --help does not import it."""
    from dpsynth.cli.privacy import SAMPLINGS
    from dpsynth.privacy.accounting import SAMPLINGS as ACCOUNTANT

    assert SAMPLINGS == ACCOUNTANT


def test_privacy_method_choices_are_the_registrys_calculators() -> None:
    """`dpsynth privacy --method` offers exactly the mechanisms that answer its questions, read from the
    registry when argparse asks (a mechanism added with a calculator shows with no edit: test_privacy_mechanisms),
    not when the parser is built (the import check above)."""
    from dpsynth.cli.privacy import METHODS
    from dpsynth.privacy.mechanisms import calculators

    assert tuple(METHODS) == tuple(calculators()) == ("dp_sgd", "gs_wgan")
    assert "gs_wgan" in METHODS and "gs_wgna" not in METHODS and len(METHODS) == 2


# --------------------------------------------------------------------------- experiments list


def test_experiments_list_shows_named_experiments_and_sweep_cells() -> None:
    res = run_cli("experiments", "list", "--params", PARAMS, timeout=60)
    assert res.returncode == 0, res.stderr
    rows = {line.split()[0]: line.split() for line in res.stdout.splitlines()[1:]}
    assert rows["dps_mnist"][1:4] == ["dp_sinkhorn", "mnist", "target"]
    assert rows["dps_celeba_dcgan"][3] == "-"  # configured, not a pipeline target
    assert rows["pm_mnist_quick-p0.2-m1"][1:] == ["dp_sinkhorn", "mnist", "target", "pm_mnist_quick"]  # a sweep cell
    assert rows["pm_mnist-p0.5-m3"][3:] == ["-", "pm_mnist"]


def test_experiments_list_json_is_every_experiment() -> None:
    from dpsynth.config import load_params

    res = run_cli("experiments", "list", "--params", PARAMS, "--json", timeout=60)
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    params = load_params(PARAMS)
    assert [r["name"] for r in rows] == list(params.all_experiments())
    assert {r["name"] for r in rows if r["pipeline_target"]} == set(params.pipeline_targets())
    by_name = {r["name"]: r for r in rows}
    assert by_name["dps_mnist"] == {"name": "dps_mnist", "method": "dp_sinkhorn", "dataset": "mnist",
                                    "pipeline_target": True, "sweep": None}
    assert by_name["pm_mnist-p0.2-m1"]["sweep"] == "pm_mnist"


def test_experiments_list_with_a_bad_params_file_names_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "params.yaml"
    bad.write_text((REPO / "params.yaml").read_text() + "\nexperimnets: {}\n")
    res = run_cli("experiments", "list", "--params", str(bad), timeout=60)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert f"{bad}: experimnets: unknown key" in res.stderr
    missing = run_cli("experiments", "list", "--params", str(tmp_path / "nope.yaml"), timeout=60)
    assert missing.returncode == 2 and "nope.yaml: no such parameters file" in missing.stderr


# --------------------------------------------------------------------------- did you mean


@pytest.mark.parametrize("stage", ["train", "sample", "evaluate"])
def test_misspelt_experiment_suggests_the_closest(tmp_path: Path, stage: str) -> None:
    res = run_cli(stage, "dps_mnsit", "--params", PARAMS, cwd=tmp_path, timeout=120)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    assert (f"unknown experiment 'dps_mnsit' in {PARAMS}; did you mean 'dps_mnist'? "
            "(dpsynth experiments list shows all)") in res.stderr
    assert list(tmp_path.iterdir()) == []  # failed before any work: no models/, private/, results/


def test_far_off_experiment_name_gets_no_suggestion(tmp_path: Path) -> None:
    res = run_cli("sample", "zzzz", "--params", PARAMS, cwd=tmp_path, timeout=60)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "unknown experiment 'zzzz'" in res.stderr and "did you mean" not in res.stderr


def test_misspelt_stage_and_choice_suggest_the_closest() -> None:
    res = run_cli("trian", "dps_mnist", timeout=60)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "invalid choice: 'trian'" in res.stderr and "did you mean 'train'?" in res.stderr
    res = run_cli("experiments", "list", "--scale", "quik", timeout=60)
    assert res.returncode == 2 and "did you mean 'quick'?" in res.stderr


def test_suggest_choice_leaves_other_errors_alone() -> None:
    from dpsynth.cli import suggest_choice

    assert suggest_choice("the following arguments are required: experiment") == \
        "the following arguments are required: experiment"
    msg = "argument <stage>: invalid choice: 'xyzzy' (choose from 'train', 'sample')"
    assert suggest_choice(msg) == msg
    assert suggest_choice("argument <stage>: invalid choice: 'sampel' (choose from 'train', 'sample')").endswith(
        "; did you mean 'sample'?")
    # the form later Pythons print (choices not quoted)
    assert suggest_choice("argument x: invalid choice: 'sampel' (choose from train, sample)").endswith(
        "; did you mean 'sample'?")
