"""What every table kind shares: the finished table (:class:`BuiltTable`), a row's link to a
paper row, a swept key's value and spelling, a table's member runs, and the paper's epsilon
and metric cells.

The underscore names here are private to the ``dpsynth.report.tables`` package (each table
kind imports them), not to this module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from dpsynth.config import Experiment, Params, Table, sweep_cell_name
from dpsynth.report.published import PaperTable
from dpsynth.report.runs import NOT_REPORTED, TABLE_CONVENTION, Run, epsilon_cell


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


#: What a reader looks for, in this order, right after what names a row (its method, or a grid's keys):
#: downstream accuracy, then fidelity (FID, IS, KID, FID-infinity, W2), then precision and recall; the epsilon,
#: run, scale and source columns follow (issue 70: at 1400x1000 Table 1's first accuracy sat 1,636 px into a
#: 775 px frame behind Method, Run, Scale and every epsilon convention). Each "X ours" keeps its "X paper".
_READER_ORDER = (re.compile(r"\(%\)|\bAcc\b"), re.compile(r"^(FID|IS|KID|W2)\b"), re.compile(r"^(Precision|Recall)\b"))


def _result_first(frame: pd.DataFrame, lead: list[str]) -> pd.DataFrame:
    """``frame`` with ``lead`` (the row's name) first, then the result columns in ``_READER_ORDER``'s
    groups (their own order kept within a group), then every other column in its order."""
    rest = [c for c in frame.columns if c not in lead]
    groups: list[list[str]] = [[] for _ in _READER_ORDER]
    for c in rest:
        for g, pattern in zip(groups, _READER_ORDER):
            if pattern.search(str(c)):
                g.append(c)
                break
    results = [c for g in groups for c in g]
    return frame[[*lead, *results, *(c for c in rest if c not in results)]]


#: The header of our epsilon column: the table's own convention (``runs.table_epsilon_cell``).
EPS_OURS = f"ε ours ({TABLE_CONVENTION}; all: notes)"


def _epsilon_notes(rows_runs: list[tuple[str, Run | None]]) -> list[str]:
    """Every convention of each row's run, which the epsilon cell leaves out: one note per row with a
    privacy report (real-data and non-private rows have nothing more to say)."""
    out = []
    for label, run in rows_runs:
        if run is None or len(run.epsilons()) < 2:
            continue
        out.append(f"ε ours of {label} ({run.name}) in every convention (the cell shows {TABLE_CONVENTION}, "
                   f"the papers' RDP conversion): {epsilon_cell(run)}")
    return out


#: LaTeX a paper prints in a row's label (published.yaml keeps the paper's text, which tests/test_report.py
#: finds in the paper), as the page shows it: no raw LaTeX reaches a cell.
_LATEX = ((r"\nabla", "∇"), (r"\theta", "θ"), (r"\hat{S}", "Ŝ"), ("_{", ""), ("{", ""), ("}", ""), ("$", ""))


def _plain_label(text: str) -> str:
    """A paper's row label without LaTeX, as the page shows it:
    ``DP-Sinkhorn ($\\nabla_{\\theta} \\hat{S}$)`` -> ``DP-Sinkhorn (∇θ Ŝ)``."""
    for a, b in _LATEX:
        text = text.replace(a, b)
    return text


def _paper_source(paper: PaperTable, row_id: str) -> str:
    """The "Paper source" cell: the paper's table and the row's label as the paper prints it, LaTeX rendered."""
    return f"{paper.source}, row '{_plain_label(paper.rows[row_id].left)}'"
