"""What every table kind shares: the finished table (:class:`BuiltTable`), a row's link to a
paper row, a swept key's value and spelling, a table's member runs, and the paper's epsilon
and metric cells.

The underscore names here are private to the ``dpsynth.report.tables`` package (each table
kind imports them), not to this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from dpsynth.config import Experiment, Params, Table, sweep_cell_name
from dpsynth.report.published import PaperTable
from dpsynth.report.runs import NOT_REPORTED


@dataclass
class BuiltTable:
    """A finished table: the frame plus what the Markdown/LaTeX versions print around it."""

    name: str
    title: str
    paper: str
    frame: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    #: (label, experiment) of rows with our runs, for the sample-grid figure.
    runs: list[tuple[str, str]] = field(default_factory=list)
    #: rows holding numbers of ours (real-data rows, W2 rows and privacy rows included): what the
    #: report's "N with our numbers" counts, which ``runs`` (sample grids only) would undercount.
    ours: int = 0
    #: grid tables: swept keys, and per row (key values, {metric: ours}, {metric: paper}).
    grid: dict[str, Any] | None = None
    #: manifold tables: one dict per panel of the figure (row, col, experiment, labels, W2 cell).
    panels: list[dict[str, Any]] | None = None
    #: train_size tables: {"dataset", "points": [{"n", "test"}], "slopes": {"test"}, "paper_slope", "private_train"
    #: (where each cell's private train point lies)}.
    curves: dict[str, Any] | None = None
    #: wavelet tables (Reshetova et al. Figs. 2, 8): one dict per row of the six-column figure (row,
    #: mechanism, runs {column: experiment}, w2 {column: cell}).
    wavelet_panels: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class _Row:
    label: str
    experiment: str | None = None
    real: str | None = None
    paper: tuple[PaperTable, str] | None = None  # (table, row id)


def _exp_value(exp: Experiment, key: str) -> Any:
    """A swept key's value in an experiment's configuration (sigma lives in privacy)."""
    return exp.privacy.sigma if key == "sigma" else getattr(exp.hparams, key)


def _fmt_key(v: Any) -> str:
    """One spelling for a swept value, ours or the paper's ("1e-5" and 1e-05 -> "1e-05", "Adam" -> "adam")."""
    try:
        return f"{float(v):g}"
    except (TypeError, ValueError):
        return str(v).lower()


def _members(params: Params, table: Table) -> list[str]:
    out = list(table.experiments)
    for s in table.sweeps:
        sweep = params.sweeps[s]
        out += [sweep_cell_name(s, cell) for cell in sweep.cell_list()]
    return list(dict.fromkeys(out))


def _paper_eps(paper: PaperTable | None, row_id: str | None, dataset: str | None) -> str:
    if paper is None:
        return NOT_REPORTED
    value = paper.value(row_id, "eps", dataset) if row_id is not None else None
    if value is None and paper.epsilon is not None:
        value = f"{paper.epsilon:g}"
    if value is None:
        return NOT_REPORTED
    return f"{value} (δ={paper.delta:g})" if paper.delta is not None and value != "∞" else value


def _paper_metric(paper: PaperTable | None, row_id: str | None, metric: str, dataset: str | None) -> str:
    if paper is None or row_id is None:
        return NOT_REPORTED
    value = paper.value(row_id, metric, dataset)
    return NOT_REPORTED if value is None else value
