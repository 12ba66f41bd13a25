"""Every table of the papers with our numbers beside theirs (Markdown, CSV, LaTeX).

A table's rows come from ``params.yaml`` (``tables:``): which paper row each of our runs
reproduces lives there, not here, so adding a sweep value adds a row without code. The
published numbers come from ``published.yaml``; our numbers from ``metrics.json``. A cell
is never blank: a missing run reads "not run", a paper row we do not reproduce "reported
only", a row or column the paper does not have "not reported".
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from dpsynth.config import Experiment, Params, Table, sweep_cell_name
from dpsynth.errors import ConfigError, DataError
from dpsynth.io import atomic_open
from dpsynth.paths import w2_noise_csv
from dpsynth.report.published import PaperTable, load_published, paper_table, resolve_paper_row
from dpsynth.report.runs import (
    METRICS,
    NOT_APPLICABLE,
    NOT_REPORTED,
    NOT_RUN,
    PLOT_ONLY,
    REPORTED_ONLY,
    Run,
    RunStore,
    epsilon_cell,
    fid_reason,
    fmt_mean_std,
    fmt_number,
    metric_cell,
    ordered_conventions,
    scale_cell,
    sigma_cell,
)

LEGEND = ("Cells: 'not run' = our run has no metrics.json yet; 'reported only' = a row the paper quotes "
          "that we do not reproduce; 'not reported' = the paper has no such row or column; "
          "'unavailable' = the metric could not be computed (reason in the notes); "
          "'not evaluated' = the run did not compute it. Ours: mean ± std over the synthetic sets.")


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
    #: grid tables: swept keys, and per row (key values, {metric: ours}, {metric: paper}).
    grid: dict[str, Any] | None = None


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


def _notes(rows_runs: list[tuple[str, Run | None]], papers: list[PaperTable]) -> list[str]:
    notes: list[str] = []
    for p in {p.table_id: p for p in papers}.values():
        notes += [f"{p.source}: {n}" for n in p.notes]
    for label, run in rows_runs:
        reason = fid_reason(run)
        if reason:
            notes.append(f"FID unavailable for {label} ({run.name if run else ''}): {reason}")
    notes += _fid_protocol_notes([run for _, run in rows_runs])
    notes += _scale_notes([run for _, run in rows_runs])
    return notes


def _ours(table: Table) -> list[str]:
    """The configuration's own notes on a table (params.yaml ``tables.<name>.notes``)."""
    return [f"Ours: {n}" for n in table.notes]


def _fid_protocol_notes(runs: list[Run | None]) -> list[str]:
    """The sample counts and network behind our FID cells: FID is biased upward at small N, so a
    cell is only comparable with one computed at the same counts (the papers': 60,000 vs the test split)."""
    seen: dict[tuple[Any, Any, Any], list[str]] = {}
    for run in runs:
        fid = run.metrics.get("fid") if run is not None else None
        if isinstance(fid, dict) and fid.get("available"):
            key = (fid.get("n_synthetic"), fid.get("n_reference"), fid.get("extractor"))
            seen.setdefault(key, []).append(run.name)
    notes = []
    for (n_a, n_b, extractor), names in seen.items():
        notes.append(f"FID ours ({', '.join(names)}): {n_a} generated (or real training) images vs the first "
                     f"{n_b} of the real test split, {extractor}; FID is biased upward at small N, so these "
                     f"read higher than the papers' (60,000 vs the full test split)")
    return notes


def _scale_notes(runs: list[Run | None]) -> list[str]:
    """What a reduced scale changed for our runs (steps, hyperparameters, classifier budget): the
    row still means the paper's method at its privacy target, at a smaller cost."""
    seen: dict[str, list[str]] = {}
    for run in runs:
        if run is None or run.scale == "paper":
            continue
        train = run.metrics.get("train") if isinstance(run.metrics.get("train"), dict) else {}
        preset = run.metrics.get("preset") if isinstance(run.metrics.get("preset"), dict) else {}
        parts = [f"{train['steps']:,} training steps" if isinstance(train.get("steps"), int) else None]
        for key, ov in sorted((train.get("scale_overrides") or {}).items()):
            if isinstance(ov, dict) and "this_scale" in ov:
                value = ov["this_scale"]
                shown = format(value, "g") if isinstance(value, float) else value
                parts.append(f"{key} {shown} (paper {ov.get('paper')})")
        if preset.get("classifier_max_epochs"):
            parts.append(f"MLP/CNN at most {preset['classifier_max_epochs']} epochs on "
                         f"{preset.get('classifier_train_subset') or 'all'} images")
        key = "; ".join(x for x in parts if x)
        if key:
            seen.setdefault(f"scale {run.scale}: {key}", []).append(run.name)
    return [f"Ours at {k} ({', '.join(v)})" for k, v in seen.items()]


