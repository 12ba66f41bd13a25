"""What ``dvc repro`` will run, before it runs (``dpsynth workflow plan``).

DVC decides by content: a stage runs when a dependency's hash differs from dvc.lock, and what follows
it runs when its outputs then change. Two things hide that plan from DVC's own commands:

- what a job reads from params.yaml reaches it through its settings file (``settings.py``), which the
  ``settings`` stage writes: right after an edit ``dvc status`` names ``settings`` alone, and a new sweep
  cell's stages fail ``dvc repro --dry`` ("No such file": its settings file is not written yet);
- ``dvc repro --dry`` hashes the inputs of every stage it walks, so it stops at the first stage whose
  input an earlier stage has not made yet (a new cell's model, everything on a fresh clone;
  treeverse/dvc#9021, still so in DVC 3.67).

So the plan is computed as DVC would find it once each stage before it had run: first the settings
files are brought up to date (what the ``settings`` stage does, with the same function; a file whose
text did not change is left alone, so nothing else moves), then DVC's own ``status`` gives the stages
whose recorded inputs or outputs differ, and DVC's stage graph adds every stage after them. Whether a
re-run stage's outputs really change is known only when it has run (DVC then skips what follows an
unchanged output), so the plan can name a stage ``dvc repro`` ends up skipping, never miss one.
tests/test_dvc.py holds it, edit by edit, to the jobs ``snakemake -n`` plans.

A build target (one per paper table: ``config.targets``) is a list of stages here: those that write its
results, whose plan is ``dvc repro <them>`` -- they and every stage they depend on, nothing else. DVC has stages
for a target's runs once ``pipeline.tables`` lists it (dvc.yaml is generated from params.yaml).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpsynth.config import Params, table_targets
from dpsynth.errors import DpsynthError
from dpsynth.workflow.settings import write_settings

SETTINGS_STAGE = "settings"


@dataclass
class Plan:
    """The stages ``dvc repro`` will run, in the order it runs them, and why each."""

    settings_written: list[str]  # settings files whose text changed (written now)
    stages: list[str] = field(default_factory=list)  # in run order
    reasons: dict[str, str] = field(default_factory=dict)  # stage -> why it runs
    changed: list[str] = field(default_factory=list)  # those DVC itself finds changed (the rest follow them)
    repro: list[str] = field(default_factory=list)  # a build target's stages: `dvc repro <these>` builds it


def _reason(changes: list[Any]) -> str:
    """One line from a stage's ``dvc status`` entry (changed deps / outs / command)."""
    parts = []
    for change in changes:
        if isinstance(change, str):  # "changed command", "always changed"
            parts.append(change)
            continue
        for kind, what in change.items():
            names = list(what) if isinstance(what, dict) else [str(what)]
            shown = ", ".join(names[:2]) + (f" and {len(names) - 2} more" if len(names) > 2 else "")
            parts.append(f"{kind}: {shown}")
    return "; ".join(parts) or "changed"


def ran_stages(lock: Path) -> set[str]:
    """The stages ``lock`` (dvc.lock) records as run; empty when there is none. A damaged file -- not
    UTF-8, not YAML, nested past the YAML bound, not a mapping of ``stages`` -- is one line naming it
    (``DpsynthError``), before DVC reads it or any settings file is written: DVC's own reading of the lock
    happens later and its errors are caught, but this one came first and was a traceback."""
    import yaml

    from dpsynth.config.loader import yaml_depth_problem

    if not lock.exists():
        return set()
    fix = "restore it (git checkout dvc.lock) or remove it (dvc repro then runs every stage)"
    try:
        text = lock.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DpsynthError(f"{lock}: not UTF-8 text (byte {exc.start}): DVC's record of the last run is "
                           f"damaged; {fix}") from None
    except OSError as exc:
        raise DpsynthError(f"{lock}: cannot be read ({exc.strerror}); {fix}") from None
    deep = yaml_depth_problem(text)
    if deep is not None:
        raise DpsynthError(f"{lock}: {deep}; {fix}")
    try:
        raw = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = getattr(exc, "problem", None) or type(exc).__name__
        raise DpsynthError(f"{lock}: not valid YAML{where} ({what}); {fix}") from None
    if raw is None:
        return set()
    stages = raw.get("stages", {}) if isinstance(raw, dict) else None
    if not isinstance(stages, dict):
        got = type(raw).__name__ if not isinstance(raw, dict) else f"'stages' a {type(stages).__name__}"
        raise DpsynthError(f"{lock}: expected a mapping with a 'stages' mapping, got {got}; {fix}")
    return {str(name) for name in stages}


