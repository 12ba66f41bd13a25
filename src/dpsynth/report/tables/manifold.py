"""``kind: manifold`` tables: Reshetova, Chen, Ozgur, "Training generative models from privatized data via
entropic optimal transport" (ISIT 2024, arXiv:2306.09547), Figs. 1, 6 and 7 -- a generator learning a 2-D
manifold from locally privatized points, a row per mechanism (Laplace: entropic vs unregularized 1-W;
Gaussian: entropic vs unregularized 2-W). The table holds each panel's W2 to the clean manifold and what
it trained on; its notes check the paper's claim per row (the one ``entropic_claim`` of Fig. 5). Under each panel,
the trivial private baselines its runs' evaluate stage fitted to their own privatized records
(``evaluate.baselines.run_baselines``), with the claim "the generator is closer to the clean data than the
baselines" per measure (``baselines.baseline_claims``: paired by seed over a panel's runs, undecided with one run).
The figure itself is ``dpsynth.report.manifolds``, drawn from :attr:`BuiltTable.panels`."""

from __future__ import annotations

from typing import Any

import pandas as pd

from dpsynth.config import Experiment, Params, Table
from dpsynth.privacy import mechanisms
from dpsynth.report.published import paper_table
from dpsynth.report.runs import NOT_APPLICABLE, NOT_REPORTED, NOT_RUN, PLOT_ONLY, Run, RunStore, fmt_summary, scale_cell
from dpsynth.report.tables.baselines import (
    RUN_NOTE,
    RUN_SHARES,
    baseline_claims,
    baseline_records,
    baselines_of_runs,
    measures_of,
)
from dpsynth.report.tables.common import BuiltTable
from dpsynth.report.tables.notes import _ours, _scale_notes
from dpsynth.report.claims import Estimate
from dpsynth.report.tables.train_size import seed_of
from dpsynth.report.tables.w2 import closeness_record_cells, w2_cell, w2_estimate
from dpsynth.report.tables.w2_claims import SOURCE, lowest_claim

#: The columns (losses) left to right, as the paper draws them; the rows top to bottom are the registry's local
#: mechanisms in registration order (``privacy.mechanisms.local_names``: Laplace, then Gaussian).
LOSSES = ("entropic", "exact")
#: The paper's claim for each row of Figs. 1, 6, 7, checked by ``entropic_claim``.
CLAIM = ("the generator trained with the entropic p-Wasserstein loss (temperature matched to the noise) learns "
         "the clean manifold, closer to it than the unregularized p-Wasserstein loss, for each mechanism")
#: A baseline row's columns (``baselines.baseline_records``): the baseline's name in the Loss column, its panel's
#: mechanism, a Run cell naming the runs whose privatized records it was fitted to.
BASELINE_COLUMNS = {"name": "Loss", "level": None, "run": "Run", "w2": "W2 to clean data ours", "count": None}


def mechanism_label(exp: Experiment) -> str:
    """``Laplace ε=5`` / ``Gaussian ε=5, δ=0.0001``: a row's name."""
    local = exp.local
    assert local is not None
    delta = f", δ={local.delta:g}" if local.delta is not None else ""
    return f"{mechanisms.local(local.mechanism).title} ε={local.epsilon:g}{delta}"


def loss_label(exp: Experiment) -> str:
    """``entropic 1-W`` / ``unregularized 2-W``: a column's name (p matched to the mechanism)."""
    assert exp.local is not None
    p = getattr(exp.hparams, "cost_p", None) or mechanisms.local(exp.local.mechanism).matched_p
    kind = "entropic" if exp.hparams.loss == "entropic" else "unregularized"  # type: ignore[attr-defined]
    return f"{kind} {p}-W"


def trained_on(run: Run | None) -> str:
    """What a run trained on, from its metrics (the train summary it carries): n privatized points,
    batch b, steps; the cell the figure's caption repeats."""
    if run is None:
        return NOT_RUN
    train = run.metrics.get("train") or {}
    n = (run.privacy or {}).get("dataset_size")
    b = (train.get("hparams") or {}).get("batch_size")
    steps = train.get("steps")
    if not isinstance(n, int) or not isinstance(b, int):
        return "not recorded"
    full = " (full batch, b = n)" if b >= n else ""
    return f"n={n:,}, b={min(b, n):,}{full}, {steps:,} steps" if isinstance(steps, int) else f"n={n:,}, b={b:,}"


