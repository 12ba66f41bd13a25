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

:func:`compare` turns two estimates into a :class:`Verdict`: the difference, its two-sided 95 % interval
(Welch's t-interval: the difference's standard error sqrt(se_a^2 + se_b^2), Welch-Satterthwaite degrees of
freedom) and one of three verdicts under a stated rule:

- ``less`` / ``greater`` ("a is smaller/larger than b"): **holds** when the whole interval is on the claimed
  side of 0, **does not hold** when it is wholly on the other side, **undecided** when it contains 0. A
  difference inside its interval is never "holds".
- ``within`` ("a equals b up to a margin m", an equivalence test): **holds** when the interval lies inside
  (-m, m), **does not hold** when it lies wholly outside it, **undecided** otherwise.

:func:`all_of` combines the parts of a claim made at several levels ("at every noise level"): it holds when
every part holds, does not hold when any part does not, and is undecided otherwise. :func:`claim_note` writes
the one line a table's notes carry.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
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
    of freedom (inf: normal), from ``source`` (what the error measures), summarising ``n`` numbers."""

    value: float
    se: float | None
    dof: float
    source: str
    n: int = 1

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

    def text(self, digits: int = 3) -> str:
        """``entropic - exact = -0.052, 95 % interval [-0.081, -0.023] (3 training runs each): holds``."""
        if self.parts:
            return f"{self.what}: {self.verdict} ({'; '.join(p.text(digits) for p in self.parts)})"
        if not math.isfinite(self.difference):
            return f"{self.what}: {self.verdict} ({self.rule})"
        lo, hi = self.interval
        if math.isfinite(lo) and math.isfinite(hi):
            ci = f"{LEVEL:.0%} interval [{lo:+.{digits}f}, {hi:+.{digits}f}]"
        else:
            ci = "no interval"
        return f"{self.what} = {self.difference:+.{digits}f}, {ci}: {self.verdict}"


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
    se = math.sqrt(sum((e.se or 0.0) ** 2 for e in (a, b))) / scale
    dof = _welch_dof(a, b)
    half = _t_quantile(dof) * se
    lo, hi = diff - half, diff + half
    sources = "; ".join(sorted({e.source for e in (a, b)}))
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


def lowest(target: str, estimates: dict[str, Estimate], *, what: str = "") -> Verdict:
    """"``target`` has the smallest value": ``target`` - each other is < 0, combined by :func:`all_of`."""
    if target not in estimates or len(estimates) < 2:
        return _undecided(what or target, math.nan, f"needs {target} and another")
    parts = [compare(estimates[target], est, "less", what=f"{target} - {other}")
             for other, est in estimates.items() if other != target]
    return all_of(parts, what or f"{target} lowest")


def unconverged(verdict: Verdict, steps: Verdict | None, why: str) -> Verdict:
    """``verdict`` as the step check lets it stand: unchanged when the check holds (or there is none), else
    undecided -- its compared differences kept, so a reader sees what they would say -- with the reason in its
    rule: a ranking decided at a step count that twice the steps would move by more than the differences it rests
    on may reflect where training stopped, not the claim."""
    if steps is None or steps.verdict == HOLDS or verdict.verdict == UNDECIDED:
        return verdict
    return Verdict(UNDECIDED, verdict.difference, verdict.interval,
                   f"{verdict.rule}; undecided because the step check {steps.verdict}: {why}", verdict.what,
                   verdict.parts)


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


def estimate_of_records(records: Sequence[dict | None]) -> Estimate:
    """A row's score from its training runs' metric records (``{"mean", "std", "n", "values"}``, one per run,
    ``values`` per synthetic set): the runs' spread when there are several, else the one run's synthetic sets
    (said so), else one value."""
    recs = [r for r in records if isinstance(r, dict) and "mean" in r and math.isfinite(float(r["mean"]))]
    if len(recs) >= 2:
        return Estimate.of_runs(float(r["mean"]) for r in recs)
    if len(recs) == 1:
        values = recs[0].get("values") or []
        return Estimate.of_draws(values) if len(values) >= 2 else Estimate.single(float(recs[0]["mean"]))
    return Estimate(math.nan, None, math.nan, "no run", 0)


def estimate_of_rows(rows: pd.DataFrame, column: str) -> Estimate:
    """A quantity of a sweep CSV's rows for one setting (a pandas frame; each row a training run): the runs'
    spread when there are several; one row with ``{column}_draw_std`` and ``{column}_draws`` beside it: that
    bootstrap; else one value."""
    import pandas as pd

    v = rows[column].astype(float)
    v = v[np.isfinite(v)]
    if len(v) >= 2:
        return Estimate.of_runs(v)
    if len(v) == 1:
        row = rows.loc[v.index[0]]
        std, k = row.get(f"{column}_draw_std"), row.get(f"{column}_draws")
        if std is not None and k is not None and pd.notna(std) and pd.notna(k):
            return Estimate.of_draw_std(float(v.iloc[0]), float(std), int(k))
        return Estimate.single(float(v.iloc[0]))
    return Estimate(math.nan, None, math.nan, "no run", 0)