def target_outputs(params: Params, target: str) -> list[str]:
    """The files build target ``target`` (``config.targets``) is made of: its runs' metrics, its real-data rows,
    its W2 sweeps -- what its Snakemake rule waits for, less the files those jobs also write."""
    t = table_targets(params)[target]
    return [*(f"results/runs/{run}/metrics.json" for run in t.runs(params)),
            *(f"results/real/{dataset}/metrics.json" for dataset in t.real),
            *(f"results/w2_noise/{dataset}.csv" for dataset in t.w2_noise)]


def _target_stages(graph: Any, params: Params, target: str) -> list[str]:
    """The DVC stages that write ``target``'s files (``target_outputs``): a whole foreach/matrix group by its
    name where the target needs every item of it, else ``group@item``. A file no stage writes is one line
    saying how to declare it."""
    writer = {str(out.def_path): stage for stage in graph.nodes for out in stage.outs}
    wanted = target_outputs(params, target)
    missing = [f for f in wanted if f not in writer]
    if missing:
        raise DpsynthError(f"dvc.yaml declares no stage for {len(missing)} of the {len(wanted)} results of target "
                           f"{target} (e.g. {missing[0]}): add {target} to pipeline.tables in params.yaml, run "
                           "`dpsynth workflow dvc`, then plan again")
    stages = list(dict.fromkeys(writer[f] for f in wanted))
    groups: dict[str, list[Any]] = {}
    for stage in graph.nodes:
        groups.setdefault(stage.addressing.split("@")[0], []).append(stage)
    out: list[str] = []
    for stage in stages:
        group = stage.addressing.split("@")[0]
        whole = "@" in stage.addressing and all(s in stages for s in groups[group])
        out.append(group if whole else stage.addressing)
    return list(dict.fromkeys(out))


def dvc_plan(params: Params, root: Path = Path("."), target: str | None = None) -> Plan:
    """The plan of ``dvc repro`` in the DVC project at ``root`` (module docstring); with ``target`` (a build
    target, ``config.targets``), the plan of ``dvc repro <its stages>``: those stages and what they depend on
    (``Plan.repro`` names them). Writes the settings files that changed, as the ``settings`` stage would;
    nothing else is written or run."""
    import networkx as nx
    from dvc.repo import Repo

    ran = ran_stages(root / "dvc.lock")
    with Repo(str(root)) as repo:  # first: outside a DVC project nothing is written
        graph = repo.index.graph  # an edge goes from a stage to a stage it depends on
        needed = None
        if target is not None:
            repro = _target_stages(graph, params, target)
            tops = [s for s in graph.nodes if s.addressing in repro or s.addressing.split("@")[0] in repro]
            needed = set(tops).union(*(nx.descendants(graph, s) for s in tops))
        plan = Plan(settings_written=write_settings(params, root))
        if target is not None:
            plan.repro = repro
        status = repo.status()
        by_name = {stage.addressing: stage for stage in graph.nodes}
        changed = {name: changes for name, changes in status.items() if name in by_name}
        # The settings stage's effect is already in the files just written: what depends on a settings
        # file runs only if its own file changed, which status has just seen. Everything else propagates.
        todo = [by_name[name] for name in changed if name != SETTINGS_STAGE]
        after: dict[Any, str] = {}
        while todo:
            stage = todo.pop()
            for dependent in graph.predecessors(stage):
                if dependent.addressing not in changed and dependent not in after:
                    after[dependent] = stage.addressing
                    todo.append(dependent)
        for stage in reversed(list(nx.topological_sort(graph))):
            name = stage.addressing
            if needed is not None and stage not in needed:
                continue
            if name in changed:
                plan.stages.append(name)
                plan.changed.append(name)
                plan.reasons[name] = _reason(changed[name]) if name in ran else "new: not in dvc.lock"
            elif stage in after:
                plan.stages.append(name)
                plan.reasons[name] = f"after {after[stage]}"
    return plan
