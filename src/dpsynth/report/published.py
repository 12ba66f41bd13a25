"""The papers' reported numbers (``published.yaml``), parsed into lookups with their sources.

The numbers are transcribed once, as the papers print them, into a data file next to this
module; code never types a published number. Values stay strings so a table prints exactly
what the paper printed ("08.4", "51/80.9", "∞"), and a test can find each row in the paper's text.
The papers are cited by the short names of docs/references.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from dpsynth.errors import ConfigError

PUBLISHED_FILE = Path(__file__).with_name("published.yaml")


@dataclass(frozen=True)
class PaperRow:
    """One printed row: ``left`` is the label (method tables) or the swept values (grids)."""

    row_id: str
    left: str
    values: dict[str, str]
    key: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PaperTable:
    table_id: str
    paper: str  # a key of published.yaml's `papers`
    citation: str  # e.g. "GS-WGAN (Chen, Orekondy, Fritz, NeurIPS 2020, arXiv:2006.08265)"
    table: str
    caption: str
    columns: list[str]
    rows: dict[str, PaperRow]
    keys: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    delta: float | None = None
    epsilon: float | None = None
    dataset: str | None = None
    plot_only: bool = False
    #: the paper's text prints the caption below the rows (GS-WGAN Table 1), not above them
    caption_below: bool = False

    @property
    def source(self) -> str:
        """Human-readable provenance, e.g. ``DP-Sinkhorn ICLR submission (OpenReview, ICLR 2021) Table 1``."""
        return f"{self.citation} {self.table}"

    def value(self, row_id: str, metric: str, dataset: str | None = None) -> str | None:
        """The printed value of ``metric`` (dataset-prefixed column first); None: not a column."""
        row = self.rows[row_id]
        if dataset is not None and f"{dataset}.{metric}" in row.values:
            return row.values[f"{dataset}.{metric}"]
        return row.values.get(metric)

    def match(self, cell: dict[str, Any]) -> PaperRow | None:
        """The grid row whose printed key values equal ``cell``'s (numbers compared as numbers)."""
        for row in self.rows.values():
            if set(row.key) <= set(cell) and all(_same(row.key[k], cell[k]) for k in row.key):
                return row
        return None


def _same(printed: str, value: Any) -> bool:
    if isinstance(value, str):
        return printed.strip().lower() == value.strip().lower()
    try:
        return math.isclose(float(printed), float(value), rel_tol=1e-9, abs_tol=1e-12)
    except ValueError:
        return False


def split_row(text: str, where: str) -> tuple[str, list[str]]:
    """``"label | v1 v2"`` -> (``"label"``, [``"v1"``, ``"v2"``]). A unit printed apart from its number
    stays with it, as printed: ``"0.88 100 %"`` -> [``"0.88"``, ``"100 %"``] (GS-WGAN Table 1)."""
    if text.count("|") != 1:
        raise ConfigError(f"{where}: expected 'LEFT | VALUES' with one '|', got {text!r}")
    left, right = (s.strip() for s in text.split("|"))
    values: list[str] = []
    for tok in right.split():
        if tok == "%" and values:
            values[-1] += " %"
        else:
            values.append(tok)
    return left, values


def _parse_table(tid: str, raw: dict[str, Any], papers: dict[str, str]) -> PaperTable:
    where = f"{PUBLISHED_FILE.name}: tables.{tid}"
    try:
        columns = list(raw["columns"])
        keys = list(raw.get("keys") or [])
        rows: dict[str, PaperRow] = {}
        raw_rows = raw.get("rows") or {}
        items = raw_rows.items() if isinstance(raw_rows, dict) else ((None, r) for r in raw_rows)
        for rid, text in items:
            left, vals = split_row(text, f"{where}.rows")
            if len(vals) != len(columns):
                raise ConfigError(f"{where}.rows: {text!r} has {len(vals)} values for {len(columns)} columns")
            key: dict[str, str] = {}
            if keys:
                parts = left.split()
                if len(parts) != len(keys):
                    raise ConfigError(f"{where}.rows: {left!r} does not give one value per key {keys}")
                key = dict(zip(keys, parts))
            row_id = rid if rid is not None else left
            if row_id in rows:
                raise ConfigError(f"{where}.rows: duplicate row {row_id!r}")
            rows[row_id] = PaperRow(row_id, left, dict(zip(columns, vals)), key)
        if raw["paper"] not in papers:
            raise ConfigError(f"{where}.paper: {raw['paper']!r} is not one of `papers` ({', '.join(sorted(papers))})")
        return PaperTable(tid, raw["paper"], papers[raw["paper"]], raw["table"], raw["caption"], columns, rows, keys,
                          list(raw.get("notes") or []), raw.get("delta"), raw.get("epsilon"),
                          raw.get("dataset"), bool(raw.get("plot_only", False)), bool(raw.get("caption_below", False)))
    except KeyError as exc:
        raise ConfigError(f"{where}: missing key {exc.args[0]!r}") from None


@cache
def load_published(path: Path = PUBLISHED_FILE) -> tuple[dict[str, PaperTable], dict[str, dict[str, str]]]:
    """(tables by id, privacy claims by ``method/dataset``), validated once per process."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read the published numbers: {exc}") from None
    papers = {k: str(v) for k, v in (raw.get("papers") or {}).items()}
    tables = {tid: _parse_table(tid, t, papers) for tid, t in (raw.get("tables") or {}).items()}
    claims = {k: {kk: str(vv) for kk, vv in v.items()} for k, v in (raw.get("privacy_claims") or {}).items()}
    return tables, claims


def paper_table(table_id: str, where: str) -> PaperTable:
    tables, _ = load_published()
    if table_id not in tables:
        raise ConfigError(f"{where}: unknown published table {table_id!r} (known: {', '.join(sorted(tables))})")
    return tables[table_id]


def resolve_paper_row(ref: str, default_table: str | None, where: str) -> tuple[PaperTable, PaperRow]:
    """``row`` (in ``default_table``) or ``table:row`` -> the table and the row; ConfigError if absent."""
    table_id, _, row_id = ref.rpartition(":") if ":" in ref else (default_table, "", ref)
    if not table_id:
        raise ConfigError(f"{where}: paper_row {ref!r} needs the table's `published:` or the form TABLE:ROW")
    table = paper_table(table_id, where)
    if row_id not in table.rows:
        raise ConfigError(f"{where}: published table {table_id!r} has no row {row_id!r} "
                          f"(rows: {', '.join(table.rows)})")
    return table, table.rows[row_id]