# --------------------------------------------------------------------------- table kinds


def _methods_table(name: str, table: Table, params: Params, store: RunStore) -> BuiltTable:
    where = f"tables.{name}"
    default_paper = paper_table(table.published, where) if table.published else None
    dataset = table.dataset or (default_paper.dataset if default_paper else None)
    rows: list[_Row] = []
    for i, r in enumerate(table.rows):
        paper = None
        if r.paper_row is not None:
            pt, prow = resolve_paper_row(r.paper_row, table.published, f"{where}.rows[{i}]")
            paper = (pt, prow.row_id)
        rows.append(_Row(r.label, r.experiment, r.real, paper))
    listed = {r.experiment for r in table.rows}
    rows += [_Row(e, e) for e in _members(params, table) if e not in listed]
    if not rows:
        raise ConfigError(f"{where}: a methods table needs rows, experiments or sweeps")
    records, rows_runs, runs = [], [], []
    for row in rows:
        pt, rid = row.paper if row.paper else (None, None)
        ours_exists = row.experiment is not None or row.real is not None
        run = (store.experiment(row.experiment) if row.experiment else store.real(row.real)) if ours_exists else None
        rows_runs.append((row.label, run))
        if run is not None and row.experiment:
            runs.append((row.label, row.experiment))
        rec: dict[str, str] = {"Method": row.label, "Run": row.experiment or (f"real_{row.real}" if row.real
                                                                              else REPORTED_ONLY)}
        rec["Scale"] = scale_cell(run, params.scale) if ours_exists else REPORTED_ONLY
        rec["ε ours (every convention)"] = epsilon_cell(run, real=row.real is not None) if ours_exists \
            else REPORTED_ONLY
        rec["ε paper"] = _paper_eps(pt, rid, dataset) if rid is not None else NOT_REPORTED
        for metric, label in METRICS.items():
            rec[f"{label} ours"] = metric_cell(run, metric) if ours_exists else REPORTED_ONLY
            rec[f"{label} paper"] = _paper_metric(pt, rid, metric, dataset)
        rec["Paper source"] = f"{pt.source}, row '{pt.rows[rid].left}'" if pt is not None and rid else NOT_REPORTED
        records.append(rec)
    papers = [r.paper[0] for r in rows if r.paper] + ([default_paper] if default_paper else [])
    return BuiltTable(name, table.title, table.paper, pd.DataFrame.from_records(records),
                      [*_notes(rows_runs, papers), *_ours(table)], runs)


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
        rec["ε ours (every convention)"] = epsilon_cell(run) if ours else NOT_RUN
        rec["ε paper"] = _paper_eps(paper, prow_id, dataset) if prow_id else NOT_REPORTED
        paper_vals = {}
        for metric, label in METRICS.items():
            rec[f"{label} ours"] = metric_cell(run, metric) if ours else NOT_RUN
            rec[f"{label} paper"] = _paper_metric(paper, prow_id, metric, dataset)
            paper_vals[metric] = rec[f"{label} paper"]
        rec["Paper source"] = f"{paper.source}, row '{paper.rows[prow_id].left}'" if prow_id else NOT_REPORTED
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
    return BuiltTable(name, table.title, table.paper, pd.DataFrame.from_records(records),
                      [*_notes(rows_runs, [paper]), *_ours(table)], runs, grid={"keys": keys, "cells": cells})


def read_w2_csv(path: Path) -> pd.DataFrame:
    """The W2-vs-noise sweep file: columns ``loss``, ``noise`` (or ``noise_std``), ``w2``;
    optional ``w2_privatized_data``, ``seed``, ``steps``, ``scale``. One row per (loss, noise, seed)."""
    try:
        df = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise DataError(f"{path}: not a readable W2 sweep CSV: {exc}") from None
    if "noise" not in df.columns and "noise_std" in df.columns:
        df = df.rename(columns={"noise_std": "noise"})
    missing = [c for c in ("loss", "noise", "w2") if c not in df.columns]
    if missing:
        raise DataError(f"{path}: W2 sweep CSV lacks column(s) {missing} (has {list(df.columns)})")
    if len(df) and (not pd.api.types.is_numeric_dtype(df["noise"]) or not pd.api.types.is_numeric_dtype(df["w2"])):
        raise DataError(f"{path}: columns noise and w2 must be numeric")
    return df


def w2_skipped_reason(csv_path: Path) -> str | None:
    """Why a W2 sweep has no rows, from the JSON beside its CSV (a sweep limited to other
    scales); None when it ran or the JSON is missing or unreadable."""
    import json

    try:
        info = json.loads(Path(csv_path).with_suffix(".json").read_text())
    except (OSError, ValueError):
        return None
    reason = info.get("skipped") if isinstance(info, dict) else None
    return str(reason) if reason else None


