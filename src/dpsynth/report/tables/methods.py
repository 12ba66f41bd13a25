"""``kind: methods`` tables: one row per method of a paper's results table -- the rows
params.yaml lists, each tied to a paper row or to one of our runs or both, then every
experiment or sweep cell of the table not listed -- with our cells beside the paper's, and
beside FID our KID, FID-infinity, precision and recall (no paper column: the papers report none of them). A table with
``protocol: gs_wgan`` has GS-WGAN Table 1's columns instead (``gswgan``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import pandas as pd

from dpsynth.config import Params, Table
from dpsynth.errors import ConfigError
from dpsynth.evaluate.record import GS_WGAN
from dpsynth.report.ledger import compose_runs
from dpsynth.report.claims import Estimate, all_of, claim_note, compare, estimate_of_records
from dpsynth.report.published import paper_table, resolve_paper_row
from dpsynth.report.runs import (
    METRICS,
    NOT_REPORTED,
    REPORTED_ONLY,
    SMALL_N_METRICS,
    Run,
    RunStore,
    fmt_number,
    metric_cell,
    metric_record,
    scale_cell,
    table_epsilon_cell,
)
from dpsynth.report.tables.common import (
    EPS_OURS,
    BuiltTable,
    _epsilon_notes,
    _members,
    _paper_eps,
    _paper_metric,
    _paper_source,
    _result_first,
    _Row,
)
from dpsynth.report.tables.gswgan import GSWGAN_METRICS, gswgan_cell, gswgan_notes
from dpsynth.report.tables.notes import _notes, _ours


def _epsilon_of_runs(runs: list[Run], *, real: bool) -> str:
    """The per-run epsilon cell in the table's own convention, and for R > 1 training runs what publishing
    all R costs (each run is its own release: ``ledger.compose_runs``, the privacy ledger's composition; how it
    was composed goes to the notes, :func:`_together_note`)."""
    cell = table_epsilon_cell(runs[0] if runs else None, real=real)
    if len(runs) < 2 or real:
        return cell
    together = compose_runs(runs)
    eps = "∞" if math.isinf(together.epsilon) else fmt_number(together.epsilon, 2)
    return f"per run: {cell}; the {len(runs)} runs together: ε={eps}"


def _together_note(label: str, runs: list[Run]) -> str:
    """How a row's R training runs' epsilon was composed (the cell gives the total)."""
    return f"ε ours of {label}: the {len(runs)} runs together by {compose_runs(runs).how}"


#: What a central-DP methods table prints, as "the generator is closer to the data" reads on each: (metric, how a
#: note names it, the rule, the factor the table prints it with).
CENTRAL_MEASURES: tuple[tuple[str, str, str, float], ...] = (
    ("logreg", "LogReg accuracy (%), higher is closer", "greater", 100.0),
    ("mlp", "MLP accuracy (%), higher is closer", "greater", 100.0),
    ("cnn", "CNN accuracy (%), higher is closer", "greater", 100.0),
    ("fid", "FID, lower is closer", "less", 1.0),
    ("kid", "KID ×10³, lower is closer", "less", 1000.0),
    ("fid_inf", "FID∞, lower is closer", "less", 1.0),
    ("precision", "precision, higher is closer", "greater", 1.0),
    ("recall", "recall, higher is closer", "greater", 1.0),
)
BASELINE_CLAIM = ("every private generator of the table is closer to the data than the trivial baseline released "
                  "at the same privacy target")


def _scaled(e: Estimate, factor: float) -> Estimate:
    return replace(e, value=e.value * factor, se=None if e.se is None else e.se * factor,
                   by_seed=tuple((k, v * factor) for k, v in e.by_seed))


def baseline_claims(generators: Sequence[tuple[str, list[Run]]], baselines: Sequence[tuple[str, list[Run]]], *,
                    source: str = "ours") -> list[str]:
    """One claim note per measure the rows carry: each private generator row against the best trivial baseline row
    on that measure (``MethodSpec.trivial_baseline``: the class-conditional Gaussian of ``methods.central_baseline``),
    decided by the one checker (``claims.compare``). Welch: a generator and the baseline share the data but no noise
    instance, so nothing pairs; a row of one training run and one synthetic set has no noise estimate and reads
    undecided, saying so."""
    notes = []
    for metric, what, rule, factor in CENTRAL_MEASURES:
        def estimate(runs: list[Run]) -> Estimate:
            recs = [metric_record(r, metric) for r in runs]
            return _scaled(estimate_of_records([r if isinstance(r, dict) else None for r in recs]), factor)

        gens = {label: e for label, runs in generators if math.isfinite((e := estimate(runs)).value)}
        bases = {label: e for label, runs in baselines if math.isfinite((e := estimate(runs)).value)}
        if not gens or not bases:
            continue
        best = (min if rule == "less" else max)(bases, key=lambda label: bases[label].value)
        name = best if len(bases) > 1 else "the baseline"
        parts = [compare(e, bases[best], rule, what=f"{label} - {name}") for label, e in gens.items()]  # type: ignore[arg-type]
        notes.append(claim_note(source, f"{BASELINE_CLAIM}, on {what.split(',')[0]}",
                                all_of(parts, "every private generator"), digits=2,
                                details=f"({what}; each generator row minus the best baseline row on this measure.)"))
    return notes


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
    listed = {x for r in table.rows if r.experiment for x in params.replicates_of(r.experiment)}
    members = [e for e in _members(params, table) if e not in listed]
    repeats = {x for e in members for x in params.replicates_of(e)[1:]}  # a member's seed cells join its row
    rows += [_Row(e, e) for e in members if e not in repeats]
    if not rows:
        raise ConfigError(f"{where}: a methods table needs rows, experiments or sweeps")
    gswgan = table.protocol == GS_WGAN  # the evaluation protocol of GS-WGAN's Table 1 (not a mechanism)
    # GS-WGAN's Calibrated Acc divides by the table's real-data row (or the dataset's, if it lists none)
    real_name = next((r.real for r in rows if r.real is not None), dataset)
    real_run = store.real(real_name) if gswgan and real_name else None
    records, rows_runs, runs, together = [], [], [], []
    generators: list[tuple[str, list[Run]]] = []
    baselines: list[tuple[str, list[Run]]] = []
    experiments = params.all_experiments()
    for row in rows:
        pt, rid = row.paper if row.paper else (None, None)
        ours_exists = row.experiment is not None or row.real is not None
        reps = [r for r in (store.experiment(e) for e in params.replicates_of(row.experiment)) if r is not None] \
            if row.experiment else [r for r in (store.real(row.real),) if r is not None] if row.real else []
        run = reps[0] if reps else None  # the row's first run: its scale and per-run epsilon
        rows_runs.append((row.label, run))
        if run is not None and row.experiment:
            runs.append((row.label, row.experiment))
        rec: dict[str, str] = {"Method": row.label, "Run": row.experiment or (f"real_{row.real}" if row.real
                                                                              else REPORTED_ONLY)}
        rec["Scale"] = scale_cell(run, params.scale) if ours_exists else REPORTED_ONLY
        rec[EPS_OURS] = _epsilon_of_runs(reps, real=row.real is not None) if ours_exists \
            else REPORTED_ONLY
        # (GS-WGAN's Table 1 prints its epsilon in the caption, which does not cover its Real row)
        rec["ε paper"] = _paper_eps(pt, rid, dataset) if rid is not None and not (gswgan and row.real) \
            else NOT_REPORTED
        for metric, label in GSWGAN_METRICS.items() if gswgan else ():
            rec[f"{label} ours"] = gswgan_cell(run, real_run, metric) if ours_exists else REPORTED_ONLY
            rec[f"{label} paper"] = _paper_metric(pt, rid, metric, dataset)
            if metric == "fid":  # KID, FID-infinity, precision and recall beside FID here too (ours only)
                for small, small_label in SMALL_N_METRICS.items():
                    rec[f"{small_label} ours"] = gswgan_cell(run, real_run, small) if ours_exists else REPORTED_ONLY
        for metric, label in () if gswgan else METRICS.items():
            rec[f"{label} ours"] = metric_cell(reps, metric) if ours_exists else REPORTED_ONLY
            rec[f"{label} paper"] = _paper_metric(pt, rid, metric, dataset)
            if metric == "fid":  # KID, FID-infinity, precision and recall beside FID; ours only (no paper column)
                for extra, extra_label in SMALL_N_METRICS.items():
                    rec[f"{extra_label} ours"] = metric_cell(reps, extra) if ours_exists else REPORTED_ONLY
        rec["Paper source"] = _paper_source(pt, rid) if pt is not None and rid else NOT_REPORTED
        records.append(rec)
        if len(reps) > 1 and row.experiment:
            together.append(_together_note(row.label, reps))
        exp = experiments.get(row.experiment) if row.experiment and reps else None
        if exp is not None and exp.spec.trivial_baseline:
            baselines.append((row.label, reps))
        elif exp is not None and exp.privacy.enabled:
            generators.append((row.label, reps))
    papers = [r.paper[0] for r in rows if r.paper] + ([default_paper] if default_paper else [])
    notes = [*_notes(rows_runs, papers, fid=False), *gswgan_notes(rows_runs, real_run, real_name)] if gswgan \
        else _notes(rows_runs, papers, small_n=True)
    notes += [*_epsilon_notes(rows_runs), *together]
    if baselines and not gswgan:
        notes += baseline_claims(generators, baselines)
    frame = _result_first(pd.DataFrame.from_records(records), ["Method"])
    return BuiltTable(name, table.title, table.paper, frame, [*notes, *_ours(table)], runs,
                      ours=sum(run is not None for _, run in rows_runs))
