"""``kind: grid`` tables: a paper's hyperparameter grid (p x m, optimizer x learning rate, batch
size x sigma), one row per grid cell -- each of our sweep cells beside the paper row with the
same key values, then the paper's cells we did not run."""

from __future__ import annotations

import pandas as pd

from dpsynth.config import Params, Table
from dpsynth.errors import ConfigError
from dpsynth.report.published import paper_table
from dpsynth.report.runs import (
    METRICS,
    NOT_APPLICABLE,
    NOT_REPORTED,
    NOT_RUN,
    Run,
    RunStore,
    metric_cell,
    scale_cell,
    sigma_cell,
    table_epsilon_cell,
)
from dpsynth.report.tables.common import (
    EPS_OURS,
    BuiltTable,
    _epsilon_notes,
    _exp_value,
    _fmt_key,
    _members,
    _paper_eps,
    _paper_metric,
    _paper_source,
    _result_first,
)
from dpsynth.report.tables.notes import _notes, _ours


def _grid_table(name: str, table: Table, params: Params, store: RunStore) -> BuiltTable:
    where = f"tables.{name}"
    if table.published is None:
        raise ConfigError(f"{where}: a grid table needs `published:` (the paper's grid)")
    paper = paper_table(table.published, where)
    if not paper.keys:
        raise ConfigError(f"{where}: published table {table.published!r} is not a grid (it has no keys)")
    dataset = table.dataset or paper.dataset
    members = _members(params, table)
    experiments = params.all_experiments()
    swept = [k for s in table.sweeps for k in params.sweeps[s].cell_list()[0]]
    keys = list(dict.fromkeys(paper.keys + swept))
    records, rows_runs, runs, cells = [], [], [], []
    matched: set[str] = set()

    def add(key_vals: dict[str, str], run: Run | None, exp_name: str | None, prow_id: str | None) -> None:
        ours = exp_name is not None
        rec: dict[str, str] = {k: key_vals.get(k, NOT_APPLICABLE) for k in keys}
        rec["Run"] = exp_name or NOT_RUN
        rec["Scale"] = scale_cell(run, params.scale) if ours else NOT_RUN
        rec["σ ours"] = sigma_cell(run) if ours else NOT_RUN
        rec[EPS_OURS] = table_epsilon_cell(run) if ours else NOT_RUN
        rec["ε paper"] = _paper_eps(paper, prow_id, dataset) if prow_id else NOT_REPORTED
        paper_vals = {}
        for metric, label in METRICS.items():
            rec[f"{label} ours"] = metric_cell(run, metric) if ours else NOT_RUN
            rec[f"{label} paper"] = _paper_metric(paper, prow_id, metric, dataset)
            paper_vals[metric] = rec[f"{label} paper"]
        rec["Paper source"] = _paper_source(paper, prow_id) if prow_id else NOT_REPORTED
        records.append(rec)
        cells.append((key_vals, run, paper_vals))

    # One row per grid cell: a cell swept by two sweeps (the quick pipeline's share of a paper
    # grid and the full grid) is listed once, by the member that ran (every member that ran, if several).
    by_cell: dict[str, list[str]] = {}
    for e in members:
        by_cell.setdefault(repr({k: _exp_value(experiments[e], k) for k in keys}), []).append(e)
    keep = set()
    for names in by_cell.values():
        ran = [e for e in names if store.experiment(e) is not None]
        keep.update(ran or names[:1])
    for e in (m for m in members if m in keep):
        exp = experiments[e]
        vals = {k: _exp_value(exp, k) for k in keys}
        prow = paper.match(vals)
        if prow is not None:
            matched.add(prow.row_id)
        run = store.experiment(e)
        rows_runs.append((e, run))
        if run is not None:
            runs.append((e, e))
        add({k: _fmt_key(v) for k, v in vals.items()}, run, e, prow.row_id if prow else None)
    for rid, prow in paper.rows.items():
        if rid not in matched:
            add({k: _fmt_key(v) for k, v in prow.key.items()}, None, None, rid)
    frame = _result_first(pd.DataFrame.from_records(records), keys)
    return BuiltTable(name, table.title, table.paper, frame,
                      [*_notes(rows_runs, [paper]), *_epsilon_notes(rows_runs), *_ours(table)], runs,
                      grid={"keys": keys, "cells": cells},
                      ours=sum(run is not None for _, run in rows_runs))
