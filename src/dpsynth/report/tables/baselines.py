"""The trivial private baselines as rows of a table on locally privatized records, and the claim a reader needs
beside them: "the generator is closer to the clean data than the trivial baselines", decided by the one checker
(``report.claims``) on each measure the table reports, separately.

The baselines (``methods.local_baselines``; scored by ``evaluate.baselines``) are a k-means codebook (k = 10,
100) sampled by cluster frequency and a Gaussian with the noise covariance removed, fitted to the same privatized
records as the generators of a cell, scored on the same estimator and clean test records. Why each measure is
read on its own (issue 69 item 4): the W2 to clean records in pixels rewards blur (a codebook's centres are
averages of many records, and blurred real images score below real ones), KID in a digit classifier's features
can reward a Gaussian blob, and precision / recall flag sets that are smooth or off the data's manifold. A
generator that beats the baselines on one measure and not on another has learnt what that measure sees only.

Per noise level the claim compares each generator (loss) with the best baseline on that measure at that level
(the lowest W2 or KID, the highest precision or recall, by its mean): a difference per seed where both were
fitted to the same seed's privatized records (:data:`BASELINE_SHARES`; ``claims.compare`` pairs them), Welch's
interval otherwise. Where the table has runs at twice the steps, each decided difference must keep its sign
there (``claims.step_checked``); at a level without them it reads undecided, as the table's other claims do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import pandas as pd

from dpsynth.report.claims import Estimate, Verdict, all_of, claim_note, compare, estimate_of_rows, step_checked

if TYPE_CHECKING:
    from dpsynth.report.runs import Run

BASELINE = "baseline"
#: What one seed fixes for a generator and the baseline fitted beside it: the same privatized records (the noise
#: instance at that σ) and the same W2 subsample of the clean test records. The per-seed differences of
#: independent seeds are independent, so their t interval is valid whatever else a generator's seed fixes.
BASELINE_SHARES = "privatization noise at that σ and the W2 subsample of the clean test records"
CLAIM = ("every generator is closer to the clean data than the trivial private baselines fitted to its privatized "
         "records")
#: (column, how a note names it, the rule "the generator is closer", the factor the table prints it with)
MEASURES: tuple[tuple[str, str, str, float], ...] = (
    ("w2", "W2 to the clean data, lower is closer", "less", 1.0),
    ("kid", "KID ×10³ to the clean data, lower is closer", "less", 1e3),
    ("precision", "precision, higher is closer", "greater", 1.0),
    ("recall", "recall, higher is closer", "greater", 1.0),
)
NOTE = ("Ours: the 'baseline' rows are trivial generators fitted to the SAME privatized records as the generators of "
        "their σ and seed, scored on the same estimator and clean test records (dpsynth.methods.local_baselines, "
        "dpsynth.evaluate.baselines): a k-means codebook (k = 10, 100; scikit-learn's KMeans) sampled by cluster "
        "frequency, and a Gaussian fitted to the privatized records with the known noise covariance σ² I removed "
        "(eigenvalues clipped at 0; samples clipped to [-1, 1]). They are post-processing of the privatized records "
        "(the clean training records are never read), so their privacy is the records' own, in the Privacy column. "
        "Read each measure on its own: W2 in pixels rewards blur (a codebook centre averages hundreds of records), "
        "KID can reward a Gaussian blob, precision / recall flag smooth or off-manifold sets.")


def baseline_rows_of(every: pd.DataFrame) -> pd.DataFrame:
    """The baseline rows of a sweep CSV (role ``baseline``), empty when it has none."""
    if "role" not in every:
        return every.iloc[0:0]
    return every[every["role"] == BASELINE].reset_index(drop=True)


#: The W2 table's columns for a baseline row's name, level, run, W2 cell and count of fits (the Fig. 11 and 2-D
#: tables pass their own; a None column is not written).
W2_COLUMNS: Mapping[str, str | None] = {"name": "Loss", "level": "Noise σ", "run": "Run", "w2": "W2 to clean data ours",
                                        "count": "n"}


def baseline_records(rows: pd.DataFrame, *, run: str | Callable[[str, pd.DataFrame], str], scale: str, paper_cell: str,
                     cell: Callable[[pd.DataFrame], str],
                     closeness: Callable[[pd.DataFrame], dict[str, str]], level: str = "noise",
                     level_cell: Callable[[Any], str] = "{:g}".format,
                     columns: Mapping[str, str | None] = W2_COLUMNS) -> list[dict[str, str]]:
    """A table row per (baseline, level: the noise σ, Fig. 11's n, a 2-D figure's panel) -- its rows are one fit
    per seed or run, counted like training runs -- with the table's own cell formats (``cell`` for W2,
    ``closeness`` for KID and precision / recall) and column names (``columns``: :data:`W2_COLUMNS`'s keys);
    ``run``: the Run cell, or a function of the baseline's name and rows giving it."""
    out = []
    for (name, at), g in sorted(rows.groupby(["loss", level]), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        privacy = str(g["privacy"].dropna().iloc[0]) if "privacy" in g and g["privacy"].notna().any() else \
            "the privatized records' own"
        fields = {"name": str(name), "level": level_cell(at), "run": run(str(name), g) if callable(run) else run,
                  "w2": cell(g), "count": str(len(g))}
        rec = {columns[k]: v for k, v in fields.items() if columns.get(k)}
        rec.update({"Scale": str(g["scale"].iloc[0]) if "scale" in g and g["scale"].notna().any() else scale,
                    "W2 paper": paper_cell, **closeness(g), "Privacy": privacy})
        out.append(rec)
    return out


#: What one seed fixes for a pipeline run and the baselines its evaluate stage fitted beside it
#: (``evaluate.baselines.run_baselines``): the run's own privatized records and, set by set, the same W2 subsamples of
#: the clean test records. Runs of one seed in other cells share nothing else, so pairing needs runs of the SAME
#: cell by seed (a 2-D figure's panel); Fig. 11's step check trains other privatized records, so that table stays
#: Welch (``train_size_baseline_claims``).
RUN_SHARES = "the run's own privatized records and the W2 subsamples of the clean test records"
RUN_NOTE = ("Ours: the 'baseline' rows are trivial generators that `dpsynth evaluate` fitted to each run's OWN "
            "privatized records (data/privatized/<run>.npz, the file the run trained on; "
            "dpsynth.evaluate.baselines.run_baselines) and scored exactly as that run's generator (the same count and "
            "size of synthetic sets, the same W2 subsamples of the clean test records, the run's seed): a k-means "
            "codebook (k = 10, 100; scikit-learn's KMeans) sampled by cluster frequency, and a Gaussian fitted with "
            "the mechanism's known noise covariance removed (eigenvalues clipped at 0). They are post-processing of "
            "the privatized records -- the clean training records are never read -- so they are released at the "
            "privatization's (ε, δ), in the Privacy column, like the generator itself. Read each measure on its own: "
            "W2 rewards blur (a codebook centre averages many records), KID can reward a Gaussian blob, precision / "
            "recall flag smooth or off-manifold sets.")
#: The measures a ``w2``-shaped record holds (a run's metrics.json ``w2``, or one baseline's): its W2, then its
#: ``closeness`` record's KID, precision and recall (images only).
CLOSENESS_KEYS = ("kid", "precision", "recall")


def measures_of(rec: Any) -> dict[str, float]:
    """The means of a ``w2``-shaped record: ``w2`` and, where its ``closeness`` has them, ``kid``, ``precision``,
    ``recall``; empty for no record."""
    if not isinstance(rec, dict) or "mean" not in rec:
        return {}
    out = {"w2": float(rec["mean"])}
    close = rec.get("closeness") if isinstance(rec.get("closeness"), dict) else {}
    for key in CLOSENESS_KEYS:
        sub = close.get(key)
        if isinstance(sub, dict) and "mean" in sub:
            out[key] = float(sub["mean"])
    return out


def baselines_of_runs(runs: Iterable[tuple[Run | None, Mapping[str, Any]]]) -> tuple[pd.DataFrame, list[str]]:
    """The baselines the evaluate stage wrote into each run's metrics.json (``baselines``): one row per (run,
    baseline) -- ``loss`` (the baseline's name), ``run``, ``seed``, ``scale``, ``privacy``, the measures
    (:func:`measures_of`) and the records the table's cells format (``w2_record``, ``closeness``) -- plus the
    columns each run is given (``runs``: (run, e.g. {"n": 1000.0})). And one line per run whose record says it
    has none, with the reason. Runs without the record (not run, or evaluated before it existed) add nothing."""
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for run, levels in runs:
        rec = run.metrics.get("baselines") if run is not None else None
        if run is None or not isinstance(rec, dict):
            continue
        if not rec.get("available"):
            notes.append(f"Ours: {run.name} has no trivial baselines: {rec.get('reason')}.")
            continue
        for name, m in rec["models"].items():
            rows.append({"loss": str(name), "run": run.name, "seed": int(rec["seed"]), "scale": run.scale,
                         "privacy": str(rec["privacy"]), **measures_of(m), "w2_record": m,
                         "closeness": m.get("closeness") or {}, **levels})
    return pd.DataFrame(rows), notes


def _sigma(v: float) -> str:
    return f"σ={v:g}"


def _levels(rows: pd.DataFrame, column: str, scale: float, level: str, shares: str
            ) -> dict[float, dict[str, Estimate]]:
    rows = rows[rows[column].notna()].assign(**{column: lambda d: scale * d[column].astype(float)})
    return {float(v): {str(name): estimate_of_rows(h, column, shares) for name, h in g.groupby("loss")}
            for v, g in rows.groupby(level)}


def closer_than_baselines(generators: pd.DataFrame, baselines: pd.DataFrame, column: str, rule: str, *,
                          scale: float = 1.0, checks: pd.DataFrame | None = None, level: str = "noise",
                          label: Callable[[float], str] = _sigma, shares: str = BASELINE_SHARES) -> Verdict | None:
    """At every level (column ``level``: the noise σ, or Fig. 11's n) with both, each generator (loss) minus the
    best baseline on ``column`` (``rule``: ``less`` or ``greater``, the generator closer), combined over losses
    and levels (``claims.all_of``); each decided difference step-checked on itself against ``checks`` (the
    generators at twice the steps) when given. ``shares``: what one seed fixes for a generator and its baseline
    (paired by seed); "" when their seeds share nothing (Welch). None when no level has both with the measure."""
    if column not in generators or column not in baselines:
        return None
    gens = _levels(generators, column, scale, level, shares)
    bases = _levels(baselines, column, scale, level, shares)
    twice = _levels(checks, column, scale, level, shares) if checks is not None and len(checks) and column in checks \
        else None
    steps = f"{int(checks['steps'].dropna().iloc[0]):,} steps" if twice is not None and "steps" in checks and \
        checks["steps"].notna().any() else "twice the steps"
    levels = []
    for at in sorted(set(gens) & set(bases)):
        if not gens[at] or not bases[at]:
            continue
        pick = min if rule == "less" else max
        best = pick(bases[at], key=lambda name: bases[at][name].value)
        parts = []
        for loss, est in sorted(gens[at].items()):
            v = compare(est, bases[at][best], rule, what=f"{label(at)}: {loss} - {best}")  # type: ignore[arg-type]
            if twice is not None:
                again = twice.get(at, {}).get(loss)
                v = step_checked(v, compare(again, bases[at][best], rule, what=v.what)  # type: ignore[arg-type]
                                 if again is not None else None, f"{steps} ({label(at)})")
            parts.append(v)
        levels.append(all_of(parts, label(at)))
    return all_of(levels, "every level") if levels else None


def baseline_claims(generators: pd.DataFrame, baselines: pd.DataFrame, *, source: str,
                    checks: pd.DataFrame | None = None, level: str = "noise", label: Callable[[float], str] = _sigma,
                    shares: str = BASELINE_SHARES, levels_name: str = "noise level") -> list[str]:
    """One claim note per measure the rows carry (``MEASURES``), each decided on its own
    (:func:`closer_than_baselines`)."""
    notes = []
    for column, what, rule, scale in MEASURES:
        verdict = closer_than_baselines(generators, baselines, column, rule, scale=scale, checks=checks, level=level,
                                        label=label, shares=shares)
        if verdict is None:
            continue
        notes.append(claim_note(source, f"{CLAIM}, on {what.split(',')[0]}", verdict,
                                details=f"({what}; per {levels_name}, each loss minus the best baseline there on this "
                                        "measure.)"))
    return notes


def baseline_summary(rows: pd.DataFrame) -> dict[str, Any]:
    """The baselines' means per (name, noise) and measure, for a README's numbers."""
    cols = [c for c, *_ in MEASURES if c in rows]
    return {f"{name} σ={noise:g}": {c: float(g[c].astype(float).mean()) for c in cols} | {"fits": len(g)}
            for (name, noise), g in rows.groupby(["loss", "noise"])}


def train_size_baseline_claims(runs: pd.DataFrame, baselines: pd.DataFrame, *, source: str,
                               loss: str = "entropic") -> list[str]:
    """Reshetova et al.'s Fig. 11 read against its baselines: ``runs`` one row per training run (columns ``n``,
    ``seed``, ``steps`` and the measures, as reshetova_fig11_mnist_runs.csv), the runs at the most steps being the
    step check's; ``baselines`` one row per (baseline, n, seed) (column ``baseline``). Per n, Welch: the offline
    script fits a baseline to a fresh privatization of that cell's records (the cell's own noise is secret), and the
    pipeline's (each run's own records) meet the step check's runs, which trained on other privatized records --
    so nothing pairs."""
    gen = runs.assign(loss=loss)
    most = gen["steps"].max()
    split = gen["steps"].nunique() > 1
    figure, checks = (gen[gen["steps"] < most], gen[gen["steps"] == most]) if split else (gen, None)
    return baseline_claims(figure, baselines.rename(columns={"baseline": "loss"}), source=source, checks=checks,
                           level="n", label=lambda v: f"n={v:,.0f}", shares="", levels_name="training-set size n")
