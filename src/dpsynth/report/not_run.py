"""What runs a table that has no run of ours at this scale: the sentence the report page's one
not-run list prints beside it (``dpsynth.report.page``).

Read from params.yaml as the workflow reads it: the pipeline's targets (``pipeline.experiments`` and
``pipeline.sweeps``, what `snakemake` and `dvc repro` run), the scales a W2-vs-noise sweep is limited
to (``w2_noise.<dataset>.scales``), and the named Snakemake targets of workflow/rules/reshetova.smk
(``reshetova``: every ``kind: manifold`` table and every ``kind: train_size`` table on a 2-D dataset;
``reshetova_mnist``: the ``kind: train_size`` tables on MNIST). Those two rules pick their runs by
the same table kinds; tests/test_report_page.py checks each named target's dry run plans the runs
this module sends a reader to it for.
"""

from __future__ import annotations

from dpsynth.config import Params, Table
from dpsynth.data.registry import DATASETS

#: How many of a table's run names a sentence spells out before "and N more".
SHOWN_RUNS = 4


def members(params: Params, table: Table) -> list[str]:
    """Every run a table reads: its rows' experiments, its ``experiments`` and its sweeps' cells."""
    names = [r.experiment for r in table.rows if r.experiment is not None]
    names += list(table.experiments)
    for sweep in table.sweeps:
        names += params.cells_of(sweep)
    return list(dict.fromkeys(names))


def _some(names: list[str]) -> str:
    shown = ", ".join(names[:SHOWN_RUNS])
    return shown + (f" and {len(names) - SHOWN_RUNS} more" if len(names) > SHOWN_RUNS else "")


def named_target(params: Params, table: Table) -> str | None:
    """The named Snakemake target (workflow/rules/reshetova.smk) that runs the table's runs, if any."""
    dataset = DATASETS.get(table.dataset) if table.dataset else None
    if table.kind == "manifold" or (table.kind == "train_size" and dataset is not None
                                    and dataset.kind == "manifold2d"):
        return "reshetova"
    if table.kind == "train_size" and table.dataset == "mnist":
        return "reshetova_mnist"
    return None


def how_to_run(params: Params, name: str) -> str:
    """Which scale or target runs table ``name``'s runs, as one sentence for the not-run list."""
    table = params.tables[name]
    if table.kind == "w2_noise":
        sweep = params.w2_noise.get(table.dataset) if table.dataset else None
        if sweep is None:
            return f"no W2-vs-noise sweep is configured for {table.dataset} (params.yaml `w2_noise`)"
        if sweep.scales and params.scale not in sweep.scales:
            return (f"its W2-vs-noise sweep (`dpsynth w2noise {table.dataset}`) runs at scale "
                    f"{' or '.join(sweep.scales)} only (params.yaml `w2_noise.{table.dataset}.scales`): "
                    f"`snakemake --config scale={sweep.scales[-1]}`")
        return (f"`snakemake` runs its W2-vs-noise sweep at this scale (results/w2_noise/{table.dataset}.csv); "
                "it has not finished")
    if table.kind == "privacy":
        return "fills as runs finish: every run of the pipeline (`snakemake`) adds its rows"
    runs = members(params, table)
    targeted = [r for r in runs if r in params.pipeline_targets()]
    said = []
    if targeted:
        said.append(f"the pipeline (`snakemake`) targets {len(targeted)} of its {len(runs)} runs ({_some(targeted)}) "
                    "at this scale, and none has metrics yet (not finished, or failed: see logs/)")
    target = named_target(params, table)
    if target == "reshetova":
        said.append(f"`snakemake reshetova` runs all {len(runs)} ({_some(runs)}) at any scale; they are kept out "
                    "of the pipeline for time")
    elif target == "reshetova_mnist":
        said.append(f"`snakemake reshetova_mnist --config scale=paper_cpu` runs all {len(runs)} ({_some(runs)}): "
                    "docs/reshetova-mnist.md")
    if said:
        return "; ".join(said)
    return (f"no target runs its {len(runs)} runs ({_some(runs)}): add them to params.yaml "
            "`pipeline.experiments` (a sweep's cells: the sweep to `pipeline.sweeps`), then `snakemake` "
            "(docs/configuration.md)")
