"""The one claim checker: every claim a table checks (Reshetova et al.'s Figs. 1, 2/8, 5, 6, 7, 11, the step
count's criterion, and any other) is decided here, from the compared quantities WITH their uncertainty.

A claim compares quantities that are themselves noisy: a training run with secret noise is one draw of a
random generator, and its score one draw of a finite-sample estimate. So a quantity comes in as an
:class:`Estimate` -- a value, its standard error, the degrees of freedom of that error, and where the error
comes from:

- **training runs** (``Estimate.of_runs``): the mean over R >= 2 runs, its standard error the runs' sample
  standard deviation / sqrt(R). This is the uncertainty a reader cares about (would another run agree?).
- **sample draws of one run** (``Estimate.of_draws``): one run's score with the standard deviation of the
  estimate over repeated sample draws (a bootstrap of the estimator only; it cannot see the spread between
  training runs, so the notes say so).
- **a fit** (``Estimate.of_fit``): a fitted slope or exponent with the standard error the regression gives.
- **one value** (``Estimate.single``): no noise estimate at all. Any claim resting on it is undecided.

:func:`compare` turns two estimates into a :class:`Verdict`: the difference, its two-sided 95 % interval and
one of three verdicts under a stated rule. The interval follows the design, never a guess:

- **paired by seed** where both estimates carry their runs by seed (``Estimate.of_seeded_runs``: the data
  record the seed and say what one seed shares -- initial weights, batches, noise instance) over the same seeds:
  the difference is taken per seed and its t interval over the seeds (df = runs - 1). Runs of one seed share
  most of their between-run variation (Reshetova et al.'s Fig. 5 sweep: the losses correlate at +0.95 over
  seeds), which an interval for independent cells would count twice;
- **Welch's t-interval** for independent cells (no seeds recorded, or other seeds): the difference's standard
  error sqrt(se_a^2 + se_b^2), Welch-Satterthwaite degrees of freedom.

The rule each verdict prints says which was used.

- ``less`` / ``greater`` ("a is smaller/larger than b"): **holds** when the whole interval is on the claimed
  side of 0, **does not hold** when it is wholly on the other side, **undecided** when it contains 0. A
  difference inside its interval is never "holds".
- ``within`` ("a equals b up to a margin m", an equivalence test): **holds** when the interval lies inside
  (-m, m), **does not hold** when it lies wholly outside it, **undecided** otherwise.

:func:`all_of` combines the parts of a claim made at several levels ("at every noise level"): it holds when
every part holds, does not hold when any part does not, and is undecided otherwise. :func:`claim_note` writes
the one line a table's notes carry.

:func:`step_checked` is the step count's check on a claim's own quantity: a decided difference stands only when,
recomputed at twice the training steps, its interval still excludes 0 on the same side; otherwise it reads
undecided, saying why. (A level's check is an equivalence test of its move, ``compare(..., "within")``, against a
margin the claim itself gives -- there is no default margin.)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

HOLDS = "holds"
DOES_NOT_HOLD = "does not hold"
UNDECIDED = "undecided"
#: Two-sided coverage of every interval the checker prints.
LEVEL = 0.95

Rule = Literal["less", "greater", "within"]


def _t_quantile(dof: float) -> float:
    """The two-sided ``LEVEL`` quantile of Student's t with ``dof`` degrees of freedom (normal when infinite)."""
    from scipy import stats

    p = 0.5 + LEVEL / 2
    return float(stats.norm.ppf(p)) if not math.isfinite(dof) else float(stats.t.ppf(p, dof))


