"""Build targets, one per paper table: which runs, sweeps, real-data rows and W2 sweeps a table needs.

A table of params.yaml belongs to the target its ``target:`` names (default: the table's own name), so the
tables that print one paper table side by side -- ICLR Table 1's MNIST and Fashion-MNIST halves -- are one
target, ``iclr_table1``. What a target runs follows from its tables alone, at every scale:

- a row's run (a named experiment, or a sweep cell) and its real-data row (``real``);
- the table's ``experiments`` and ``step_check``;
- every cell of each of the table's ``sweeps``, except a sweep whose every cell another of the target's sweeps
  also runs, with the same base and the same swept values: the quick pipeline's share of a paper grid
  (``pm_mnist_quick`` beside ``pm_mnist``) would train the same cells twice under two names;
- a ``w2_noise`` table's sweep (``results/w2_noise/<dataset>.csv``).

A ``privacy`` table lists every run there is and has no target. Snakemake builds a target by its name
(workflow/rules/targets.smk: ``snakemake neurips_table4``), DVC once ``pipeline.tables`` lists it (its cells
then join the pipeline's, in dvc.yaml and in Snakemake's ``all`` alike); ``dpsynth workflow targets`` lists them
and ``dpsynth workflow budget`` sizes one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from dpsynth.config.experiment import Experiment, Sweep
from dpsynth.config.tables import Table
from dpsynth.errors import ConfigError, did_you_mean


class _Lists(Protocol):
    """``pipeline:`` of params.yaml, as far as the targets read it."""

    @property
    def experiments(self) -> Sequence[str]: ...
    @property
    def sweeps(self) -> Sequence[str]: ...
    @property
    def tables(self) -> Sequence[str]: ...


class _Real(Protocol):
    @property
    def real_datasets(self) -> Sequence[str]: ...


class ParamsView(Protocol):
    """What the catalogue reads of the params model (``dpsynth.config.params.Params`` has all of it). A
    structural type, so that the model -- whose ``pipeline_targets()`` follows ``pipeline.tables`` through this
    module -- imports the catalogue and the catalogue does not import the model: one way, no import circle."""

    @property
    def tables(self) -> Mapping[str, Table]: ...
    @property
    def sweeps(self) -> Mapping[str, Sweep]: ...
    @property
    def w2_noise(self) -> Mapping[str, object]: ...
    @property
    def pipeline(self) -> _Lists: ...
    @property
    def datasets(self) -> Sequence[str]: ...
    @property
    def evaluation(self) -> _Real: ...
    def cells_of(self, sweep: str) -> list[str]: ...
    def replicates_of(self, name: str) -> list[str]: ...
    def sweep_of(self, name: str) -> str | None: ...
    def all_experiments(self) -> dict[str, Experiment]: ...


@dataclass(frozen=True)
class TableTarget:
    """One build target: the tables it renders and the jobs they need."""

    name: str
    tables: tuple[str, ...]
    papers: tuple[str, ...]  # the tables' `paper:` (where the published numbers come from), without repeats
    experiments: tuple[str, ...]  # runs named one by one (named experiments; a sweep cell a row names)
    sweeps: tuple[str, ...]  # sweeps whose every cell it runs
    real: tuple[str, ...]  # datasets of its real-data rows (evaluate --real)
    w2_noise: tuple[str, ...]  # datasets of its W2-vs-noise sweeps
    left_out: tuple[tuple[str, str], ...] = ()  # (sweep, the sweep whose cells cover it)

    def runs(self, params: ParamsView) -> list[str]:
        """Every run it trains, samples and evaluates: its experiments, then its sweeps' cells."""
        return list(dict.fromkeys([*self.experiments, *(c for s in self.sweeps for c in params.cells_of(s))]))

    def train_sweeps(self, params: ParamsView) -> list[str]:
        """The sweeps whose ``train_sweep`` job it needs: those of its runs trained together
        (``train_together``: that job trains every cell of the sweep; the cells' own jobs release them)."""
        sweeps = (params.sweep_of(run) for run in self.runs(params))
        return [s for s in dict.fromkeys(sweeps) if s is not None and params.sweeps[s].train_together]


def build_command(target: str, scale: str) -> str:
    """The command that builds ``target`` at ``scale`` on this machine (workflow/rules/targets.smk), as the
    not-run list and `dpsynth workflow targets` print it."""
    return f"snakemake {target} --cores all --config scale={scale}"


def target_name(table_name: str, table: Table) -> str | None:
    """The target a table belongs to (None: a privacy table, which lists every run there is)."""
    if table.kind == "privacy":
        return None
    return table.target or table_name


def _cell_key(params: ParamsView, sweep: str, cell: dict[str, Any]) -> tuple[str, tuple[tuple[str, Any], ...]]:
    """A cell by what it runs: its sweep's base and the swept values (compared as values: 1 == 1.0)."""
    return params.sweeps[sweep].base, tuple(sorted(cell.items()))


