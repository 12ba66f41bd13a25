"""The report page a reader opens (`snakemake --report`): which paper each table and figure belongs
to, in what order they come, what the first page says, and the files that carry it.

`dpsynth report` writes, beside each table's ``{name}.md``/``.csv``/``.tex`` (``dpsynth.report.html.write_page``):

- ``{name}.html``: the table with its legend and notes, ours beside the papers' (``dpsynth.report.html``),
  which Snakemake's report shows in the page (a CSV it only offers as a download);
- ``overview.html``: the first page's part that depends on the runs -- what ran, the claims the tables
  check, and ONE list of what did not run at this scale with the scale or target that runs it
  (``dpsynth.report.not_run``); workflow/report/workflow.rst includes it;
- ``page.json``: each table's and figure's category and label, which workflow/rules/report.smk reads
  through :func:`table_category` and its siblings (Snakemake sorts categories and labels as text, so
  both carry their rank).

Order: one category per paper (published.yaml ``papers``), the papers with a run of ours first, then
the privacy tables, then the papers with none; within a paper the tables with a run of ours first, each
by its number in the paper, each table's figures right after it. A table without a run of ours has no
figure; it and every figure not drawn are in the not-run list instead.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the Snakemake hooks below run at `snakemake --report` time: no heavy imports there
    from dpsynth.config import Params
    from dpsynth.report.figures import Figure
    from dpsynth.report.tables import BuiltTable

PAGE_FILE = "page.json"
OVERVIEW_FILE = "overview.html"
#: the one label key of every table's and figure's entry (a second key could become a toggle in
#: Snakemake's report, which hides entries behind it when a label has exactly two values)
LABEL = "table or figure"
PRIVACY = "privacy"
_GROUP_TITLES = {PRIVACY: "Privacy: every run's epsilon, the ledger, utility against epsilon",
                 "ours": "Ours (no paper table)"}
CLAIM_PREFIX = "Claim ("
#: the category of the runs' training-curve figures (``dpsynth.report.figures.TRAINING``)
TRAINING_CATEGORY = "Training curves"


@dataclass(frozen=True)
class Entry:
    """One table on the page: its paper, its number there, and its place."""

    built: BuiltTable
    group: str
    ref: str
    number: int
    rank: int = 0

    @property
    def name(self) -> str:
        return self.built.name

    def label(self, scale: str) -> str:
        """The page's label: rank (Snakemake sorts labels as text), the paper's table, its name, ours.
        Short: the report's menu widens to its longest label (the title is the table page's heading)."""
        ref = f"{self.ref} " if self.ref else ""
        ours = (f"ours: {self.built.ours} of {len(self.built.frame)} rows" if self.built.ours
                else f"not run at {scale}")
        return _plain(f"{self.rank:02d} {ref}({self.name}) · {ours}")


@dataclass(frozen=True)
class NotRun:
    """One line of the not-run list: what, why, and what runs it."""

    what: str
    why: str
    how: str


@dataclass
class Page:
    scale: str
    privacy_noise: str
    runs: list[str]
    groups: list[tuple[str, list[Entry]]]
    #: every drawn figure: (its file's stem, category, labels)
    figures: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    not_run: list[NotRun] = field(default_factory=list)

    def claims(self, ours: bool = True) -> list[tuple[Entry, str]]:
        """Every claim note ("Claim (...): ... Ours: ...") of the tables with a run of ours (``ours``
        False: of those without, whose notes can only say "not checked"), with its table."""
        return [(e, n) for _, entries in self.groups for e in entries for n in e.built.notes
                if n.startswith(CLAIM_PREFIX) and bool(e.built.ours) == ours]

    def category_of(self, name: str) -> str:
        return next(cat for cat, entries in self.groups if any(e.name == name for e in entries))


def _plain(text: str) -> str:
    """A category or label as Snakemake can take it: it formats both as wildcard patterns."""
    return text.replace("{", "(").replace("}", ")")


def _number(ref: str) -> int:
    m = re.search(r"\d+", ref)
    return int(m.group()) if m else 0


def _entry(params: Params, built: BuiltTable) -> Entry:
    from dpsynth.report.published import load_published

    table = params.tables.get(built.name)
    if table is None or table.kind == "privacy":  # the privacy ledger, or every run's epsilon
        return Entry(built, PRIVACY, "", 0)
    if table.published is None:
        return Entry(built, "ours", "", 0)
    paper = load_published()[0][table.published]
    return Entry(built, paper.paper, paper.table, _number(paper.table))


def build_page(params: Params, built: dict[str, BuiltTable], figures: list[Figure], runs: list[str]) -> Page:
    """The page's order and the not-run list from the built tables and the figures' outcome."""
    from dpsynth.report.figures import TRAINING
    from dpsynth.report.not_run import how_to_run
    from dpsynth.report.plotting import NotDrawn

    order = {name: i for i, name in enumerate(built)}
    groups: dict[str, list[Entry]] = {}
    for b in built.values():
        e = _entry(params, b)
        groups.setdefault(e.group, []).append(e)
    first = {g: min(order[e.name] for e in es) for g, es in groups.items()}
    ranked = sorted(groups, key=lambda g: (not any(e.built.ours for e in groups[g]), g == PRIVACY, first[g]))
    titles = {**_paper_titles(), **_GROUP_TITLES}
    page = Page(params.scale, params.privacy_noise, runs, [])
    for i, g in enumerate(ranked, 1):
        es = sorted(groups[g], key=lambda e: (not e.built.ours, e.number, order[e.name]))
        page.groups.append((_plain(f"{i}. {titles.get(g, g)}"),
                            [Entry(e.built, e.group, e.ref, e.number, rank) for rank, e in enumerate(es, 1)]))
    by_name = {e.name: (cat, e) for cat, es in page.groups for e in es}
    for _, es in page.groups:
        page.not_run += [NotRun(f"{e.ref + ': ' if e.ref else ''}{e.built.title} ({e.name})",
                                f"no run of ours at scale {params.scale}",
                                how_to_run(params, e.name) if e.name in params.tables else "")
                         for e in es if not e.built.ours]
    privacy = next(((cat, es) for cat, es in page.groups if es[0].group == PRIVACY), ("Figures", []))
    rank = len(privacy[1])  # the figures of no one table rank after the privacy tables
    for f in figures:
        if isinstance(f.out, NotDrawn):
            if not (f.table in by_name and not by_name[f.table][1].built.ours):  # else the table's line says it
                page.not_run.append(NotRun(f"figure {f.out.path.name}: {f.out.title}", f.out.reason,
                                           _figure_how(params, f)))
        elif not f.drawn:
            continue  # a CSV for `dvc plots`
        elif f.table in by_name:
            cat, e = by_name[f.table]
            page.figures.append((f.out.stem, cat, {LABEL: f"{e.label(params.scale)} · figure: {f.shows}"}))
        elif f.shows == TRAINING:
            run_name = _plain(f.out.stem.removeprefix("training_"))
            page.figures.append((f.out.stem, TRAINING_CATEGORY, {"run": run_name}))
        else:
            rank += 1
            page.figures.append((f.out.stem, privacy[0], {LABEL: _plain(f"{rank:02d} figure: {f.shows} ({f.out.stem})")}))
    return page


def _paper_titles() -> dict[str, str]:
    """published.yaml's papers: key -> how the paper is cited."""
    from dpsynth.report.published import load_published

    return {t.paper: t.citation for t in load_published()[0].values()}