@dataclass(frozen=True)
class Estimate:
    """A compared quantity: ``value`` with standard error ``se`` (None: no noise estimate) on ``dof`` degrees
    of freedom (inf: normal), from ``source`` (what the error measures), summarising ``n`` numbers. ``by_seed``:
    the training runs' values by seed, kept when the data record the seed (``of_seeded_runs``), with ``shares``
    what two runs of one seed have in common -- what lets :func:`compare` pair."""

    value: float
    se: float | None
    dof: float
    source: str
    n: int = 1
    by_seed: tuple[tuple[int, float], ...] = ()
    shares: str = ""

    @classmethod
    def of_runs(cls, values: Iterable[float]) -> Estimate:
        """The mean over training runs; its error the runs' spread (None for one run)."""
        v = np.asarray([float(x) for x in values], dtype=np.float64)
        v = v[np.isfinite(v)]
        if v.size == 0:
            return cls(math.nan, None, math.nan, "no run", 0)
        if v.size == 1:
            return cls(float(v[0]), None, math.nan, "1 training run, no noise estimate", 1)
        return cls(float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size)), float(v.size - 1),
                   f"{v.size} training runs", int(v.size))

    @classmethod
    def of_seeded_runs(cls, runs: Iterable[tuple[int, float]], shares: str) -> Estimate:
        """The mean over training runs (as :meth:`of_runs`), each run kept with its seed so that a comparison with
        runs of the same seeds is paired (:func:`compare`). ``shares``: what one seed fixes in this design (e.g.
        "initial weights, batches, privatization noise"); a seed seen twice identifies no run, so then the runs
        are kept unpaired."""
        pairs = [(int(s), float(v)) for s, v in runs if math.isfinite(float(v))]
        base = cls.of_runs(v for _, v in pairs)
        seeds = [s for s, _ in pairs]
        if not shares or len(set(seeds)) != len(seeds) or len(seeds) < 2:
            return base
        return replace(base, by_seed=tuple(sorted(pairs)), shares=shares)

    @classmethod
    def of_draws(cls, draws: Sequence[float]) -> Estimate:
        """One run's score as the mean over repeated sample draws (its synthetic sets), its error the draws'
        spread / sqrt(count): a bootstrap of the estimator only, blind to the spread between training runs."""
        d = np.asarray([float(x) for x in draws], dtype=np.float64)
        d = d[np.isfinite(d)]
        if d.size < 2:
            return cls.single(float(d[0])) if d.size else cls(math.nan, None, math.nan, "no value", 0)
        return cls(float(d.mean()), float(d.std(ddof=1) / math.sqrt(d.size)), float(d.size - 1),
                   f"1 training run; spread over {d.size} sample draws only", 1)

    @classmethod
    def of_draw_std(cls, value: float, std: float, draws: int) -> Estimate:
        """One estimate whose standard deviation over ``draws`` repeated sample draws was measured beside it
        (e.g. the W2-vs-noise sweep's ``w2_draw_std``): the same bootstrap caveat as :meth:`of_draws`."""
        if not (math.isfinite(std) and std >= 0 and draws >= 2):
            return cls.single(value)
        return cls(float(value), float(std), float(draws - 1),
                   f"1 training run; spread over {draws} sample draws only", 1)

    @classmethod
    def of_fit(cls, value: float, se: float, dof: float, what: str) -> Estimate:
        """A fitted parameter and the standard error its regression gives."""
        ok = math.isfinite(se) and se >= 0 and dof > 0
        return cls(float(value), float(se) if ok else None, float(dof) if ok else math.nan, what)

    @classmethod
    def single(cls, value: float) -> Estimate:
        return cls(float(value), None, math.nan, "1 value, no noise estimate", 1)


@dataclass(frozen=True)
class Verdict:
    """One decided comparison (or the combination of several, ``parts``)."""

    verdict: str
    difference: float
    interval: tuple[float, float]
    rule: str
    what: str = ""
    parts: tuple[Verdict, ...] = field(default_factory=tuple)
    #: the step check on this difference (:func:`step_checked`), printed beside it; empty: none
    check: str = ""

    def text(self, digits: int = 3) -> str:
        """``entropic - exact = -0.052, 95 % interval [-0.081, -0.023]: holds`` (then the step check, if any)."""
        if self.parts:
            return f"{self.what}: {self.verdict} ({'; '.join(p.text(digits) for p in self.parts)})"
        if not math.isfinite(self.difference):
            return f"{self.what}: {self.verdict} ({self.rule})"
        lo, hi = self.interval
        if math.isfinite(lo) and math.isfinite(hi):
            ci = f"{LEVEL:.0%} interval [{lo:+.{digits}f}, {hi:+.{digits}f}]"
        else:
            ci = "no interval"
        check = f" ({self.check})" if self.check else ""
        return f"{self.what} = {self.difference:+.{digits}f}, {ci}{check}: {self.verdict}"


def _undecided(what: str, difference: float, why: str) -> Verdict:
    return Verdict(UNDECIDED, difference, (math.nan, math.nan), why, what)


