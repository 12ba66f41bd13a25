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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpsynth.config import Params
from dpsynth.workflow.settings import write_settings

SETTINGS_STAGE = "settings"


@dataclass
class Plan:
    """The stages ``dvc repro`` will run, in the order it runs them, and why each."""

    settings_written: list[str]  # settings files whose text changed (written now)
    stages: list[str] = field(default_factory=list)  # in run order
    reasons: dict[str, str] = field(default_factory=dict)  # stage -> why it runs
    changed: list[str] = field(default_factory=list)  # those DVC itself finds changed (the rest follow them)


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


def dvc_plan(params: Params, root: Path = Path(".")) -> Plan:
    """The plan of ``dvc repro`` in the DVC project at ``root`` (module docstring). Writes the settings
    files that changed, as the ``settings`` stage would; nothing else is written or run."""
    import networkx as nx
    from dvc.repo import Repo

    import yaml

    lock = root / "dvc.lock"
    ran = set((yaml.safe_load(lock.read_text(encoding="utf-8")) or {}).get("stages", {})) if lock.is_file() else set()
    with Repo(str(root)) as repo:  # first: outside a DVC project nothing is written
        plan = Plan(settings_written=write_settings(params, root))
        graph = repo.index.graph  # an edge goes from a stage to a stage it depends on
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
            if name in changed:
                plan.stages.append(name)
                plan.changed.append(name)
                plan.reasons[name] = _reason(changed[name]) if name in ran else "new: not in dvc.lock"
            elif stage in after:
                plan.stages.append(name)
                plan.reasons[name] = f"after {after[stage]}"
    return plan
