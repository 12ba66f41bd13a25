"""``kind: w2_noise`` tables: Reshetova et al. (arXiv:2306.09547) Fig. 5, the generator's W2 to
the clean data against the noise level, from the W2 sweep's CSV (``dpsynth w2noise``), plus the
W2 of each experiment the table lists. The CSV reader and the sweep's reason for writing no
rows are here too; the figures use them as well."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from dpsynth.config import Params, Table
from dpsynth.errors import DataError
from dpsynth.paths import OUTSIDE_GUARANTEE, w2_noise_csv
from dpsynth.report.claims import Estimate, estimate_of_records
from dpsynth.report.published import paper_table
from dpsynth.report.runs import (
    NOT_APPLICABLE,
    NOT_REPORTED,
    NOT_RUN,
    PLOT_ONLY,
    Run,
    RunStore,
    fmt_summary,
    fmt_values,
    scale_cell,
    sigma_cell,
)
from dpsynth.report.tables.common import BuiltTable, _members, _result_first
from dpsynth.report.tables.notes import _ours


def read_w2_csv(path: Path, role: str | None = "figure") -> pd.DataFrame:
    """The W2-vs-noise sweep file: columns ``loss``, ``noise`` (or ``noise_std``), ``w2``;
    optional ``w2_privatized_data``, ``seed``, ``steps``, ``scale``, ``role``. One row per (loss, noise, seed)
    of ``role``: ``figure`` (Fig. 5's points; a file without the column holds only those) or ``step_check``
    (the runs at twice the steps); ``None``: every row (split them with :func:`rows_of_role`)."""
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
    return df if role is None else rows_of_role(df, role)


def rows_of_role(df: pd.DataFrame, role: str) -> pd.DataFrame:
    """The sweep rows of one ``role`` (a file without the column holds only ``figure`` rows)."""
    if "role" not in df.columns:
        return df if role == "figure" else df.iloc[0:0]
    return df[df["role"].fillna("figure") == role].reset_index(drop=True)


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


def w2_record(run: Run | None) -> dict[str, Any] | None:
    """A run's W2 to the clean data as a metric record (``{"mean", "std", "n", "values"}`` over its synthetic
    sets; an older plain number as one set), None when it has none."""
    w2 = run.metrics.get("w2") if run is not None else None
    if isinstance(w2, int | float) and not isinstance(w2, bool):
        return {"mean": float(w2), "n": 1}
    if isinstance(w2, dict) and "mean" in w2:
        return w2
    if isinstance(w2, dict) and "w2" in w2:
        return {"mean": float(w2["w2"]), "n": 1}
    return None


def w2_of(run: Run | None) -> float | None:
    """A run's W2 to the clean data (the mean over its synthetic sets), None when it has none."""
    rec = w2_record(run)
    return float(rec["mean"]) if rec is not None else None


def w2_estimate(runs: Sequence[Run | None]) -> Estimate:
    """A setting's W2 from its training runs, for the claim checker (``claims.estimate_of_records``)."""
    return estimate_of_records([w2_record(r) for r in runs])


def w2_cell(runs: Run | Sequence[Run | None] | None) -> str:
    """The W2 cell of a setting's training runs (one run or several, with their counts), or why there is none."""
    found = [runs] if isinstance(runs, Run) else [r for r in (runs or []) if r is not None]
    if not found:
        return NOT_RUN
    recs = [r for r in (w2_record(run) for run in found) if r is not None]
    return fmt_summary(recs, digits=3) if recs else "not evaluated"


#: The second measure's columns (``evaluate.closeness``): KID, shown x 10^3 as the FID tables show it.
KID_COLUMN = "KID ×10³ to clean data ours"
PR_COLUMN = "Precision / recall ours"
SECOND_MEASURE_NOTE = (
    "Ours: the second measure, beside the paper's W2 (which rewards blur, see the reference rows): KID ×10³ "
    "(Binkowski et al., ICLR 2018, arXiv:1801.01401) with precision / recall (Kynkäänniemi et al., NeurIPS 2019, "
    "arXiv:1904.06991, k = 3), on the same generated records as W2, in the 64-d pooled last-convolution features of "
    "the project's CNN fitted on one half of the MNIST test split, against the other half (no training record "
    "enters the measure; dpsynth.evaluate.closeness). Chosen over W2 in pixels because blur, shrinking and "
    "averaging score worse than real images there (KID ×10³ on 1,000 records: clean 0.00, shrunk 0.92, blurred 1.33, "
    "averages of 5 1.64, the mean image 5.48; benchmarks/results/closeness_references_mnist.json), and over "
    "Inception FID because that network was fitted on ImageNet, not digits, and needs weights a CPU run may lack. "
    "Lower KID is closer; precision is the share of generated records on the real records' manifold, recall the "
    "share of real records covered.")