def compare(a: Estimate, b: Estimate, rule: Rule, *, margin: float = 0.0, what: str = "a - b",
            relative: bool = False) -> Verdict:
    """Decide "a < b" (``less``), "a > b" (``greater``) or "|a - b| < margin" (``within``) from the interval of
    a - b (module docstring). ``relative``: compare (a - b) / b instead (a step count's "moves by at most 5 %");
    its error is the difference's divided by |b|."""
    if not (math.isfinite(a.value) and math.isfinite(b.value)):
        return _undecided(what, math.nan, "a quantity is missing")
    diff = a.value - b.value
    scale = abs(b.value) if relative else 1.0
    if scale == 0:
        return _undecided(what, math.nan, "relative to 0")
    diff /= scale
    unknown = [e for e in (a, b) if e.se is None and not _is_exact(e)]
    if unknown or all(_is_exact(e) for e in (a, b)):
        sources = " and ".join(sorted({e.source for e in (a, b)}))
        return _undecided(what, diff, f"no noise estimate ({sources}): a difference without an interval decides "
                                      "nothing")
    per_seed = paired(a, b)
    if per_seed is not None:
        d = np.asarray(per_seed, dtype=np.float64) / scale
        diff, se, dof = float(d.mean()), float(d.std(ddof=1) / math.sqrt(d.size)), float(d.size - 1)
        design = (f"paired by seed: the t interval of the {d.size} per-seed differences, df {d.size - 1}; one seed "
                  f"= {a.shares}")
    else:
        se = math.sqrt(sum((e.se or 0.0) ** 2 for e in (a, b))) / scale
        dof = _welch_dof(a, b)
        design = ("against a fixed value: the estimate's own interval" if any(_is_exact(e) for e in (a, b))
                  else "Welch's interval, the cells independent" + _why_unpaired(a, b))
    half = _t_quantile(dof) * se
    lo, hi = diff - half, diff + half
    sources = "; ".join(sorted({e.source for e in (a, b)})) + f"; {design}"
    if rule == "within":
        verdict = HOLDS if -margin < lo and hi < margin else DOES_NOT_HOLD if lo >= margin or hi <= -margin \
            else UNDECIDED
        unit = f"{margin:.0%}" if relative else f"{margin:g}"
        how = f"holds if the {LEVEL:.0%} interval lies inside ±{unit}, does not hold if wholly outside ({sources})"
    else:
        sign = -1.0 if rule == "less" else 1.0
        verdict = HOLDS if sign * lo > 0 and sign * hi > 0 else DOES_NOT_HOLD if sign * lo < 0 and sign * hi < 0 \
            else UNDECIDED
        how = (f"holds if the {LEVEL:.0%} interval excludes 0 on the claimed side ({'<' if rule == 'less' else '>'}"
               f" 0), does not hold if it excludes 0 on the other ({sources})")
    return Verdict(verdict, diff, (lo, hi), how, what)


def paired(a: Estimate, b: Estimate) -> list[float] | None:
    """The per-seed differences a - b when the design pairs them: both carry their runs by seed, of the same
    design (``shares``), over the same seeds (at least two); else None (Welch). Seeds that only partly overlap
    are not paired: dropping runs to pair the rest would change the compared means."""
    if not (a.by_seed and b.by_seed) or a.shares != b.shares:
        return None
    sa, sb = dict(a.by_seed), dict(b.by_seed)
    if set(sa) != set(sb) or len(sa) < 2:
        return None
    return [sa[s] - sb[s] for s in sorted(sa)]


def _why_unpaired(a: Estimate, b: Estimate) -> str:
    if not (a.by_seed or b.by_seed):
        return ""
    if a.by_seed and b.by_seed and a.shares == b.shares:
        return f" (seeds {sorted(dict(a.by_seed))} and {sorted(dict(b.by_seed))} differ, so no run has its twin)"
    return " (only one side's runs are identified by seed)" if not (a.by_seed and b.by_seed) else \
        " (the two sides' seeds fix different things)"


def _is_exact(e: Estimate) -> bool:
    """A fixed reference (e.g. the paper's slope -0.5, see :func:`exact`) has no error by construction."""
    return e.se is None and e.source.startswith("exact")


def exact(value: float, what: str = "the paper's value") -> Estimate:
    """A fixed number a claim compares against (no error of its own)."""
    return Estimate(float(value), None, math.inf, f"exact: {what}", 1)


def _welch_dof(a: Estimate, b: Estimate) -> float:
    terms = [(e.se ** 2, e.dof) for e in (a, b) if e.se is not None and e.se > 0]
    if not terms:
        return math.inf
    num = sum(v for v, _ in terms) ** 2
    den = sum(v * v / d for v, d in terms if math.isfinite(d) and d > 0)
    return num / den if den > 0 else math.inf


