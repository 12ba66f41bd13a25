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
keeps the private root off every remote).

Beside each n, the trivial private baselines each run's evaluate stage fitted to that run's own privatized records
(``evaluate.baselines.run_baselines``: a k-means codebook, k = 10 and 100, and a Gaussian with the noise removed),
and the claim "the generator is closer to the clean data than the baselines" per measure
(``baselines.train_size_baseline_claims``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from dpsynth.config import Params, Table
from dpsynth.paths import OUTSIDE_GUARANTEE, PRIVATE, w2_train_file
from dpsynth.report.claims import (
    Estimate,
    Verdict,
    all_of,
    claim_note,
    compare,
    estimate_of_records,
    exact,
    fit_line,
    step_checked,
    unconverged,
)
from dpsynth.report.published import paper_table
from dpsynth.report.runs import NOT_APPLICABLE, NOT_REPORTED, PLOT_ONLY, Run, RunStore, fmt_summary, scale_cell
from dpsynth.report.tables.baselines import (
    RUN_NOTE,
    baseline_records,
    baselines_of_runs,
    measures_of,
    train_size_baseline_claims,
)
from dpsynth.report.tables.common import BuiltTable, _members, _result_first
from dpsynth.report.tables.notes import _ours, _scale_notes
from dpsynth.report.tables.w2 import (
    KID_COLUMN,
    PR_COLUMN,
    SECOND_MEASURE_NOTE,
    closeness_cells,
    closeness_record_cells,
    closeness_records,
    w2_cell,
    w2_of,
    w2_record,
)

#: A Fig. 11 baseline row's columns (``baselines.baseline_records``): its n, a Run cell naming the baseline and the
#: runs whose privatized records it was fitted to, the W2 column of this table.
BASELINE_COLUMNS = {"name": None, "level": "n", "run": "Run", "w2": "W2 to clean held-out ours", "count": None}

#: The rate Theorem 2 of the paper gives (n^-1/2) as a slope of log W2 against log n.
PAPER_SLOPE = -0.5
#: How far from -0.5 a fitted slope may be and still count as "the paper's rate" (ours: a judgment, printed).
SLOPE_TOLERANCE = 0.25
CLAIM = ("W2 to the clean data falls with the training-set size n at the rate 1/sqrt(n) (Theorem 2), on the "
         "training and the held-out records alike")


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


def fit_rate(ns: Sequence[float], w2s: Sequence[float]) -> dict[str, Estimate]:
    """The rate on the excess over the estimator's floor, over every training run's point:

    - ``floor`` and ``c`` of W2 = floor + c n^-1/2 (least squares, linear in n^-1/2: the paper's rate with the
      two-sample W2's floor, which a total-W2 log-log slope mistakes for a slower rate);
    - ``exponent`` b of W2 = floor + c n^-b, all three free (``scipy.optimize.curve_fit``; its error from the
      fit's covariance on N - 3 degrees of freedom; absent with fewer than four points or when the fit fails),
      and that fit's own floor, ``floor_free``: the 1/sqrt(n) fit's intercept belongs to a model the free
      exponent may reject, so the notes print both."""
    import warnings

    x = np.asarray(ns, dtype=np.float64)
    y = np.asarray(w2s, dtype=np.float64)
    floor, c = fit_line(x ** -0.5, y, "fit W2 = a + c n^-1/2")
    out = {"floor": floor, "c": c}
    if x.size >= 4 and np.unique(x).size >= 3:
        from scipy.optimize import OptimizeWarning, curve_fit

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", OptimizeWarning)
                popt, pcov = curve_fit(lambda n, a, cc, b: a + cc * n ** -b, x, y,
                                       p0=(float(floor.value), max(float(c.value), 1e-6), 0.5), maxfev=20000)
            se = float(np.sqrt(pcov[2, 2])) if np.isfinite(pcov[2, 2]) else math.inf
            if not (math.isfinite(se) and math.isfinite(float(popt[2]))):
                return out  # not identified by these points: no exponent rather than a meaningless one
            src = f"least-squares fit W2 = a + c n^-b over {x.size} points, error from its covariance"
            out["exponent"] = Estimate.of_fit(float(popt[2]), se, x.size - 3, src)
            se_a = float(np.sqrt(pcov[0, 0])) if np.isfinite(pcov[0, 0]) else math.inf
            out["floor_free"] = Estimate.of_fit(float(popt[0]), se_a, x.size - 3, src)
        except (RuntimeError, ValueError):
            pass
    return out


def rate_claim(runs: pd.DataFrame, *, figure: str = "Fig. 11", claim: str = CLAIM,
               step_verdict: Verdict | None = None) -> str:
    """The paper's claim, decided by the claim checker on the held-out W2 of every training run (``runs``:
    columns ``n`` and ``test``, one row per run): the excess over the floor falls (c > 0 in W2 = a + c n^-1/2)
    and the free exponent b is the paper's 1/2 within ``SLOPE_TOLERANCE``. The train curve is private and not
    checked here. ``step_verdict``: whether each n was trained to convergence (the step check); when it does
    not hold the verdict reads undecided (``claims.unconverged``: n is confounded with convergence), the fit's
    numbers kept."""
    source = f"Reshetova et al., {figure}"
    ok = runs[["n", "test"]].dropna()
    if ok["n"].nunique() < 2:
        return f"Claim ({source}): {claim}. Ours: not checked (W2 to the held-out data at fewer than two n)."
    fit = fit_rate(ok["n"], ok["test"])
    parts = [compare(fit["c"], exact(0.0, "no fall"), "greater", what="c of W2 = a + c n^-1/2 (the excess falls)")]
    if "exponent" in fit:
        parts.append(compare(fit["exponent"], exact(-PAPER_SLOPE, "the paper's 1/2"), "within",
                             margin=SLOPE_TOLERANCE, what="free exponent b - 1/2"))
    verdict = unconverged(all_of(parts, "rate"), step_verdict,
                          "twice the steps move W2 at the checked n by more than the excess the fit attributes to n "
                          "there, so n is confounded with the steps each cell needed")
    a = fit["floor"]
    floor = f"floor a = {a.value:.3f}" + (f" ± {a.se:.3f} (s.e.)" if a.se is not None else "")
    b = fit.get("exponent")
    free = (f"free exponent b = {b.value:.3f}" + (f" ± {b.se:.3f} (s.e.)" if b is not None and b.se is not None
                                                  else "")) if b is not None else         "free exponent not fitted (needs at least four runs over three n)"
    total = fit_slope(ok["n"], ok["test"]) if (ok["test"] > 0).all() else math.nan
    details = (f"(Held-out curve only: the train curve is private. W2 = a + c n^-1/2 over {len(ok)} runs: {floor}, "
               f"c = {fit['c'].value:.2f}; {free}; within ±{SLOPE_TOLERANCE:g} of 1/2 counts as the rate (our "
               f"margin). The log-log slope of the total W2, {total:+.3f}, includes the floor and is not the rate.")
    note = claim_note(source, claim, verdict, details=details + ")")
    return note


def kid_falls(per_run: pd.DataFrame, *, figure: str = "Fig. 11", checks: pd.DataFrame | None = None,
              steps: str = "twice the steps") -> str:
    """The second measure read along n (not a claim of the paper): the KID x 10^3 of the runs at the largest n
    against those at the smallest (``per_run``: columns ``n`` and ``kid``, one row per run), decided by the claim
    checker on the runs' spread -- Welch: runs of one seed at two n share only their initial weights, not their
    records, batches or noise. ``checks``: the runs at twice the steps (same columns; None: the table ran none);
    the difference must keep its sign there (``claims.step_checked``), which needs runs at both n."""
    ok = per_run.dropna()
    if ok["n"].nunique() < 2:
        return "Second measure along n: not checked (KID at fewer than two n)."
    lo, hi = ok["n"].min(), ok["n"].max()
    what = f"KID ×10³ at n={hi:,.0f} minus at n={lo:,.0f}"
    small, large = (Estimate.of_runs(1e3 * ok.loc[ok["n"] == n, "kid"]) for n in (lo, hi))
    verdict = compare(large, small, "less", what=what)
    if checks is not None:
        again = checks.dropna()
        redo = compare(*(Estimate.of_runs(1e3 * again.loc[again["n"] == n, "kid"]) for n in (hi, lo)), "less",
                       what=what) if {lo, hi} <= set(again["n"]) else None
        ran = ", ".join(f"{n:,.0f}" for n in sorted(again["n"].unique())) or "none"
        verdict = step_checked(verdict, redo, f"{steps} (run at n = {ran})")
    return claim_note(f"ours, beside Reshetova et al., {figure}",
                      f"the generator is closer to the clean data by the second measure (KID ×10³) at n={hi:,.0f} "
                      f"than at n={lo:,.0f}", verdict,
                      details=f"(n={lo:,.0f}: {small.value:.3f} over {small.n} run(s); n={hi:,.0f}: {large.value:.3f} "
                              f"over {large.n}.)")


def seed_of(params: Params, experiment: str) -> int:
    """A run's training seed as the design sets it (``config.run.resolve_run``: the experiment's, else the first
    of params seeds)."""
    exp = params.all_experiments()[experiment]
    return int(exp.seed) if exp.seed is not None else int(params.seeds[0])


def shares_at(n: int) -> str:
    """What one seed fixes for a Fig. 11 run of ``n`` records: runs of the same seed and n -- a cell and the same
    cell at twice the steps -- pair; at different n they differ in records and batches, so they do not."""
    return (f"initial weights, training subset and batch order at n = {n:,} (the privatization noise is secret, "
            "fresh per run)")


def seeded_w2(params: Params, names: Sequence[str], runs: Sequence[Run | None], n: int) -> Estimate:
    """The W2 of a setting's runs, each kept with its seed from the design (``claims.estimate_of_records``)."""
    return estimate_of_records([w2_record(r) for r in runs], [seed_of(params, x) for x in names], shares_at(n))


def _step_check(check: str, groups: dict[int, list[str]], params: Params, store: RunStore,
                fit: dict[str, Estimate]) -> tuple[str, Verdict | None, dict[str, Any] | None, pd.DataFrame]:
    """The table's ``step_check`` run(s) beside the runs of the same n and seeds (paired): the level's note and
    verdict (None when not checked). The margin is the claim's own quantity there: the excess over the floor the
    rate fit attributes to that n, c n^-1/2 (``fit``; without a fit, no margin and the check is undecided -- never
    a default percentage). Also the point the figure marks and the check's runs' KID (for :func:`kid_falls`)."""
    from dpsynth.report.tables.w2_claims import step_check

    experiments = params.all_experiments()
    n = experiments[check].train_size or 0
    twins = groups.get(n, [])
    names = [x for t in twins for x in params.replicates_of(t)]
    base = [store.experiment(x) for x in names]
    again_names = params.replicates_of(check)
    again = [store.experiment(x) for x in again_names]
    at, twice = seeded_w2(params, names, base, n), seeded_w2(params, again_names, again, n)
    kids = pd.DataFrame([{"n": float(n), "kid": float(k["kid"]["mean"])} for k in map(closeness_records, again)
                         if "kid" in k], columns=["n", "kid"])
    if at.n == 0 or twice.n == 0:
        return f"Step count: not checked ({check} or the n = {n:,} cell has no W2 yet).", None, None, kids
    run = next(r for r in base if r is not None)
    trained = _steps(run, experiments[twins[0]])
    steps = int(trained) if math.isfinite(trained) else 0
    what = f"n={n:,} ({', '.join(twins)} vs {check})"
    c = fit.get("c")
    margin = abs(c.value) * n ** -0.5 if c is not None and math.isfinite(c.value) and n > 0 else None
    point = {"n": float(n), "value": twice.value, "se": twice.se, "runs": twice.n, "steps": 2 * steps}
    note, verdict = step_check([(what, at, twice, steps)], margin=margin,
                               margin_is=f"the excess over the floor the rate fit gives n={n:,} (c n^-1/2)")
    return note, verdict, point, kids


def floors_note(fit: dict[str, Estimate], rows: pd.DataFrame, real: Estimate | None, real_is: str,
                check: dict[str, Any] | None) -> str:
    """Where the runs sit (issue 69 item 5): the 1/sqrt(n) fit's intercept beside the free-exponent fit's floor,
    and the runs at the largest n (and at twice the steps) against what real images score on the same estimator
    (``real``; None: not measured beside this table)."""
    a, free = fit.get("floor"), fit.get("floor_free")
    if a is None or not math.isfinite(a.value):
        return "Floors: not fitted (fewer than two n)."

    def pm(e: Estimate) -> str:
        return f"{e.value:.3f}" + (f" ± {e.se:.3f} (s.e.)" if e.se is not None else "")

    b = fit.get("exponent")
    out = f"Floors (ours): the 1/sqrt(n) fit's intercept is {pm(a)}, the floor of the model with the paper's exponent"
    out += (f"; the free-exponent fit W2 = a + c n^-b (b = {b.value:.3f}) puts the floor at {pm(free)}."
            if free is not None and b is not None else " (no free-exponent fit to set beside it).")
    top = rows["n"].max()
    last = Estimate.of_runs(rows.loc[rows["n"] == top, "test"])
    out += f" The runs at n = {top:,.0f} score {last.value:.3f} over {last.n} run(s)"
    if check is not None:
        out += f", the same n at {check['steps']:,} steps {check['value']:.3f} over {check['runs']}"
    if real is None:
        return out + ". What real images score on this estimator was not measured beside this table."
    v = compare(last, real, "greater", what="largest n - real images")
    lo, hi = v.interval
    ci = f", 95 % interval [{lo:+.3f}, {hi:+.3f}]" if math.isfinite(lo) and math.isfinite(hi) else ""
    out += (f". Real clean training images score {real.value:.3f}" + (f" ± {real.se:.3f}" if real.se else "") +
            f" ({real_is}): the runs at n = {top:,.0f} minus real images = {v.difference:+.3f}{ci}")
    if check is not None:
        runs = int(check["runs"])
        twice = Estimate(float(check["value"]), check["se"], float(runs - 1), f"{runs} training runs", runs) \
            if check["se"] is not None else Estimate.single(float(check["value"]))
        w = compare(twice, real, "greater", what="twice the steps - real images")
        lo, hi = w.interval
        ci = f", [{lo:+.3f}, {hi:+.3f}]" if math.isfinite(lo) and math.isfinite(hi) else ""
        out += f"; at {check['steps']:,} steps {w.difference:+.3f}{ci}"
    return out + (". A generator at the real-image floor is as close as this estimator can tell on 1,000 points; "
                  "below it, W2's preference for smooth samples (the reference rows of Fig. 5: blurred images score "
                  "lower than real ones) is the likelier reading than a better generator.")


def real_floor(results: Any, dataset: str | None) -> tuple[Estimate | None, str]:
    """What real clean training images score on the same W2 estimator against the same test split: the W2 sweep's
    reference row ``clean training records`` of this dataset (1,000 records per side, its spread over sample
    draws of both sides), when that sweep ran; else None."""
    from dpsynth.paths import w2_noise_csv
    from dpsynth.report.tables.w2 import read_w2_csv, rows_of_role

    path = w2_noise_csv(results, dataset) if dataset else None
    if path is None or not path.is_file():
        return None, ""
    refs = rows_of_role(read_w2_csv(path, role=None), "reference")
    real = refs[refs["loss"] == "clean training records"]
    if not len(real):
        return None, ""
    r = real.iloc[0]
    draws = int(r["w2_draws"]) if "w2_draws" in r and pd.notna(r.get("w2_draws")) else 0
    std = float(r["w2_draw_std"]) if "w2_draw_std" in r and pd.notna(r.get("w2_draw_std")) else math.nan
    est = Estimate.of_draw_std(float(r["w2"]), std, draws)
    return est, (f"{path.name}'s reference row: 1,000 real training records against 1,000 test-split records, "
                 f"sd over {draws} draws of both sides, so it spans other test subsets than the one these runs read")


def _steps(run: Run, exp: Any) -> float:
    """The steps a run trained (its train summary; else its experiment's ``max_steps``; else NaN)."""
    steps = (run.metrics.get("train") or {}).get("steps")
    if not isinstance(steps, int | float) or isinstance(steps, bool):
        steps = getattr(exp.hparams, "max_steps", None)
    return float(steps) if isinstance(steps, int | float) and not isinstance(steps, bool) else math.nan


def _train_size_table(name: str, table: Table, params: Params, store: RunStore) -> BuiltTable:
    paper = paper_table(table.published, f"tables.{name}") if table.published else None
    paper_cell = PLOT_ONLY if paper is not None and paper.plot_only else NOT_REPORTED
    experiments = params.all_experiments()
    groups: dict[int, list[str]] = {}  # n -> the cells of that size (a sweep over n and seed gives several)
    for e in sorted(_members(params, table), key=lambda e: (experiments[e].train_size or 0, e)):
        groups.setdefault(experiments[e].train_size or 0, []).append(e)
    records: list[dict[str, str]] = []
    points: list[dict[str, float]] = []
    per_run: list[dict[str, float]] = []
    kids: list[dict[str, float]] = []
    grids: list[tuple[str, str]] = []  # (label, run) of one run per n: the figures' sample grid per n
    runs: list[Run | None] = []
    generators: list[dict[str, Any]] = []  # every run's measures, for the baseline claims
    bases: list[pd.DataFrame] = []
    base_notes: list[str] = []
    for n, cells in groups.items():
        names = [x for e in cells for x in params.replicates_of(e)]
        reps = [store.experiment(x) for x in names]
        runs += reps
        generators += [{"n": float(n), "seed": seed_of(params, x), "steps": _steps(rep, experiments[x]),
                        **measures_of(rep.metrics.get("w2"))} for x, rep in zip(names, reps) if rep is not None]
        at, why = baselines_of_runs((rep, {"n": float(n)}) for rep in reps)
        base_notes += why
        first = next((name for name, r in zip(names, reps) if r is not None), None)
        if first is not None:
            grids.append((f"n = {n:,} ({first}; 1 of {sum(r is not None for r in reps)} runs)", first))
        est = seeded_w2(params, names, reps, n)
        per_run += [{"n": float(n), "test": w} for w in (w2_of(r) for r in reps) if w is not None]
        kids += [{"n": float(n), "kid": float(k["kid"]["mean"])} for k in map(closeness_records, reps) if "kid" in k]
        points.append({"n": float(n), "test": est.value if est.n else math.nan,
                       "se": est.se if est.se is not None else math.nan, "runs": est.n})
        records.append({"n": f"{n:,}", "Run": ", ".join(cells), "Scale": scale_cell(
                            next((r for r in reps if r is not None), None), params.scale),
                        "W2 to clean held-out ours": w2_cell(reps), "W2 paper": paper_cell, **closeness_cells(reps),
                        "W2 to clean train (private)": "; ".join(f"{train_curve_path(e)}" for e in cells)
                        + " (not released)",
                        **({"Privacy": str(at["privacy"].iloc[0])} if len(at) else {})})
        if len(at):  # the trivial private baselines each run's evaluate stage fitted to its privatized records
            bases.append(at)
            records += [{**rec, "W2 to clean train (private)": NOT_APPLICABLE} for rec in baseline_records(
                at, run=lambda name, g: f"{name} (fitted to the privatized records of {', '.join(g['run'])})",
                scale=params.scale, paper_cell=NOT_REPORTED, level="n", level_cell=lambda v: f"{v:,.0f}",
                cell=lambda g: fmt_summary(list(g["w2_record"]), digits=3),
                closeness=lambda g: closeness_record_cells(list(g["closeness"])), columns=BASELINE_COLUMNS)]
    df = pd.DataFrame(points, columns=["n", "test", "se", "runs"])
    ok = df.dropna(subset=["test"])
    slopes: dict[str, float | None] = {"test": fit_slope(ok["n"], ok["test"]) if ok["n"].nunique() >= 2 else None}
    notes = ([f"{paper.source}: {n}" for n in paper.notes] if paper else []) + _ours(table)
    notes.append("Ours: W2 = the exact W2 between 1,000 generated points and 1,000 clean held-out points (the test "
                 "split: records no cell trained on; `dpsynth evaluate`), with the count of training runs in each "
                 "cell. A two-sample W2 on 1,000 points is not 0 even for a perfect generator: its floor flattens "
                 "the total W2 at large n, so the rate is fitted on the excess over a fitted floor.")
    notes.append("The paper's 'train' curve -- W2 to each cell's own clean training records (its first n, before "
                 f"privatization) -- is {OUTSIDE_GUARANTEE}. It is not in this table or its figure: each cell's "
                 f"lies in {train_curve_path('<cell>')} (the private root, never pushed), column 'W2 to clean train "
                 "(private)'.")
    rows = pd.DataFrame(per_run, columns=["n", "test"])
    fit = fit_rate(rows["n"], rows["test"]) if rows["n"].nunique() >= 2 else {}
    step_note, steps_ok, check_point, check_kids = _step_check(table.step_check, groups, params, store, fit) \
        if table.step_check is not None else (None, None, None, None)
    figure = paper.table if paper is not None else name
    notes.append(rate_claim(rows, figure=figure, step_verdict=steps_ok))
    if step_note is not None:
        notes.append(step_note)
    real, real_is = real_floor(store.results, table.dataset)
    notes.append(floors_note(fit, rows, real, real_is, check_point))
    if kids:
        notes.append(SECOND_MEASURE_NOTE.replace("on the same generated records as W2", "on each run's synthetic set "
                                                 "(its first 1,000 records), the set W2 reads"))
        notes.append(kid_falls(pd.DataFrame(kids, columns=["n", "kid"]), figure=figure, checks=check_kids,
                               steps=f"{check_point['steps']:,} steps" if check_point else "twice the steps"))
    if bases:
        notes.append(RUN_NOTE)
        # the step check's runs (twice the steps, one n): the runs at the most steps are the check's
        checks = [{"n": float(experiments[c].train_size or 0), "seed": seed_of(params, x),
                   "steps": _steps(rep, experiments[x]), **measures_of(rep.metrics.get("w2"))}
                  for c in ([table.step_check] if table.step_check else []) for x in params.replicates_of(c)
                  for rep in [store.experiment(x)] if rep is not None]
        loss = str(getattr(experiments[next(iter(groups.values()))[0]].hparams, "loss", "generator"))
        notes += train_size_baseline_claims(pd.DataFrame(generators + checks), pd.concat(bases, ignore_index=True),
                                            source=f"ours, beside Reshetova et al., {figure}", loss=loss)
    notes += base_notes
    notes += _scale_notes(runs)
    columns = ["n", "Run", "Scale", "W2 to clean held-out ours", "W2 paper"] + \
        ([KID_COLUMN, PR_COLUMN] if kids else []) + ["W2 to clean train (private)"] + (["Privacy"] if bases else [])
    frame = _result_first(pd.DataFrame.from_records(records, columns=columns).fillna("not evaluated"), ["n"])
    curves: dict[str, Any] = {"dataset": table.dataset, "points": df.to_dict("records"), "slopes": slopes,
                              "runs": rows.to_dict("records"),
                              "fit": {k: {"value": e.value, "se": e.se} for k, e in fit.items()},
                              "paper_slope": PAPER_SLOPE, "private_train": train_curve_path("<cell>"),
                              "step_check": check_point,
                              "real_floor": {"value": real.value, "se": real.se} if real is not None else None}
    return BuiltTable(name, table.title, table.paper, frame, notes, ours=sum(r is not None for r in runs),
                      curves=curves, runs=grids)