def _manifold_table(name: str, table: Table, params: Params, store: RunStore) -> BuiltTable:
    paper = paper_table(table.published, f"tables.{name}") if table.published else None
    paper_cell = PLOT_ONLY if paper is not None and paper.plot_only else NOT_REPORTED
    experiments = params.all_experiments()
    by_cell = {(experiments[e].local.mechanism, experiments[e].hparams.loss): e  # type: ignore[union-attr,attr-defined]
               for e in table.experiments}
    records: list[dict[str, str]] = []
    panels: list[dict[str, Any]] = []
    claim_levels: dict[str, dict[str, Estimate]] = {}
    runs: list[Run | None] = []
    rows = [m for m in mechanisms.local_names() if any(k[0] == m for k in by_cell)]
    row_names: dict[int, str] = {}
    # the trivial private baselines each run's evaluate stage fitted to its own privatized records, per panel
    generators: list[dict[str, Any]] = []
    bases: list[pd.DataFrame] = []
    base_notes: list[str] = []
    panel_names: list[str] = []
    for r, mech in enumerate(rows):
        for c, loss in enumerate(LOSSES):
            e = by_cell.get((mech, loss))
            if e is None:
                continue
            exp = experiments[e]
            reps = [store.experiment(x) for x in params.replicates_of(e)]  # the panel's training runs
            run = next((x for x in reps if x is not None), None)
            runs.append(run)
            row_names[r] = mechanism_label(exp)
            est = w2_estimate(reps)
            if est.n > 0:
                claim_levels.setdefault(row_names[r], {})[loss] = est
            cell = w2_cell(reps)
            panel = len(panel_names)
            panel_names.append(mechanism_label(exp))  # a claim's part names the loss beside it
            names = params.replicates_of(e)
            generators += [{"panel": float(panel), "loss": loss_label(exp), "seed": seed_of(params, x),
                            **measures_of(rep.metrics.get("w2"))} for x, rep in zip(names, reps) if rep is not None]
            at, why = baselines_of_runs((rep, {"panel": float(panel)}) for rep in reps)
            base_notes += why
            records.append({"Mechanism": mechanism_label(exp), "Loss": loss_label(exp), "Run": e,
                            "Scale": scale_cell(run, params.scale), "Trained on": trained_on(run),
                            "W2 to clean data ours": cell, "W2 paper": paper_cell,
                            **({"Privacy": str(at["privacy"].iloc[0])} if len(at) else {})})
            if len(at):
                bases.append(at)
                records += [{**rec, "Mechanism": mechanism_label(exp), "Trained on": NOT_APPLICABLE}
                            for rec in baseline_records(
                                at, run=lambda name, g: ", ".join(g["run"]), scale=params.scale,
                                paper_cell=NOT_REPORTED, level="panel",
                                cell=lambda g: fmt_summary(list(g["w2_record"]), digits=3),
                                closeness=lambda g: closeness_record_cells(list(g["closeness"])),
                                columns=BASELINE_COLUMNS)]
            panels.append({"row": r, "col": c, "experiment": e, "mechanism": mechanism_label(exp),
                           "loss": loss_label(exp), "w2": cell, "trained_on": trained_on(run),
                           "ran": run is not None})
    notes = ([f"{paper.source}: {n}" for n in paper.notes] if paper else []) + _ours(table)
    notes.append("Ours: W2 to clean data = the exact W2 between 1,000 generated points and 1,000 points of the "
                 "clean manifold's held-out test split (counts in each cell; `dpsynth evaluate`).")
    figure = paper.table if paper is not None else name
    notes.append(lowest_claim(claim_levels, figure=figure, claim=CLAIM, levels_name="mechanism rows"))
    if bases:
        notes.append(RUN_NOTE.replace("Read each measure", "Each baseline row follows its panel's run; 'Trained on' "
                                      "is n/a (nothing is trained: fitted in closed form or by k-means). Read each "
                                      "measure"))
        notes += baseline_claims(pd.DataFrame(generators), pd.concat(bases, ignore_index=True),
                                 source=f"ours, beside {SOURCE.format(figure=figure)}", level="panel",
                                 label=lambda v: panel_names[int(v)], shares=RUN_SHARES, levels_name="panel")
    notes += base_notes
    notes += _scale_notes([run for run in runs])
    frame = pd.DataFrame.from_records(records, columns=["Mechanism", "Loss", "W2 to clean data ours", "W2 paper",
                                                        "Run", "Scale", "Trained on"] + (["Privacy"] if bases else []))
    if bases:  # a panel whose runs were evaluated before the baselines existed
        frame["Privacy"] = frame["Privacy"].fillna("not evaluated (no baselines recorded)")
    return BuiltTable(name, table.title, table.paper, frame, notes, ours=sum(r is not None for r in runs),
                      panels=panels)