def all_of(parts: Sequence[Verdict], what: str = "") -> Verdict:
    """A claim made at several levels: holds if every part holds, does not hold if any part does not,
    undecided otherwise (no part at all: undecided)."""
    if not parts:
        return _undecided(what, math.nan, "nothing to compare")
    verdicts = [p.verdict for p in parts]
    verdict = DOES_NOT_HOLD if DOES_NOT_HOLD in verdicts else HOLDS if all(v == HOLDS for v in verdicts) \
        else UNDECIDED
    return Verdict(verdict, math.nan, (math.nan, math.nan),
                   "holds if every part holds, does not hold if any part does not, undecided otherwise", what,
                   tuple(parts))


def lowest(target: str, estimates: dict[str, Estimate], *, what: str = "", rule: Rule = "less") -> Verdict:
    """"``target`` has the smallest value": ``target`` - each other is < 0, combined by :func:`all_of`
    (``rule="greater"``: the largest, for a measure where higher is closer, e.g. precision)."""
    if target not in estimates or len(estimates) < 2:
        return _undecided(what or target, math.nan, f"needs {target} and another")
    parts = [compare(estimates[target], est, rule, what=f"{target} - {other}")
             for other, est in estimates.items() if other != target]
    return all_of(parts, what or f"{target} lowest")


def unconverged(verdict: Verdict, steps: Verdict | None, why: str) -> Verdict:
    """``verdict`` (a claim about a level or a rate) as the step check on that level lets it stand: unchanged when
    the check holds (or the table has none, which its notes say), else undecided -- its compared differences kept,
    so a reader sees what they would say -- with the reason in its rule: a level that twice the steps move by more
    than the claim's own margin may reflect where training stopped, not the claim. Comparisons are checked on
    their own difference instead (:func:`step_checked`)."""
    if steps is None or steps.verdict == HOLDS or verdict.verdict == UNDECIDED:
        return verdict
    return Verdict(UNDECIDED, verdict.difference, verdict.interval,
                   f"{verdict.rule}; undecided because the step check {steps.verdict}: {why}", verdict.what,
                   verdict.parts)


#: The step check's rule on a compared difference (printed with every verdict it guards).
STEP_RULE = ("step check: a decided difference stands only if, recomputed at twice the steps, its interval still "
             "excludes 0 on the same side; else undecided")


def step_checked(verdict: Verdict, twice: Verdict | None, steps: str = "twice the steps") -> Verdict:
    """``verdict`` (one comparison) as the step check on its own quantity lets it stand: ``twice`` is the same
    difference recomputed from the runs at twice the steps (None: no such runs). A decided difference stands when
    ``twice``'s interval excludes 0 on the side of ``verdict``'s difference; otherwise -- the sign flips, the
    interval reaches 0, or there is nothing at twice the steps -- it reads undecided, its numbers kept and the
    reason beside them: a ranking that does not survive more training may reflect where training stopped. An
    undecided verdict stays undecided (with the check's numbers shown when there are any)."""
    if verdict.parts:
        raise ValueError("step_checked guards single comparisons; apply it to each part")
    if twice is None or not math.isfinite(twice.difference):
        check = f"no run at {steps} to recompute it"
        kept = False
    else:
        lo, hi = twice.interval
        side = 1.0 if verdict.difference > 0 else -1.0
        kept = math.isfinite(lo) and math.isfinite(hi) and side * lo > 0 and side * hi > 0
        ci = f"[{lo:+.3f}, {hi:+.3f}]" if math.isfinite(lo) and math.isfinite(hi) else "no interval"
        flipped = math.isfinite(twice.difference) and side * twice.difference < 0
        check = f"at {steps}: {twice.difference:+.3f}, {ci}" + (
            ", same sign" if kept else ", the sign flips" if flipped else ", the interval reaches 0")
    if verdict.verdict == UNDECIDED:
        return replace(verdict, check=check if twice is not None else "")
    if kept:
        return replace(verdict, check=check, rule=f"{verdict.rule}; {STEP_RULE}")
    return replace(verdict, verdict=UNDECIDED, check=f"would {_would(verdict.verdict)}; {check}",
                   rule=f"{verdict.rule}; {STEP_RULE}")


def _would(verdict: str) -> str:
    return "hold" if verdict == HOLDS else "not hold"


def leaves(v: Verdict) -> list[Verdict]:
    """The single comparisons under a combined verdict (itself when it has no parts)."""
    return [leaf for p in v.parts for leaf in leaves(p)] if v.parts else [v]