def closeness_records(run: Run | None) -> dict[str, dict[str, Any]]:
    """A run's second measure (``metrics.json`` ``w2.closeness``: KID, precision, recall records over its synthetic
    sets); empty when it has none (an older record, not an image dataset)."""
    w2 = run.metrics.get("w2") if run is not None else None
    found = w2.get("closeness") if isinstance(w2, dict) else None
    return {k: v for k, v in found.items() if isinstance(v, dict) and "mean" in v} if isinstance(found, dict) else {}


def closeness_cells(runs: Sequence[Run | None]) -> dict[str, str]:
    """The KID x 10^3 and precision / recall cells of a setting's training runs (``fmt_summary``: counts and
    spreads), empty when none of its runs has the second measure."""
    return closeness_record_cells([closeness_records(r) for r in runs if r is not None])


def closeness_record_cells(found: Sequence[dict[str, Any]]) -> dict[str, str]:
    """:func:`closeness_cells` from the ``closeness`` records themselves (one per run, or per baseline fit: a
    ``w2``-shaped record's ``closeness``), empty when none has all three measures."""
    recs = [{k: v for k, v in c.items() if isinstance(v, dict) and "mean" in v} for c in found if isinstance(c, dict)]
    recs = [r for r in recs if {"kid", "precision", "recall"} <= set(r)]
    if not recs:
        return {}
    return {KID_COLUMN: fmt_summary([r["kid"] for r in recs], scale=1e3, digits=3),
            PR_COLUMN: f"{fmt_summary([r['precision'] for r in recs], digits=2)} / "
                       f"{fmt_summary([r['recall'] for r in recs], digits=2)}"}


def sweep_closeness_cells(rows: pd.DataFrame) -> dict[str, str]:
    """The second measure's cells of a sweep CSV's rows for one setting (each row a training run); empty for a CSV
    without the columns."""
    if "kid" not in rows or not rows["kid"].notna().any():
        return {}
    ok = rows[rows["kid"].notna()]
    return {KID_COLUMN: fmt_values(list(1e3 * ok["kid"].astype(float))),
            PR_COLUMN: f"{fmt_values(list(ok['precision'].astype(float)), digits=2)} / "
                       f"{fmt_values(list(ok['recall'].astype(float)), digits=2)}"}


def sweep_cell(rows: pd.DataFrame, column: str = "w2") -> str:
    """A sweep CSV's cell for one setting's rows (each a training run): their count and spread; one row with its
    spread over sample draws beside it says that instead (the estimator's noise, not another run)."""
    v = rows[column].astype(float).dropna()
    if len(v) == 1 and f"{column}_draw_std" in rows and pd.notna(rows[f"{column}_draw_std"].iloc[0]):
        std, k = float(rows[f"{column}_draw_std"].iloc[0]), int(rows[f"{column}_draws"].iloc[0])
        return f"{v.iloc[0]:.3f} (1 run; ± {std:.3f} over {k} sample draws)"
    return fmt_values(list(v)) if len(v) else NOT_RUN