def _figure_how(params: Params, f: Figure) -> str:
    from dpsynth.report.figures import TRAINING
    from dpsynth.report.not_run import how_to_run, pipeline_command

    if f.shows == TRAINING:
        return f"`{pipeline_command(params.scale)}` trains it at this scale (a pipeline target); it has not finished"
    if f.table is not None and f.table in params.tables:
        return how_to_run(params, f.table)
    return f"the pipeline's runs of this method and dataset at several target epsilons (`{pipeline_command(params.scale)}`)"


def manifest(page: Page) -> dict[str, Any]:
    """``page.json``: every table's and drawn figure's category and labels, for workflow/rules/report.smk."""
    return {"tables": {e.name: {"category": cat, "labels": {LABEL: e.label(page.scale)}}
                       for cat, es in page.groups for e in es},
            "figures": {stem: {"category": cat, "labels": labels} for stem, cat, labels in page.figures}}


# --------------------------------------------------------------------------- Snakemake's report hooks
# workflow/rules/report.smk passes these as report(category=..., labels=...): Snakemake calls each with the
# wildcards of one file of the folder (its pattern's {name}) and the rule's output, after the report ran.

def _lookup(output: Any, section: str, name: str) -> dict[str, Any]:
    path = Path(str(output.tables)) / PAGE_FILE
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))[section][name]
    except (OSError, ValueError, KeyError) as exc:
        raise ValueError(f"{path}: no {section[:-1]} {name!r} ({type(exc).__name__}: {exc}); re-run "
                         "`dpsynth report`, which writes the folder and this file together") from None
    return dict(entry)


def table_category(wildcards: Any, output: Any) -> str:
    return str(_lookup(output, "tables", wildcards.name)["category"])


def table_labels(wildcards: Any, output: Any) -> dict[str, str]:
    return dict(_lookup(output, "tables", wildcards.name)["labels"])


def figure_category(wildcards: Any, output: Any) -> str:
    return str(_lookup(output, "figures", wildcards.name)["category"])


def figure_labels(wildcards: Any, output: Any) -> dict[str, str]:
    return dict(_lookup(output, "figures", wildcards.name)["labels"])