def claim_note(source: str, claim: str, verdict: Verdict, *, details: str = "", digits: int = 3) -> str:
    """The line a table's notes carry: the claim, the verdict, each compared difference with its interval,
    and the rules that decided them."""
    parts = verdict.parts or (verdict,)
    said = "; ".join(p.text(digits) for p in parts)
    tail = f" {details}" if details else ""
    rules = sorted({leaf.rule for leaf in leaves(verdict)})
    combined = f"; combined: {verdict.rule}" if verdict.parts else ""
    return f"Claim ({source}): {claim}. Ours: {verdict.verdict} -- {said}.{tail} Rule: {' / '.join(rules)}{combined}."


def fit_line(x: Sequence[float], y: Sequence[float], what: str) -> tuple[Estimate, Estimate]:
    """Least squares y = a + b x over every point (each training run's point its own): the intercept and the
    slope, each with the regression's standard error on n - 2 degrees of freedom (the residuals, lack of fit
    included, are the noise)."""
    xv, yv = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    ok = np.isfinite(xv) & np.isfinite(yv)
    xv, yv = xv[ok], yv[ok]
    if xv.size < 2 or np.ptp(xv) == 0:
        nan = Estimate(math.nan, None, math.nan, "no fit", 0)
        return nan, nan
    xc = xv - xv.mean()
    sxx = float(np.dot(xc, xc))
    slope = float(np.dot(xc, yv - yv.mean()) / sxx)
    icpt = float(yv.mean() - slope * xv.mean())
    dof = xv.size - 2
    if dof < 1:
        return Estimate.single(icpt), Estimate.single(slope)
    s2 = float(np.sum((yv - icpt - slope * xv) ** 2) / dof)
    se_slope = math.sqrt(s2 / sxx)
    se_icpt = math.sqrt(s2 * (1.0 / xv.size + xv.mean() ** 2 / sxx))
    src = f"least-squares {what} over {xv.size} points, error from the residuals"
    return Estimate.of_fit(icpt, se_icpt, dof, src), Estimate.of_fit(slope, se_slope, dof, src)


def estimate_of_records(records: Sequence[dict | None], seeds: Sequence[int | None] | None = None,
                        shares: str = "") -> Estimate:
    """A row's score from its training runs' metric records (``{"mean", "std", "n", "values"}``, one per run,
    ``values`` per synthetic set): the runs' spread when there are several, else the one run's synthetic sets
    (said so), else one value. ``seeds`` (one per record, from the design) and ``shares`` (what one seed fixes):
    the runs kept by seed, so :func:`compare` pairs them with runs of the same seeds."""
    keep = [i for i, r in enumerate(records)
            if isinstance(r, dict) and "mean" in r and math.isfinite(float(r["mean"]))]
    recs = [records[i] for i in keep]
    if len(recs) >= 2:
        if seeds is not None and shares and all(seeds[i] is not None for i in keep):
            return Estimate.of_seeded_runs(((int(seeds[i]), float(records[i]["mean"])) for i in keep), shares)
        return Estimate.of_runs(float(r["mean"]) for r in recs)
    if len(recs) == 1:
        values = recs[0].get("values") or []
        return Estimate.of_draws(values) if len(values) >= 2 else Estimate.single(float(recs[0]["mean"]))
    return Estimate(math.nan, None, math.nan, "no run", 0)


def estimate_of_rows(rows: pd.DataFrame, column: str, shares: str = "") -> Estimate:
    """A quantity of a sweep CSV's rows for one setting (a pandas frame; each row a training run): the runs'
    spread when there are several (kept by their ``seed`` column when ``shares`` says what one seed fixes in
    this sweep, so runs of the same seeds are compared paired); one row with ``{column}_draw_std`` and
    ``{column}_draws`` beside it: that bootstrap; else one value."""
    import pandas as pd

    v = rows[column].astype(float)
    v = v[np.isfinite(v)]
    if len(v) >= 2:
        if shares and "seed" in rows and rows.loc[v.index, "seed"].notna().all():
            return Estimate.of_seeded_runs(zip(rows.loc[v.index, "seed"].astype(int), v), shares)
        return Estimate.of_runs(v)
    if len(v) == 1:
        row = rows.loc[v.index[0]]
        std, k = row.get(f"{column}_draw_std"), row.get(f"{column}_draws")
        if std is not None and k is not None and pd.notna(std) and pd.notna(k):
            return Estimate.of_draw_std(float(v.iloc[0]), float(std), int(k))
        return Estimate.single(float(v.iloc[0]))
    return Estimate(math.nan, None, math.nan, "no run", 0)
