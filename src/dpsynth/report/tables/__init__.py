"""Every table of the papers with our numbers beside theirs (Markdown, CSV, LaTeX).

A table's rows come from ``params.yaml`` (``tables:``): which paper row each of our runs
reproduces lives there, not here, so adding a sweep value adds a row without code. The
published numbers come from ``published.yaml``; our numbers from ``metrics.json``. A cell
is never blank: a missing run reads "not run", a paper row we do not reproduce "reported
only", a row or column the paper does not have "not reported".

One module per table kind (``methods``, ``grid``, ``w2``, ``privacy``, ``manifold``, ``train_size``; each has a
``kind:`` of params.yaml ``tables:``), the helpers they share (``common``, ``notes``) and the
writers (``render``). This module picks a table's kind and re-exports the public names, so
``from dpsynth.report.tables import ...`` is the one import the rest of the project needs.
"""

from __future__ import annotations

from pathlib import Path

from dpsynth.config import Params
from dpsynth.errors import ConfigError
from dpsynth.report.runs import RunStore
from dpsynth.report.tables.common import BuiltTable
from dpsynth.report.tables.grid import _grid_table
from dpsynth.report.tables.manifold import _manifold_table
from dpsynth.report.tables.methods import _methods_table
from dpsynth.report.tables.notes import _scale_notes as _scale_notes  # re-exported: tests/test_report.py
from dpsynth.report.tables.privacy import _privacy_table
from dpsynth.report.tables.train_size import _train_size_table
from dpsynth.report.tables.render import (
    DEVIATIONS,
    LEGEND,
    check_complete,
    to_latex,
    to_markdown,
    write_index,
    write_table,
)
from dpsynth.report.tables.w2 import _w2_table, read_w2_csv, w2_skipped_reason
from dpsynth.report.tables.wavelet import _wavelet_table

__all__ = ["DEVIATIONS", "LEGEND", "BuiltTable", "build_table", "build_tables", "check_complete", "read_w2_csv",
           "to_latex", "to_markdown", "w2_skipped_reason", "write_index", "write_table"]


_KINDS = {"methods": _methods_table, "grid": _grid_table, "w2_noise": _w2_table, "privacy": _privacy_table,
          "manifold": _manifold_table, "train_size": _train_size_table,
          "wavelet": _wavelet_table}


def build_table(name: str, params: Params, results: Path) -> BuiltTable:
    """One table from params.yaml's ``tables.{name}`` and the metrics under ``results``."""
    if name not in params.tables:
        raise ConfigError(f"no table named {name!r} in tables: (known: {', '.join(params.tables)})")
    table = params.tables[name]
    return _KINDS[table.kind](name, table, params, RunStore(results))


def build_tables(params: Params, results: Path, store: RunStore | None = None) -> dict[str, BuiltTable]:
    """Every table; ``store`` (default: a fresh one) is shared so each metrics.json is read once --
    the report passes one loaded and validated up front (``RunStore.load_all``)."""
    store = store if store is not None else RunStore(results)
    return {name: _KINDS[t.kind](name, t, params, store) for name, t in params.tables.items()}
