"""What runs a table that has no run of ours at this scale: the sentence the report page's one not-run list
prints beside it (``dpsynth.report.page``), with commands a reader can paste.

Built from the two places that say what runs what, never from a list of its own:

- the build target catalogue (``dpsynth.config.targets``, `dpsynth workflow targets`): every table but the
  privacy ones belongs to a target, and ``snakemake <target> --cores all --config scale=<scale>`` trains, samples
  and evaluates exactly that target's runs, real-data rows and W2 sweeps (workflow/rules/targets.smk). The scale
  is the page's own when the target builds there, else the first that does (a W2 sweep limited to some scales,
  a sweep whose swept values a scale caps, a training-set size beyond a scale's subset);
- the Makefile's targets that run Snakemake (``make run``: the pipeline; ``make reshetova-mnist``: the named rule
  ``reshetova_mnist`` of workflow/rules/reshetova.smk), read from the Makefile in the working directory, each
  named with the part of the table's runs it runs.

tests/test_not_run_commands.py dry-runs every command this module prints and checks it plans exactly the runs its
sentence names (a make target: that it exists and that its command plans them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from dpsynth.config import Params, table_targets
from dpsynth.config.targets import TableTarget, build_command, target_name
from dpsynth.data.registry import DATASETS
from dpsynth.errors import ConfigError

#: How many of a table's run names a sentence spells out before "and N more".
SHOWN_RUNS = 4
MAKEFILE = Path("Makefile")


@dataclass(frozen=True)
class MakeTarget:
    """A Makefile target that runs Snakemake: the rule it builds (None: the pipeline, ``all``) at a scale."""

    name: str
    rule: str | None
    scale: str


def make_targets(makefile: Path = MAKEFILE) -> dict[str, MakeTarget]:
    """Every target of ``makefile`` whose recipe runs ``snakemake [rule] ... --config scale=S`` (its first such
    line), by name; none when there is no Makefile (a copy of the workflow without one)."""
    if not makefile.is_file():
        return {}
    out: dict[str, MakeTarget] = {}
    current: str | None = None
    for line in makefile.read_text(encoding="utf-8").splitlines():
        head = re.match(r"^([A-Za-z][\w.-]*)\s*:(?!=)", line)
        if head:
            current = head.group(1)
            continue
        run = re.match(r"^\t\S*snakemake(?P<args>(?: +\S+)*)$", line)
        if run and current is not None and current not in out and "--report" not in line:
            args = run.group("args").split()
            scale = re.search(r"scale=(\w+)", line)
            rule = args[0] if args and not args[0].startswith("-") else None
            if scale:
                out[current] = MakeTarget(current, rule, scale.group(1))
    return out


def _some(names: list[str]) -> str:
    shown = ", ".join(names[:SHOWN_RUNS])
    return shown + (f" and {len(names) - SHOWN_RUNS} more" if len(names) > SHOWN_RUNS else "")


def _runs(n: int) -> str:
    return f"{n} run" + ("" if n == 1 else "s")


def pipeline_command(scale: str) -> str:
    """The command that runs the pipeline (Snakemake's ``all``) at ``scale`` (``make run``'s at quick)."""
    return f"snakemake --cores all --config scale={scale}"


def refusal(params: Params, target: TableTarget) -> str | None:
    """Why ``target`` cannot be built at ``params.scale`` (the reasons workflow/rules/common.smk refuses it for,
    and a training-set size the scale's subset does not hold), or None."""
    from dpsynth.config.run import check_sweep_at_scale

    for dataset in target.w2_noise:
        scales = params.w2_noise[dataset].scales
        if scales is not None and params.scale not in scales:
            return f"w2_noise.{dataset}.scales: {', '.join(scales)}"
    try:
        for sweep in target.sweeps:
            check_sweep_at_scale(params, sweep)
    except ConfigError as exc:
        return str(exc).split(";")[0]
    subset = params.preset.train_subset
    experiments = params.all_experiments()
    for run in target.runs(params):
        size = experiments[run].train_size
        if subset is not None and size is not None and size > subset:
            return f"{run}: n = {size:,} > scales.{params.scale}.train_subset {subset:,}"
    return None


def build_scale(params: Params, target: TableTarget) -> tuple[str, str | None]:
    """(the scale ``snakemake <target>`` is printed with, why not the page's own or None): the page's scale when
    the target builds there, else the scales its W2 sweeps list (the last first: the one common.smk names), then
    the scales after the page's in params.yaml's order (the next larger first), then those before it."""
    why = refusal(params, target)
    if why is None:
        return params.scale, None
    listed = [s for d in target.w2_noise for s in reversed(params.w2_noise[d].scales or [])]
    order = list(params.scales)
    after = order.index(params.scale) + 1 if params.scale in order else 0
    for scale in dict.fromkeys([*listed, *order[after:], *order[:after]]):
        if scale != params.scale and refusal(params.model_copy(update={"scale": scale}), target) is None:
            return scale, why
    raise ConfigError(f"build target {target.name}: no scale of params.yaml builds it ({why})")


def rule_runs(params: Params, rule: str) -> tuple[list[str], list[str]]:
    """(runs, W2-vs-noise datasets) a named rule of workflow/rules/reshetova.smk builds, picked by table kind
    as that file picks them: ``reshetova_mnist`` -- every cell of the ``kind: train_size`` tables on MNIST with
    their step checks' runs, and MNIST's W2 sweep. Other rules: nothing known here."""
    if rule != "reshetova_mnist":
        return [], []
    tables = [t for t in params.tables.values() if t.kind == "train_size" and t.dataset == "mnist"]
    runs = [c for t in tables for s in t.sweeps for c in params.cells_of(s)]
    runs += [x for t in tables if t.step_check for x in params.replicates_of(t.step_check)]
    return list(dict.fromkeys(runs)), ["mnist"] if "mnist" in params.w2_noise else []


def _what(runs: list[str], w2: list[str] | tuple[str, ...], real: tuple[str, ...] = ()) -> str:
    """The runs, W2 sweeps and real-data rows a command runs, in words."""
    parts = [f"{_runs(len(runs))} ({_some(runs)})"] if runs else []
    parts += [f"its W2-vs-noise sweep on {d}" for d in w2]
    parts += [f"the real-data row of {d}" for d in real]
    return ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1] if parts else "nothing"