def _w2_table(name: str, table: Table, params: Params, store: RunStore) -> BuiltTable:
    from dpsynth.evaluate.w2 import SWEEP_LOSSES

    where = f"tables.{name}"
    paper = paper_table(table.published, where) if table.published else None
    paper_cell = PLOT_ONLY if paper is not None and paper.plot_only else NOT_REPORTED
    records: list[dict[str, str]] = []
    notes = ([f"{paper.source}: {n}" for n in paper.notes] if paper else []) + _ours(table)
    path = w2_noise_csv(store.results, table.dataset) if table.dataset else None
    df = read_w2_csv(path) if path is not None and path.is_file() else None
    if path is not None and df is not None and df.empty:
        reason = w2_skipped_reason(path) or "the sweep wrote no rows"
        for loss in SWEEP_LOSSES:
            records.append({"Loss": loss, "Noise σ": NOT_RUN, "Run": path.name, "Scale": params.scale,
                            "W2 to clean data ours": NOT_RUN, "W2 paper": paper_cell, "n": "0"})
        notes.append(f"Ours: {path}: {reason}.")
    elif path is not None and df is not None:
        order = {loss: i for i, loss in enumerate(SWEEP_LOSSES)}
        groups = sorted(df.groupby(["loss", "noise"]), key=lambda g: (order.get(g[0][0], 99), str(g[0][0]), g[0][1]))
        for (loss, noise), g in groups:
            w2 = g["w2"].astype(float)
            rec = {"Loss": str(loss), "Noise σ": f"{noise:g}", "Run": f"{path.name}",
                   "Scale": str(g["scale"].iloc[0]) if "scale" in g else "not recorded in the CSV",
                   "W2 to clean data ours": fmt_mean_std(w2.mean(), w2.std(ddof=0) if len(w2) > 1 else 0.0, 3),
                   "W2 paper": paper_cell}
            if "w2_privatized_data" in g:
                pd_w2 = g["w2_privatized_data"].astype(float)
                rec["W2 of the privatized data ours"] = fmt_mean_std(pd_w2.mean(), pd_w2.std(ddof=0), 3)
            if "entropic_w2_privatized" in g and g["entropic_w2_privatized"].notna().any():
                ent = g["entropic_w2_privatized"].astype(float)
                rec["Entropic W2 to held-out privatized data ours"] = fmt_mean_std(ent.mean(), ent.std(ddof=0), 3)
            if "entropic_w2_privatized_clean" in g and g["entropic_w2_privatized_clean"].notna().any():
                ent = g["entropic_w2_privatized_clean"].astype(float)
                rec["Entropic W2 of the clean data itself"] = fmt_mean_std(ent.mean(), ent.std(ddof=0), 3)
            rec["n"] = str(len(g))
            records.append(rec)
        notes.append(f"Ours: {path} (mean ± std over the rows of each (loss, noise)).")
        if "entropic_w2_privatized" in df:
            notes.append("Ours: the entropic W2 column is Fig. 5 (right): W_{2,λ} at λ = 2σ² (seed 003 eq. 8, squared "
                         "units) from the generator to held-out test records privatized with fresh noise; the clean "
                         "held-out records' own value beside it is what a generator of the clean distribution gets.")
    else:
        for loss in SWEEP_LOSSES:
            records.append({"Loss": loss, "Noise σ": NOT_RUN, "Run": NOT_RUN, "Scale": NOT_RUN,
                            "W2 to clean data ours": NOT_RUN, "W2 paper": paper_cell, "n": "0"})
        notes.append(f"Ours: {path if path else 'no dataset: set tables.' + name + '.dataset'} does not exist yet.")
    experiments = params.all_experiments()
    for e in _members(params, table):
        run = store.experiment(e)
        w2 = run.metrics.get("w2") if run is not None else None
        if run is None:
            cell = NOT_RUN
        elif isinstance(w2, int | float):
            cell = fmt_mean_std(float(w2), 0.0, 3)
        elif isinstance(w2, dict) and "mean" in w2:
            cell = fmt_mean_std(float(w2["mean"]), float(w2.get("std", 0.0)), 3)
        elif isinstance(w2, dict) and "w2" in w2:
            cell = fmt_mean_std(float(w2["w2"]), 0.0, 3)
        else:
            cell = "not evaluated"
        local = experiments[e].local
        records.append({"Loss": experiments[e].hparams.loss, "Run": e, "Scale": scale_cell(run, params.scale),
                        "Noise σ": sigma_cell(run) if local is None else
                        f"{local.mechanism} ε={local.epsilon:g}" + (f" δ={local.delta:g}" if local.delta else ""),
                        "W2 to clean data ours": cell, "W2 paper": paper_cell, "n": "1" if run else "0"})
    frame = pd.DataFrame.from_records(records).fillna(NOT_APPLICABLE)
    return BuiltTable(name, table.title, table.paper, frame, notes)


