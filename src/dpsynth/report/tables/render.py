"""Writing a built table: Markdown (title, legend, notes), CSV and LaTeX, each written
atomically after the never-an-empty-cell check, and the index page listing every table."""

from __future__ import annotations

import csv
from pathlib import Path

from dpsynth.errors import DataError
from dpsynth.io import atomic_open
from dpsynth.report.tables.common import BuiltTable

LEGEND = ("Cells: 'not run' = our run has no metrics.json yet; 'reported only' = a row the paper quotes "
          "that we do not reproduce; 'not reported' = the paper has no such row or column; "
          "'unavailable' = the metric could not be computed (reason in the notes); "
          "'not evaluated' = the run did not compute it. Ours, with their counts: 'x (1 run)' is one training run "
          "scored on one synthetic set (no spread is known); 'x ± s (1 run, std over S sets)' is one run, s the "
          "spread over its S synthetic sets (sample draws of one generator, not another training run); "
          "'x ± s (R runs)' is the mean over R training runs and s their standard deviation (ddof 1), the spread "
          "within a run given apart. A row's R runs are its experiment and the cells of each sweep over `seed` "
          "alone based on it.")


def check_complete(built: BuiltTable) -> None:
    """The 'never an empty cell' rule, enforced before anything is written."""
    frame = built.frame
    bad = frame.isna() | frame.astype(str).map(lambda s: not s.strip() or s.lower() in ("nan", "none"))
    if bad.to_numpy().any():
        r, c = map(int, next(zip(*bad.to_numpy().nonzero())))
        raise DataError(f"table {built.name}: empty cell at row {r}, column {frame.columns[c]!r}")


def to_markdown(built: BuiltTable, scale: str) -> str:
    lines = [f"# {built.title}", "", f"Paper: {built.paper}. Our runs: scale `{scale}` unless the Scale column "
             f"says otherwise.", "", built.frame.to_markdown(index=False, disable_numparse=True), "", LEGEND]
    if built.notes:
        lines += ["", "Notes:", ""] + [f"- {n}" for n in built.notes]
    return "\n".join(lines) + "\n"


def _latex_escape(s: str) -> str:
    out = s
    for a, b in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("$", r"\$"), ("#", r"\#"),
                 ("_", r"\_"), ("{", r"\{"), ("}", r"\}"), ("~", r"\textasciitilde{}"), ("^", r"\^{}")):
        out = out.replace(a, b)
    for a, b in (("±", r"$\pm$"), ("∞", r"$\infty$"), ("ε", r"$\varepsilon$"), ("σ", r"$\sigma$"),
                 ("δ", r"$\delta$")):
        out = out.replace(a, b)
    return out


def to_latex(built: BuiltTable) -> str:
    """A plain tabular (no package beyond booktabs) with every cell escaped."""
    cols = [_latex_escape(str(c)) for c in built.frame.columns]
    body = [" & ".join(_latex_escape(str(v)) for v in row) + r" \\" for row in built.frame.itertuples(index=False)]
    return "\n".join([r"\begin{table}[ht]", r"\centering", r"\scriptsize",
                      rf"\caption{{{_latex_escape(built.title)} ({_latex_escape(built.paper)})}}",
                      rf"\label{{tab:{built.name}}}", r"\begin{tabular}{" + "l" * len(cols) + "}", r"\toprule",
                      " & ".join(cols) + r" \\", r"\midrule", *body, r"\bottomrule", r"\end{tabular}",
                      r"\end{table}"]) + "\n"


def write_table(built: BuiltTable, out_dir: Path, scale: str) -> list[Path]:
    """``{name}.md``, ``{name}.csv`` and ``{name}.tex``, each written atomically."""
    check_complete(built)
    out_dir = Path(out_dir)
    paths = [out_dir / f"{built.name}.{ext}" for ext in ("md", "csv", "tex")]
    with atomic_open(paths[0]) as fh:
        fh.write(to_markdown(built, scale))
    with atomic_open(paths[1]) as fh:
        built.frame.to_csv(fh, index=False, quoting=csv.QUOTE_MINIMAL, lineterminator="\n")
    with atomic_open(paths[2]) as fh:
        fh.write(to_latex(built))
    return paths


#: The page listing every deviation from the papers (linked from the README and the report).
DEVIATIONS = "docs/deviations.md"


def write_index(built: dict[str, BuiltTable], out_dir: Path, scale: str) -> Path:
    """``index.md``: every table in one page, in params.yaml order."""
    path = Path(out_dir) / "index.md"
    with atomic_open(path) as fh:
        fh.write(f"# Tables (scale `{scale}`)\n\n")
        for b in built.values():
            fh.write(f"- [{b.title}]({b.name}.md) — {b.paper}\n")
        fh.write(f"\nEvery difference from the papers and the authors' code, with its reason: {DEVIATIONS}\n")
    return path