def _make_lines(params: Params, target: TableTarget, runs: list[str]) -> list[str]:
    """One clause per Makefile target that runs part of ``target``: which part, at which scale."""
    said = []
    for make in make_targets().values():
        if make.rule is None:
            if make.scale != params.scale:
                continue
            mine = [r for r in runs if r in params.pipeline_targets()]
            w2 = [d for d in target.w2_noise if params.w2_noise[d].scales is None
                  or params.scale in params.w2_noise[d].scales]
            if mine or w2:
                said.append(f"`make {make.name}` (the pipeline) runs {_what(mine, w2)} and has not finished them "
                            "(or one failed: see logs/)")
            continue
        covered, w2 = rule_runs(params, make.rule)
        mine, w2 = [r for r in runs if r in covered], [d for d in target.w2_noise if d in w2]
        if mine or w2:
            said.append(f"`make {make.name}` (rule {make.rule} at scale {make.scale}, for more tables than this one) "
                        f"runs {_what(mine, w2)}")
    return said


def how_to_run(params: Params, name: str) -> str:
    """What runs table ``name``'s runs, as one sentence for the not-run list (module docstring)."""
    table = params.tables[name]
    if table.kind == "privacy":
        return f"fills as runs finish: every run of the pipeline (`{pipeline_command(params.scale)}`) adds its rows"
    owner = target_name(name, table)
    assert owner is not None
    target = table_targets(params)[owner]
    runs = target.runs(params)
    scale, why = build_scale(params, target)
    notes = [f"scale {scale}: at {params.scale}, {why}"] if why else []
    if scale == "paper":
        notes.append("on a GPU cluster add `--profile slurm`: docs/gpu-cluster.md")
    if any(DATASETS[params.all_experiments()[r].dataset].kind == "celeba" for r in runs):
        notes.append("CelebA's files placed by hand first: docs/methods.md#datasets")
    said = [f"`{build_command(target.name, scale)}` runs exactly its {_what(runs, target.w2_noise, target.real)}, "
            f"into results/targets/{target.name}/" + (f" ({'; '.join(notes)})" if notes else "")]
    said += _make_lines(params, target, runs)
    return "; ".join(said)