def _privacy_rows(params: Params, table: Table) -> list[str]:
    members = _members(params, table)
    if members:
        return members
    out = list(params.targets)
    for t in params.tables.values():
        if t.kind != "privacy":
            out += [r.experiment for r in t.rows if r.experiment] + _members(params, t)
    return list(dict.fromkeys(out))


def _privacy_table(name: str, table: Table, params: Params, store: RunStore) -> BuiltTable:
    _, claims = load_published()
    experiments = params.all_experiments()
    names = _privacy_rows(params, table)
    if not names:
        raise ConfigError(f"tables.{name}: no runs to list (no targets, no experiments in any table)")
    runs = {e: store.experiment(e) for e in names}
    conventions = set().union(*(set(r.epsilons()) for r in runs.values() if r is not None))
    conventions |= {"rdp_classic", "rdp_modern"}
    for e in names:  # a method's own conventions (GS-WGAN's published and sound accounting)
        conventions |= set(experiments[e].spec.epsilon_conventions)
    conventions.discard("non_private")
    conv = ordered_conventions(conventions)
    records = []
    for e in names:
        exp, run = experiments[e], runs[e]
        priv = (run.privacy or {}) if run else {}
        eps = run.epsilons() if run else {}
        rec: dict[str, str] = {"Run": e, "Method": exp.method, "Dataset": exp.dataset,
                               "Scale": scale_cell(run, params.scale)}
        if run is None:
            rec.update({k: NOT_RUN for k in ("Mechanism", "σ", "q", "Steps", "δ", "Target ε", "Headline")})
        else:
            def val(key: str, fmt: str = "{}") -> str:
                v = priv.get(key)
                return NOT_APPLICABLE if v is None else fmt.format(v)

            rec.update({"Mechanism": val("mechanism"), "σ": sigma_cell(run), "q": val("q", "{:.4g}"),
                        "Steps": val("steps"), "δ": val("delta", "{:g}"), "Target ε": val("target_epsilon", "{:g}"),
                        "Headline": val("headline")})
        for c in conv:
            if run is None:
                rec[f"ε {c}"] = NOT_RUN
            elif set(eps) == {"non_private"}:
                rec[f"ε {c}"] = "∞ (non-private)"
            else:
                rec[f"ε {c}"] = fmt_number(eps[c], 2) if c in eps else NOT_APPLICABLE
        claim = claims.get(f"{exp.method}/{exp.dataset}")
        if not exp.privacy.enabled and exp.local is None:
            claim = {"epsilon": "∞ (non-private)", "source": "non-private run"}
        for col, key in (("Paper ε", "epsilon"), ("Paper δ", "delta"), ("Paper σ", "sigma"), ("Paper steps", "steps")):
            rec[col] = claim.get(key, NOT_REPORTED) if claim else NOT_REPORTED
        if claim and "sigma" in claim and exp.privacy.sigma is not None and \
                not math.isclose(float(claim["sigma"]), exp.privacy.sigma):
            # A sweep cell at another sigma: the paper's main-results sigma/steps do not describe it.
            rec["Paper σ"] = rec["Paper steps"] = f"{NOT_REPORTED} (main setting: σ {claim['sigma']})"
        rec["Paper source"] = claim.get("source", NOT_REPORTED) if claim else NOT_REPORTED
        records.append(rec)
    notes = ["GS-WGAN: 'as_published.*' counts every per-sample release as subsampled at 1/N_d (the paper's "
             "accounting, comparable with its epsilon 10); 'sound.*' counts a step as one release of the shard "
             "(the real guarantee, DESIGN 5.2). rdp_classic is the papers' RDP-to-DP conversion, rdp_modern the "
             "tighter one.", *_ours(table)]
    return BuiltTable(name, table.title, table.paper, pd.DataFrame.from_records(records), notes)


_KINDS = {"methods": _methods_table, "grid": _grid_table, "w2_noise": _w2_table, "privacy": _privacy_table}


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


# --------------------------------------------------------------------------- writing


def check_complete(built: BuiltTable) -> None:
    """The 'never an empty cell' rule, enforced before anything is written."""
    frame = built.frame
    bad = frame.isna() | frame.astype(str).map(lambda s: not s.strip() or s.lower() in ("nan", "none"))
    if bad.to_numpy().any():
        r, c = map(int, next(zip(*bad.to_numpy().nonzero())))
        raise DataError(f"table {built.name}: empty cell at row {r}, column {frame.columns[c]!r}")


def to_markdown(built: BuiltTable, scale: str) -> str:
    lines = [f"# {built.title}", "", f"Paper: {built.paper}. Our runs: scale `{scale}` unless the Scale column "
             f"says otherwise.", "", built.frame.to_markdown(index=False), "", LEGEND]
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