def _covered(params: ParamsView, sweeps: list[str]) -> dict[str, str]:
    """sweep -> another of ``sweeps`` that runs every one of its cells (the larger one; of two equal ones
    the first listed stays)."""
    cells = {s: {_cell_key(params, s, c) for c in params.sweeps[s].cell_list()} for s in sweeps}
    out: dict[str, str] = {}
    for i, s in enumerate(sweeps):
        for j, other in enumerate(sweeps):
            if other == s or other in out or not cells[s] <= cells[other]:
                continue
            if len(cells[other]) > len(cells[s]) or j < i:
                out[s] = other
                break
    return out


def table_targets(params: ParamsView) -> dict[str, TableTarget]:
    """Every target, in the order its first table appears in params.yaml."""
    grouped: dict[str, list[str]] = {}
    for tname, table in params.tables.items():
        target = target_name(tname, table)
        if target is not None:
            grouped.setdefault(target, []).append(tname)
    return {name: _target(params, name, tables) for name, tables in grouped.items()}


def _target(params: ParamsView, name: str, table_names: list[str]) -> TableTarget:
    tables = [params.tables[t] for t in table_names]
    listed = list(dict.fromkeys(s for t in tables for s in t.sweeps))
    covered = _covered(params, listed)
    sweeps = [s for s in listed if s not in covered]
    in_sweeps = {c for s in sweeps for c in params.cells_of(s)}
    experiments: list[str] = []
    real: list[str] = []
    w2: list[str] = []
    for t in tables:
        for row in t.rows:
            if row.experiment is not None:
                experiments.append(row.experiment)
            if row.real is not None:
                real.append(row.real)
        experiments += t.experiments
        if t.step_check is not None:
            experiments.append(t.step_check)
        if t.kind == "w2_noise" and t.dataset is not None and t.dataset in params.w2_noise:
            w2.append(t.dataset)
    # each run with its repeated training runs (the cells of a sweep over seed alone based on it: the table's R runs)
    experiments = [x for e in experiments for x in params.replicates_of(e)]
    experiments = [e for e in dict.fromkeys(experiments) if e not in in_sweeps]
    return TableTarget(name=name, tables=tuple(table_names), papers=tuple(dict.fromkeys(t.paper for t in tables)),
                       experiments=tuple(experiments), sweeps=tuple(sweeps), real=tuple(dict.fromkeys(real)),
                       w2_noise=tuple(dict.fromkeys(w2)), left_out=tuple(covered.items()))


def pipeline_sweeps(params: ParamsView) -> list[str]:
    """``pipeline.sweeps``, then the sweeps of the targets ``pipeline.tables`` lists."""
    targets = table_targets(params) if params.pipeline.tables else {}
    listed = (s for t in params.pipeline.tables for s in targets[t].sweeps)
    return list(dict.fromkeys([*params.pipeline.sweeps, *listed]))


def pipeline_experiments(params: ParamsView) -> list[str]:
    """``pipeline.experiments``, then the runs the targets of ``pipeline.tables`` name one by one (but a cell of
    a sweep the pipeline runs whole, which that sweep's stages already run)."""
    if not params.pipeline.tables:
        return list(params.pipeline.experiments)
    targets, in_sweeps = table_targets(params), {c for s in pipeline_sweeps(params) for c in params.cells_of(s)}
    named = (e for t in params.pipeline.tables for e in targets[t].experiments if e not in in_sweeps)
    return list(dict.fromkeys([*params.pipeline.experiments, *named]))


def check_targets(params: ParamsView) -> None:
    """Refused in one line naming the key (the loader prefixes the file): a target named like another target's
    table (``snakemake <name>`` would build something else than the table of that name); in ``pipeline.tables``,
    a name that is no target, or a target whose data the pipeline does not prepare -- its runs' datasets must be
    in ``datasets`` and its real-data rows in ``evaluation.real_datasets`` (DVC's stages read those lists)."""
    targets = table_targets(params)
    for tname, table in params.tables.items():
        owner = target_name(tname, table)
        if tname in targets and owner != tname:
            raise ConfigError(f"tables.{tname}.target: {tname!r} is the name of another target (tables "
                              f"{', '.join(targets[tname].tables)}); a table that belongs to target {owner!r} "
                              "cannot share its name with another one: rename one of them")
    experiments = params.all_experiments()
    for name in params.pipeline.tables:
        if name not in targets:
            raise ConfigError(f"pipeline.tables: unknown target {name!r}{did_you_mean(name, targets)} "
                              "(`dpsynth workflow targets` lists them)")
        target = targets[name]
        for run in target.runs(params):
            dataset = experiments[run].dataset
            if dataset not in params.datasets:
                raise ConfigError(f"pipeline.tables: target {name!r} trains {run!r} on {dataset!r}, which is not "
                                  "in datasets (add it there)")
        for dataset in target.real:
            if dataset not in params.evaluation.real_datasets:
                raise ConfigError(f"pipeline.tables: target {name!r} has a real-data row of {dataset!r}, which is "
                                  "not in evaluation.real_datasets (add it there)")
