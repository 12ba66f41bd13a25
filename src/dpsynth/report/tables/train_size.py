"""``kind: train_size`` tables: Reshetova, Chen, Ozgur, "Training generative models from privatized data via
entropic optimal transport" (ISIT 2024, arXiv:2306.09547), appendix 5.5, Fig. 11 -- the generator's W2 to the
clean data against the training-set size n, on a log-log scale. A row per cell of the table's sweeps over n; the
notes give the fitted slope of log W2 against log n beside the paper's 1/sqrt(n) (slope -0.5) and check the
paper's claim with the numbers. The figure itself is ``dpsynth.report.train_size``, drawn from
:attr:`BuiltTable.curves`.

Released: the held-out ("test") curve only -- the W2 to the clean test split, records no cell trained on. The
paper's "train" curve, the W2 to a cell's own clean training records (``RunSpec.train_indices``), is a statistic
of the private records without noise, outside the guarantee: the evaluate stage writes it under the private root
(``paths.w2_train_file``), and this table names that path per cell instead of printing it (``paths.release_rule``
keeps the private root off every remote)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from dpsynth.config import Params, Table
from dpsynth.paths import OUTSIDE_GUARANTEE, PRIVATE, w2_train_file
from dpsynth.report.published import paper_table
from dpsynth.report.runs import NOT_REPORTED, PLOT_ONLY, Run, RunStore, scale_cell
from dpsynth.report.tables.common import BuiltTable, _members
from dpsynth.report.tables.notes import _ours, _scale_notes
from dpsynth.report.tables.w2 import w2_cell, w2_of

#: The rate Theorem 2 of the paper gives (n^-1/2) as a slope of log W2 against log n.
PAPER_SLOPE = -0.5
#: How far from -0.5 a fitted slope may be and still count as "the paper's rate" (ours: a judgment, printed).
SLOPE_TOLERANCE = 0.25
CLAIM = ("W2 to the clean data falls with the training-set size n, on the training and the held-out records alike, "
         "at the rate 1/sqrt(n) (slope -0.5 of log W2 against log n; Theorem 2), the two curves close (no "
         "overfitting)")


def fit_slope(ns: Sequence[float], w2s: Sequence[float]) -> float:
    """The least-squares slope of ``log w2`` against ``log n`` (both natural logs): the exponent a of W2 ~ c n^a."""
    x, y = np.log(np.asarray(ns, dtype=np.float64)), np.log(np.asarray(w2s, dtype=np.float64))
    if x.size < 2 or np.ptp(x) == 0:
        raise ValueError(f"a slope needs at least two different n, got {list(ns)}")
    if not np.all(np.isfinite(y)):
        raise ValueError(f"a log-log slope needs positive W2 values, got {list(w2s)}")
    xc = x - x.mean()
    return float(np.dot(xc, y - y.mean()) / np.dot(xc, xc))


def train_curve_path(experiment: str) -> str:
    """Where a cell's "train" point lies (under the private root, at its default name): what the released table
    and figure print in its place."""
    return str(w2_train_file(PRIVATE, experiment))


def _verdict(slope: float) -> str:
    if abs(slope - PAPER_SLOPE) <= SLOPE_TOLERANCE:
        return "the rate"
    return "falls, slower than 1/sqrt(n)" if PAPER_SLOPE < slope < 0 else \
        "falls, faster than 1/sqrt(n)" if slope < PAPER_SLOPE else "does not fall"


def rate_claim(points: pd.DataFrame, *, figure: str = "Fig. 11", claim: str = CLAIM) -> str:
    """The paper's claim beside what our runs show, with the numbers (the wording of ``w2.entropic_claim``):
    ``points`` has columns ``n`` and ``test`` (mean W2 to the held-out records per training-set size; NaN where
    not measured) and, read on the private side only, ``train``. The claim holds when every fitted slope is
    within ``SLOPE_TOLERANCE`` of -0.5."""
    head = f"Claim (Reshetova et al., {figure}): {claim}."
    slopes: dict[str, float] = {}
    curves = [c for c in ("train", "test") if c in points.columns]
    for curve in curves:
        ok = points[["n", curve]].dropna()
        if ok["n"].nunique() >= 2:
            slopes[curve] = fit_slope(ok["n"], ok[curve])
    if "test" not in slopes:
        return f"{head} Ours: not checked (W2 to the held-out data at fewer than two n)."
    names = {"train": "train", "test": "held-out"}
    said = ", ".join(f"{names[c]} {s:+.3f} ({_verdict(s)})" for c, s in slopes.items())
    if "train" not in curves:
        said += " (checked on the held-out curve only: the train curve is private)"
    if all(abs(s - PAPER_SLOPE) <= SLOPE_TOLERANCE for s in slopes.values()) and len(slopes) == len(curves):
        verdict = "holds"
    elif all(s < 0 for s in slopes.values()):
        verdict = "holds in part (W2 falls with n, not at the paper's rate)"
    else:
        verdict = "does not hold"
    both = points.dropna()
    gap = (f"; train/held-out gap at most {float((both['train'] - both['test']).abs().max()):.3f}"
           if "train" in curves and len(both) else "")
    values = "; ".join(f"n={int(r.n):,}: " + (("train " + ("n/a" if math.isnan(r.train) else f"{r.train:.3f}")
                                                + ", ") if "train" in curves else "")
                       + "held-out " + ("n/a" if math.isnan(r.test) else f"{r.test:.3f}")
                       for r in points.sort_values("n").itertuples())
    return (f"{head} Ours: {verdict} -- fitted slope of log W2 against log n: {said}, the paper's -0.5 "
            f"(within ±{SLOPE_TOLERANCE:g} counts as the rate; our tolerance){gap} (mean W2 to the clean data: "
            f"{values}).")


def _step_check_note(check: str, cells: Sequence[str], params: Params, store: RunStore) -> str:
    """The table's ``step_check`` run beside the cell of the same n (the step count's criterion)."""
    from dpsynth.report.tables.w2_claims import step_check

    experiments = params.all_experiments()
    n = experiments[check].train_size
    twin = next((c for c in cells if experiments[c].train_size == n), None)
    run = store.experiment(twin) if twin else None
    a, b = w2_of(run), w2_of(store.experiment(check))
    if run is None or a is None or b is None:
        return f"Step count: not checked ({check} or the n = {n} cell has no W2 yet)."
    trained = run.metrics.get("train") or {}
    steps = int(trained.get("steps") or experiments[twin].hparams.max_steps or 0)
    return step_check([(f"n={n:,} ({twin} vs {check})", a, b, steps)])


def _train_size_table(name: str, table: Table, params: Params, store: RunStore) -> BuiltTable:
    paper = paper_table(table.published, f"tables.{name}") if table.published else None
    paper_cell = PLOT_ONLY if paper is not None and paper.plot_only else NOT_REPORTED
    experiments = params.all_experiments()
    cells = sorted(_members(params, table), key=lambda e: (experiments[e].train_size or 0, e))
    records: list[dict[str, str]] = []
    points: list[dict[str, float]] = []
    runs: list[Run | None] = []
    for e in cells:
        n = experiments[e].train_size
        run = store.experiment(e)
        runs.append(run)
        test = w2_of(run)
        points.append({"n": float(n or 0), "test": test if test is not None else math.nan})
        records.append({"n": f"{n:,}", "Run": e, "Scale": scale_cell(run, params.scale),
                        "W2 to clean held-out ours": w2_cell(run), "W2 paper": paper_cell,
                        "W2 to clean train (private)": f"{train_curve_path(e)} (not released)"})
    df = pd.DataFrame(points, columns=["n", "test"])
    ok = df.dropna()
    slopes: dict[str, float | None] = {"test": fit_slope(ok["n"], ok["test"]) if ok["n"].nunique() >= 2 else None}
    notes = ([f"{paper.source}: {n}" for n in paper.notes] if paper else []) + _ours(table)
    notes.append("Ours: W2 = the exact W2 between 1,000 generated points and 1,000 clean held-out points (the test "
                 "split: records no cell trained on; mean ± std over the synthetic sets; `dpsynth evaluate`). A "
                 "two-sample W2 on 1,000 points is not 0 even for a perfect generator, which flattens a curve at "
                 "large n.")
    notes.append("The paper's 'train' curve -- W2 to each cell's own clean training records (its first n, before "
                 f"privatization) -- is {OUTSIDE_GUARANTEE}. It is not in this table or its figure: each cell's "
                 f"lies in {train_curve_path('<cell>')} (the private root, never pushed), column 'W2 to clean train "
                 "(private)'.")
    notes.append("Ours: fitted slope of log W2 against log n (least squares over the cells): held-out "
                 + ('n/a (fewer than two n)' if slopes["test"] is None else f"{slopes['test']:+.3f}")
                 + "; the paper: -0.5 (1/sqrt(n)).")
    notes.append(rate_claim(df, figure=paper.table if paper is not None else name))
    if table.step_check is not None:
        notes.append(_step_check_note(table.step_check, cells, params, store))
    notes += _scale_notes(runs)
    frame = pd.DataFrame.from_records(records, columns=["n", "Run", "Scale", "W2 to clean held-out ours", "W2 paper",
                                                        "W2 to clean train (private)"])
    curves: dict[str, Any] = {"dataset": table.dataset, "points": df.to_dict("records"), "slopes": slopes,
                              "paper_slope": PAPER_SLOPE, "private_train": train_curve_path("<cell>")}
    return BuiltTable(name, table.title, table.paper, frame, notes, ours=sum(r is not None for r in runs),
                      curves=curves)
