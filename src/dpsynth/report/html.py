"""The report's HTML: a table as a page of its own (``results/tables/{name}.html``, what Snakemake's
report shows in its page) and the first page's part that depends on the runs (``overview.html``), both
written with the page's ``page.json`` by :func:`write_page` from the page ``dpsynth.report.page`` orders
(this module renders that page; the page does not import it).

Written with jinja2 (autoescaping every value) and pandas' ``to_html`` (escaping every cell and
header): a run name, a note or a configured title reaches the page as text, never as markup. A note's
`code spans` (the Markdown version's backticks) become ``<code>``. The table's page is self-contained
(its style inline): Snakemake shows it in a frame from a data URI, where no other file can be fetched.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

import jinja2
from markupsafe import Markup, escape

from dpsynth.io import atomic_open
from dpsynth.report.page import CLAIM_PREFIX, OVERVIEW_FILE, PAGE_FILE, Page, manifest
from dpsynth.report.tables.render import DEVIATIONS, LEGEND

if TYPE_CHECKING:
    from dpsynth.report.tables import BuiltTable

_ENV = jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)

def note_html(text: str) -> Markup:
    """A note as HTML: escaped, its `code spans` as ``<code>``."""
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an odd number of backticks: no spans, all text
        return Markup(escape(text))
    return Markup("").join(Markup("<code>{}</code>").format(p) if i % 2 else escape(p) for i, p in enumerate(parts))


_ENV.filters["note"] = note_html


_TABLE = _ENV.from_string("""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{ heading }}</title>
<style>
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1em 1.5em; color: #1e293b; }
h1 { font-size: 1.3em; margin: 0 0 .3em; }
h2 { font-size: 1.05em; margin: 1.2em 0 .3em; }
.meta, .legend { color: #475569; }
.none { background: #fef3c7; padding: .4em .6em; border-left: 4px solid #d97706; }
.scroll { overflow-x: auto; }
table.results { border-collapse: collapse; font-size: 13px; width: max-content; }
table.results th, table.results td { border: 1px solid #cbd5e1; padding: .25em .5em; text-align: left;
  vertical-align: top; min-width: 6em; max-width: 30em; }
table.results thead th { background: #e2e8f0; position: sticky; top: 0; }
{% for i in ours %}
table.results td:nth-child({{ i }}), table.results th:nth-child({{ i }}) { background: #dbeafe; }
{% endfor %}
{% for i in paper_columns %}
table.results td:nth-child({{ i }}), table.results th:nth-child({{ i }}) { background: #f1f5f9; }
{% endfor %}
li.claim { background: #ecfdf5; border-left: 4px solid #059669; padding: .2em .5em; list-style: none;
  margin-left: -1em; }
code { background: #f1f5f9; padding: 0 .2em; border-radius: 3px; }
</style>
</head>
<body>
<h1>{{ heading }}</h1>
<p class="meta">Paper: {{ paper }}. Our runs: scale <code>{{ scale }}</code> unless the Scale column says
otherwise. Our columns (<b>ours</b>, shaded blue) stand beside the paper's (grey). The same table:
<code>results/tables/{{ name }}.md</code>, <code>.csv</code>, <code>.tex</code>.</p>
{% if not has_ours %}
<p class="none">No run of ours at scale <code>{{ scale }}</code>: this table shows the paper's numbers only. The
report's first page lists it with the scale or target that runs it.</p>
{% endif %}
<div class="scroll">{{ table }}</div>
<p class="legend">{{ legend }}</p>
{% if notes %}
<h2>Notes</h2>
<ul>
{% for claim, note in notes %}
<li{% if claim %} class="claim"{% endif %}>{{ note }}</li>
{% endfor %}
</ul>
{% endif %}
<p class="meta">Every difference from the papers, with its reason: <code>{{ deviations }}</code> in the repository.</p>
</body>
</html>
""")

_OVERVIEW = _ENV.from_string("""<section id="dpsynth-overview">
<h2>What ran</h2>
<p>Scale <code>{{ page.scale }}</code>, privacy noise <code>{{ page.privacy_noise }}</code>: {{ page.runs|length }}
run{{ "" if page.runs|length == 1 else "s" }} of ours evaluated
{%- if page.runs %} ({{ page.runs|join(", ") }}){% endif %}.
Tables with numbers of ours, by paper (each paper is a category of the menu; a table opens in the page with its
notes):</p>
<ul>
{% for category, entries in page.groups if entries|selectattr("built.ours")|list %}
<li><b>{{ category }}</b>:
{% for e in entries if e.built.ours %}{{ e.ref ~ " " if e.ref }}(<code>{{ e.name }}</code>: {{ e.built.ours }} of
{{ e.built.frame|length }} rows with our numbers){{ "; " if not loop.last }}{% endfor %}</li>
{% else %}
<li>none: no run of ours has metrics yet.</li>
{% endfor %}
</ul>
<h2>Claims and their verdicts</h2>
<p>Each claim of a paper that a table with runs of ours checks, with the verdict of the claim checker
(<code>dpsynth.report.claims</code>): <i>holds</i> or <i>does not hold</i> where the difference's 95 % interval
settles it, <i>undecided</i> where it does not; each note gives the difference, its interval and the rule ("not
checked" says what is missing):</p>
<ul>
{% for e, note in page.claims() %}
<li>{{ e.ref ~ " " if e.ref }}(<code>{{ e.name }}</code>): {{ note|note }}</li>
{% else %}
<li>none: no table with a run of ours states a claim at this scale.</li>
{% endfor %}
</ul>
{% set unchecked = page.claims(ours=False) %}
{% if unchecked %}
<p>{{ unchecked|length }} more claim{{ "s are" if unchecked|length > 1 else " is" }} stated by tables with no run
of ours at this scale, not checked:
{% for e, _ in unchecked %}<code>{{ e.name }}</code>{{ ", " if not loop.last }}{% endfor %} (the list
below says what runs them).</p>
{% endif %}
<h2>Not run at scale {{ page.scale }}</h2>
<p>{{ tables_not_run }} of {{ tables }} tables have no run of ours at this scale: they show the paper's numbers
with ours "not run", and have no figure. Each line says what runs it.</p>
<ul>
{% for n in page.not_run %}
<li><b>{{ n.what }}</b>: {{ n.why }}.{% if n.how %} Runs it: {{ n.how|note }}.{% endif %}</li>
{% else %}
<li>nothing: every table has a run of ours.</li>
{% endfor %}
</ul>
</section>
""")



def _columns(built: BuiltTable, word: str) -> list[int]:
    """1-based positions of the columns whose header has ``word`` (ours / paper) as a word."""
    pattern = re.compile(rf"\b{word}\b", re.IGNORECASE)
    return [i for i, c in enumerate(built.frame.columns, 1) if pattern.search(str(c))]


def table_document(built: BuiltTable, ref: str, scale: str) -> str:
    """``{name}.html``: the table, its legend and its notes, the claim notes marked."""
    ours = _columns(built, "ours")
    html = built.frame.to_html(index=False, escape=True, border=0, classes="results", na_rep="")
    return _TABLE.render(heading=f"{ref}: {built.title}" if ref else built.title, paper=built.paper, scale=scale,
                         name=built.name, has_ours=bool(built.ours), table=Markup(html), legend=LEGEND,
                         ours=ours, paper_columns=[i for i in _columns(built, "paper") if i not in ours],
                         notes=[(n.startswith(CLAIM_PREFIX), note_html(n)) for n in built.notes],
                         deviations=DEVIATIONS)


def overview_fragment(page: Page) -> str:
    """``overview.html``: what ran, the claims, the one not-run list (workflow/report/workflow.rst includes it)."""
    tables = sum(len(es) for _, es in page.groups)
    return _OVERVIEW.render(page=page, tables=tables,
                            tables_not_run=sum(1 for _, es in page.groups for e in es if not e.built.ours))


def write_page(page: Page, built: dict[str, BuiltTable], out_dir: Path) -> list[Path]:
    """``{name}.html`` per table, ``overview.html`` and ``page.json`` (the page's ``manifest``, which
    workflow/rules/report.smk reads) into ``out_dir``, each atomically."""
    written = []
    for _, es in page.groups:
        for e in es:
            path = Path(out_dir) / f"{e.name}.html"
            with atomic_open(path) as fh:
                fh.write(table_document(built[e.name], e.ref, page.scale))
            written.append(path)
    for name, text in ((OVERVIEW_FILE, overview_fragment(page)),
                       (PAGE_FILE, json.dumps(manifest(page), indent=1, ensure_ascii=False) + "\n")):
        with atomic_open(Path(out_dir) / name) as fh:
            fh.write(text)
        written.append(Path(out_dir) / name)
    return written
