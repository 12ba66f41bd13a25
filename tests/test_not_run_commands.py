"""Every command the report's not-run list prints runs what its sentence says (issue 70 item 1;
``dpsynth.report.not_run``): the list of the quick page `make run` builds, each command dry-run in a fresh clone of
the workflow (``snakemake -n --forceall``) as a reader would paste it.

- ``snakemake <target> ...``: it plans exactly the table's runs (train, sample, evaluate: the target catalogue's,
  `dpsynth workflow targets`), its W2 sweeps and real-data rows -- the count and the names the sentence gives;
  a scale other than the page's comes with the reason the page's cannot build it.
- ``make <target>``: the Makefile has it (`make -n` prints its recipe), and the Snakemake command of that recipe
  plans the part of the table's runs and W2 sweeps the sentence says it runs, no more and no fewer.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dpsynth.config import load_params, table_targets
from dpsynth.report.not_run import how_to_run, pipeline_command
from tests.conftest import REPO
from tests.pipelines import copy_workflow, run

pytestmark = [pytest.mark.pipeline, pytest.mark.timeout(1800)]

SCALE = "quick"  # the page `make run` builds


@pytest.fixture(scope="module")
def params():  # type: ignore[no-untyped-def]
    return load_params(REPO / "params.yaml", scale=SCALE)


@pytest.fixture(scope="module")
def lines(params) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """Table -> its not-run sentence, as the report stage writes it in the project's root (beside the Makefile)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(REPO)
        return {name: how_to_run(params, name) for name in params.tables if params.tables[name].kind != "privacy"}


@pytest.fixture(scope="module")
def workflow(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh clone's workflow: nothing prepared, nothing run."""
    return copy_workflow(tmp_path_factory.mktemp("not_run"))


_PLANS: dict[tuple[str, ...], dict[str, set[str]]] = {}


def _plan(workflow: Path, args: list[str]) -> dict[str, set[str]]:
    """rule -> the wildcard values of its jobs in ``snakemake -n --forceall <args>`` (one dry run per command)."""
    from tests.test_workflow_sync import dry_run_plan

    key = tuple(args)
    if key not in _PLANS:
        plan: dict[str, set[str]] = {}
        for rule, wildcard, _ in dry_run_plan(workflow, "--forceall", *args):
            plan.setdefault(rule, set()).add(wildcard)
        _PLANS[key] = plan
    return _PLANS[key]


def _claim(clause: str) -> tuple[int, list[str], list[str], list[str]]:
    """(how many runs, the names it shows, W2 sweeps' datasets, real-data rows' datasets) a clause names."""
    m = re.search(r"(\d+) runs? \(([^)]*)\)", clause)
    count, shown = (int(m.group(1)), re.sub(r" and \d+ more$", "", m.group(2)).split(", ")) if m else (0, [])
    return (count, shown, re.findall(r"W2-vs-noise sweep on (\w+)", clause),
            re.findall(r"real-data row of (\w+)", clause))


def test_each_tables_build_command_plans_exactly_its_runs(params, lines, workflow: Path) -> None:  # type: ignore[no-untyped-def]
    targets = table_targets(params)
    assert len(lines) >= 19  # every table but the privacy ones
    for name, line in lines.items():
        first = line.split("; `make ")[0]
        m = re.match(r"`(snakemake (\w+) --cores all --config scale=(\w+))` runs exactly its ", first)
        assert m, (name, line)
        command, target, scale = m.groups()
        assert name in targets[target].tables, (name, target)
        if scale != SCALE:  # the sentence says why the page's scale does not build it
            assert f"(scale {scale}: at {SCALE}, " in first, first
        plan = _plan(workflow, command.split()[1:])
        runs = set(targets[target].runs(params))
        count, shown, w2, real = _claim(first)
        for stage in ("train", "sample", "evaluate"):
            assert plan.get(stage, set()) == runs, (command, stage, sorted(plan.get(stage, set()) ^ runs))
        assert count == len(runs) and set(shown) <= runs and len(shown) == min(count, 4), first
        assert plan.get("w2_noise", set()) == set(w2) == set(targets[target].w2_noise), command
        assert plan.get("evaluate_real", set()) == set(real) == set(targets[target].real), command
        assert plan[target] == {""}  # the target's own job: it renders the table
    # the commands the issue found wrong: each table of its own target, and MNIST Fig. 5 at the scale it runs at
    assert lines["celeba_iclr"].startswith("`snakemake iclr_table2_3 --cores all --config scale=quick`")
    fig5 = re.match(r"`snakemake reshetova_fig5 --cores all --config scale=(\w+)`", lines["local_privacy_w2_mnist"])
    assert fig5 and fig5.group(1) in (params.w2_noise["mnist"].scales or []), lines["local_privacy_w2_mnist"]
    assert "`make reshetova-mnist`" in lines["local_privacy_w2_mnist"]


def test_each_make_target_it_names_exists_and_runs_what_it_says(params, lines, workflow: Path) -> None:  # type: ignore[no-untyped-def]
    targets = table_targets(params)
    clauses = [(name, "`make " + c) for name, line in lines.items() for c in line.split("; `make ")[1:]]
    named = {re.match(r"`make ([\w-]+)`", c).group(1) for _, c in clauses}  # type: ignore[union-attr]
    assert named == {"run", "reshetova-mnist"}
    recipes = {}
    for make in named:
        out = run(["make", "-n", make], REPO)  # prints the recipe, runs nothing; fails for a target not there
        commands = [ln.split() for ln in out.splitlines() if re.search(r"\bsnakemake\b", ln) and "--report" not in ln]
        assert len(commands) == 1 and commands[0][0].endswith("snakemake"), out
        recipes[make] = commands[0][1:]
    assert recipes["run"] == ["--cores", "all", "--config", f"scale={SCALE}"]
    # the pipeline's command the privacy tables' and training figures' lines print is `make run`'s
    assert pipeline_command(SCALE).split() == ["snakemake", *recipes["run"]]
    assert f"`{pipeline_command(SCALE)}`" in how_to_run(params, "privacy")
    for name, clause in clauses:
        make = re.match(r"`make ([\w-]+)`", clause).group(1)  # type: ignore[union-attr]
        plan = _plan(workflow, recipes[make])
        target = next(t for t in targets.values() if name in t.tables)
        count, shown, w2, _ = _claim(clause)
        mine = plan.get("train", set()) & set(target.runs(params))
        assert count == len(mine) and set(shown) <= mine, (make, name, clause, sorted(mine))
        assert set(w2) == plan.get("w2_noise", set()) & set(target.w2_noise), (make, name, clause)
    fig11 = next(c for n, c in clauses if n == "reshetova_fig11_mnist")
    assert fig11.startswith("`make reshetova-mnist`") and "21 runs" in fig11  # every run of MNIST Fig. 11