def _w2_table(name: str, table: Table, params: Params, store: RunStore) -> BuiltTable:
    from dpsynth.evaluate.w2 import SWEEP_LOSSES

    where = f"tables.{name}"
    paper = paper_table(table.published, where) if table.published else None
    paper_cell = PLOT_ONLY if paper is not None and paper.plot_only else NOT_REPORTED
    records: list[dict[str, str]] = []
    notes = ([f"{paper.source}: {n}" for n in paper.notes] if paper else []) + _ours(table)
    path = w2_noise_csv(store.results, table.dataset) if table.dataset else None
    every = read_w2_csv(path, role=None) if path is not None and path.is_file() else None
    df = rows_of_role(every, "figure") if every is not None else None
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
                   "W2 to clean data ours": sweep_cell(g), "W2 paper": paper_cell, **sweep_closeness_cells(g)}
            if "w2_privatized_data" in g:
                pd_w2 = g["w2_privatized_data"].astype(float)
                rec["W2 of the privatized data ours"] = fmt_values(list(pd_w2))
            if "entropic_w2_privatized" in g and g["entropic_w2_privatized"].notna().any():
                ent = g["entropic_w2_privatized"].astype(float)
                rec["Entropic W2 to held-out privatized data ours"] = fmt_values(list(ent.dropna()))
            if "entropic_w2_privatized_clean" in g and g["entropic_w2_privatized_clean"].notna().any():
                ent = g["entropic_w2_privatized_clean"].astype(float)
                rec["Entropic W2 of the clean data itself"] = fmt_values(list(ent.dropna()))
            rec["n"] = str(len(g))
            records.append(rec)
        notes.append(f"Ours: {path} (each row of the CSV is one training run; a cell summarises the runs of its "
                     "(loss, noise) with their count). The W2-vs-noise rows train on "
                     f"the clean training records with seeded, non-private noise: {OUTSIDE_GUARANTEE} (that file is "
                     "never pushed).")
        from dpsynth.report.tables.w2_claims import (
            MEASURES_NOTE,
            PR_MEASURES,
            entropic_claim,
            entropic_kid_claim,
            entropic_measure_claim,
            kid_rows,
            privatized_claim,
            slope_claim,
            sweep_step_note,
        )

        # every claim is checked on its own quantity at twice the steps (the step_check rows, the same seeds):
        # a decided difference stands only if it keeps its sign there (claims.step_checked)
        checks = rows_of_role(every, "step_check")
        guard = checks if len(checks) else None
        notes.append(entropic_claim(df, checks=guard))
        has_kid = "kid" in df and df["kid"].notna().any()
        if has_kid:  # the closeness claim on each measure apart (MEASURES_NOTE: each is blind somewhere)
            notes.append(entropic_kid_claim(df, checks=guard))
            notes += [entropic_measure_claim(df, column, label, higher=higher, checks=guard)
                      for column, label, higher in PR_MEASURES if column in df and df[column].notna().any()]
        notes.append(slope_claim(df, checks=guard))
        notes.append(privatized_claim(df, checks=guard))
        if len(checks):
            notes.append(sweep_step_note(df, checks))
            if has_kid and "kid" in checks and checks["kid"].notna().any():
                notes.append(sweep_step_note(kid_rows(df), kid_rows(checks), column="kid",
                                             quantity="KID ×10³ to the clean data"))
        else:
            notes.append("Step count: not checked (the sweep ran nothing at twice the steps), so no claim above is "
                         "guarded against where training stopped.")
        refs = rows_of_role(every, "reference")
        for r in refs.itertuples():
            records.append({"Loss": f"reference: {r.loss}", "Noise σ": NOT_APPLICABLE, "Run": path.name,
                            "Scale": str(getattr(r, "scale", params.scale)),
                            "W2 to clean data ours": sweep_cell(refs[refs["loss"] == r.loss]),
                            "W2 paper": NOT_REPORTED, "n": "1",
                            **sweep_closeness_cells(refs[refs["loss"] == r.loss])})
        if len(refs):
            notes.append("Ours: the 'reference' rows are no generator: real clean training records, the same "
                         "blurred (Gaussian, 1 px), shrunk 30 % towards the mean image, and the mean image "
                         "itself, scored with the same W2 estimator against the same clean held-out records "
                         "(dpsynth.evaluate.w2_references). The first is what a perfect generator gets (the "
                         "two-sample floor); blur and shrinkage score LOWER than real images, so a lower W2 here "
                         "does not by itself mean closer to the clean data.")
        # the trivial private baselines (issue 69 item 3): their rows, and the claim per measure
        from dpsynth.report.tables.baselines import NOTE as BASELINE_NOTE
        from dpsynth.report.tables.baselines import baseline_claims, baseline_records, baseline_rows_of

        bases = baseline_rows_of(every)
        if len(bases):
            records += baseline_records(bases, run=path.name, scale=params.scale, paper_cell=NOT_REPORTED,
                                        cell=sweep_cell, closeness=sweep_closeness_cells)
            notes.append(BASELINE_NOTE)
            notes += baseline_claims(df, bases, source="ours", checks=checks if len(checks) else None)
        if "kid" in every and every["kid"].notna().any():
            notes.append(SECOND_MEASURE_NOTE)
            notes.append(MEASURES_NOTE)
        if "entropic_w2_privatized" in df:
            notes.append("Ours: the entropic W2 column is Fig. 5 (right): W_{2,λ} at λ = 2σ² (Reshetova et al. "
                         "(arXiv:2306.09547) eq. 8, squared units) from the generator to held-out test records "
                         "privatized with fresh noise; the clean held-out records' own value beside it is what a "
                         "generator of the clean distribution gets.")
    else:
        for loss in SWEEP_LOSSES:
            records.append({"Loss": loss, "Noise σ": NOT_RUN, "Run": NOT_RUN, "Scale": NOT_RUN,
                            "W2 to clean data ours": NOT_RUN, "W2 paper": paper_cell, "n": "0"})
        notes.append(f"Ours: {path if path else 'no dataset: set tables.' + name + '.dataset'} does not exist yet.")
    experiments = params.all_experiments()
    for e in _members(params, table):
        run = store.experiment(e)
        cell = w2_cell(run)
        local = experiments[e].local
        records.append({"Loss": experiments[e].hparams.loss, "Run": e, "Scale": scale_cell(run, params.scale),
                        "Noise σ": sigma_cell(run) if local is None else
                        f"{local.mechanism} ε={local.epsilon:g}" + (f" δ={local.delta:g}" if local.delta else ""),
                        "W2 to clean data ours": cell, "W2 paper": paper_cell, "n": "1" if run else "0",
                        **closeness_cells([run])})
    frame = _result_first(pd.DataFrame.from_records(records).fillna(NOT_APPLICABLE), ["Loss", "Noise σ"])
    return BuiltTable(name, table.title, table.paper, frame, notes,
                      ours=sum(r.get("n", "0") != "0" for r in records))
