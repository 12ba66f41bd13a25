"""The claims Reshetova, Chen, Ozgur ("Training generative models from privatized data via entropic optimal
transport", ISIT 2024, arXiv:2306.09547) make with their W2 figures, each decided by the one claim checker
(``dpsynth.report.claims``: the compared quantities with their uncertainty in; holds / does not hold /
undecided out, with the difference, its 95 % interval and the rule):

- the entropic loss's generator stays closest to the clean data (Fig. 5 left at every noise level; Figs. 1, 6,
  7 at every mechanism row; Figs. 2/8 against the wavelet baseline): :func:`lowest_claim`;
- its W2 grows the slowest with the noise (section 4.5: "the slope of our method ... is the smallest"): a
  least-squares slope of W2 against sigma per loss, over every training run's point (:func:`slope_claim`);
- the Sinkhorn divergence and the unregularized loss "do not implicitly minimize" the entropic W2 to the
  privatized data (Fig. 5, right): :func:`privatized_claim`;
- the step count (the paper states none) is ours, chosen so that twice the steps move no W2 to the clean data by
  more than ``evaluate.w2.STEP_CHECK_TOLERANCE``: :func:`step_check`, an equivalence test.

Where a setting has several training runs (rows of the sweep CSV with different seeds, or a table row's runs)
the interval comes from them; where it has one run, from that run's sample draws (its synthetic sets, or the
sweep's ``w2_draw_std``), and the note says so; with neither, the claim is undecided.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from dpsynth.evaluate.w2 import STEP_CHECK_TOLERANCE
from dpsynth.report.claims import (
    UNDECIDED,
    Estimate,
    Verdict,
    all_of,
    claim_note,
    compare,
    estimate_of_rows,
    fit_line,
    leaves,
    lowest,
    unconverged,
)

SOURCE = "Reshetova et al., {figure}"
#: Reshetova et al.'s claim read off Fig. 5 (left), checked on our sweep by :func:`entropic_claim`.
CLAIM = "the generator trained with the entropic loss stays closest to the clean data at every noise level"
SLOPE_CLAIM = "the W2 of the entropic loss's generator grows the slowest with the noise σ (the smallest slope)"
PRIVATIZED_CLAIM = ("the Sinkhorn divergence and the unregularized loss do not minimise the entropic W2 to the "
                    "privatized data (the entropic loss's generator has the smallest at every noise level)")


def lowest_verdict(levels: dict[str, dict[str, Estimate]]) -> Verdict | None:
    """At each level, "the entropic loss's value is the smallest" (``claims.lowest``), made at every level
    (``claims.all_of``); None when no level has the entropic loss and another."""
    parts = [lowest("entropic", ests, what=label) for label, ests in levels.items()
             if "entropic" in ests and len(ests) >= 2]
    return all_of(parts, "every level") if parts else None


def smallest_decided(verdict: Verdict | None) -> float | None:
    """The smallest |difference| among the comparisons a verdict decided (holds or does not hold): what the step
    count must not move a compared quantity by (issue: twice the steps may not change what the table decides)."""
    if verdict is None:
        return None
    decided = [abs(v.difference) for v in leaves(verdict) if v.verdict != UNDECIDED and math.isfinite(v.difference)]
    return min(decided) if decided else None


#: Why a decided verdict turns undecided when the table's step check does not hold (``claims.unconverged``).
NOT_CONVERGED = ("twice the steps move a compared W2 by more than the differences decided here, so a ranking may "
                 "reflect where training stopped rather than the losses")


def lowest_claim(levels: dict[str, dict[str, Estimate]], *, figure: str, claim: str, levels_name: str,
                 what: str = "W2 to the clean data", steps: Verdict | None = None) -> str:
    """At each level (a noise level, a mechanism row), "the entropic loss's value is the smallest", decided
    against each other loss of that level; the claim is made at every level (``claims.all_of``). ``steps``: the
    table's step check; where it does not hold, the verdict reads undecided (``claims.unconverged``)."""
    verdict = lowest_verdict(levels)
    verdict = unconverged(verdict, steps, NOT_CONVERGED) if verdict is not None else None
    if verdict is None:
        return (f"Claim ({SOURCE.format(figure=figure)}): {claim}. Ours: not checked (no {levels_name[:-1]} has "
                "the entropic loss and another).")
    return claim_note(SOURCE.format(figure=figure), claim, verdict,
                      details=f"({what}, per {levels_name[:-1]}: the entropic loss minus each other loss.)")


def levels_of(df: pd.DataFrame, column: str, level: Callable[[Any], str]) -> dict[str, dict[str, Estimate]]:
    """A sweep's rows as {level label: {loss: Estimate}} (``claims.estimate_of_rows``: the rows of one (loss,
    level) are its training runs)."""
    out: dict[str, dict[str, Estimate]] = {}
    for value, g in sorted(df.groupby("noise"), key=lambda kv: kv[0]):
        ests = {str(loss): estimate_of_rows(h, column) for loss, h in g.groupby("loss")}
        out[level(value)] = {k: e for k, e in ests.items() if e.n > 0}
    return out


def entropic_claim(df: pd.DataFrame, *, figure: str = "Fig. 5", claim: str = CLAIM,
                   level: Callable[[Any], str] = lambda v: f"σ={v:g}", levels: str = "noise levels",
                   steps: Verdict | None = None) -> str:
    """Fig. 5 (left) on the sweep's rows (columns ``loss``, ``noise``, ``w2``; optional ``seed``,
    ``w2_draw_std``, ``w2_draws``)."""
    return lowest_claim(levels_of(df, "w2", level), figure=figure, claim=claim, levels_name=levels, steps=steps)


KID_CLAIM = (CLAIM + ", read with the second measure: the lowest KID to the clean data in a learned feature space "
             "(not a claim of the paper, which measures W2 only)")


def kid_rows(df: pd.DataFrame) -> pd.DataFrame:
    """A sweep's rows with KID, in x 10^3 (how the tables print it), without a draw spread (KID has none)."""
    rows = df[df["kid"].notna()].assign(kid=lambda d: 1e3 * d["kid"].astype(float))
    return rows.drop(columns=[c for c in ("kid_draw_std", "kid_draws") if c in rows])


def entropic_kid_claim(df: pd.DataFrame, *, figure: str = "Fig. 5", steps: Verdict | None = None) -> str:
    """Fig. 5 (left)'s claim decided on the second measure (column ``kid``, shown x 10^3), the rows of one (loss,
    noise) its training runs; with one run, undecided (the spread over KID's subsets is over reference draws,
    not over the generator's samples, so it is not used as the run's noise)."""
    rows = kid_rows(df)
    return lowest_claim(levels_of(rows, "kid", lambda v: f"σ={v:g}"), figure=figure, claim=KID_CLAIM,
                        levels_name="noise levels", what="KID ×10³ to the clean data", steps=steps)


def slope_claim(df: pd.DataFrame, *, figure: str = "Fig. 5", steps: Verdict | None = None) -> str:
    """Least-squares slope of W2 to the clean data against sigma per loss, over every row (each training run its
    own point; the slope's error from the residuals), the entropic slope compared with each other."""
    head = f"Claim ({SOURCE.format(figure=figure)}): {SLOPE_CLAIM}."
    slopes: dict[str, Estimate] = {}
    for loss, g in df.groupby("loss"):
        if g["noise"].nunique() >= 2:
            slopes[str(loss)] = fit_line(g["noise"].astype(float), g["w2"].astype(float), "slope of W2 against σ")[1]
    if "entropic" not in slopes or len(slopes) < 2:
        return f"{head} Ours: not checked (the entropic loss and another need two noise levels each)."
    said = ", ".join(f"{loss} {e.value:+.3f}" for loss, e in sorted(slopes.items(), key=lambda kv: kv[1].value))
    verdict = unconverged(lowest("entropic", slopes, what="slopes"), steps, NOT_CONVERGED)
    return claim_note(SOURCE.format(figure=figure), SLOPE_CLAIM, verdict,
                      details=f"(Slopes, W2 per unit of σ, smallest first: {said}.)")


def privatized_claim(df: pd.DataFrame, *, figure: str = "Fig. 5", steps: Verdict | None = None) -> str:
    """At each noise level, the entropic loss's generator has the smallest entropic W2 (at λ = 2σ²) to held-out
    privatized records (column ``entropic_w2_privatized``)."""
    fig = f"{figure}, right"
    if "entropic_w2_privatized" not in df or not df["entropic_w2_privatized"].notna().any():
        return (f"Claim ({SOURCE.format(figure=fig)}): {PRIVATIZED_CLAIM}. Ours: not checked (the sweep recorded "
                "no entropic W2 to privatized data).")
    rows = df[df["entropic_w2_privatized"].notna()]
    return lowest_claim(levels_of(rows, "entropic_w2_privatized", lambda v: f"σ={v:g}"), figure=fig,
                        claim=PRIVATIZED_CLAIM, levels_name="noise levels",
                        what="entropic W2 to held-out privatized records, squared units", steps=steps)


def step_verdict(what: str, at: Estimate, twice: Estimate, tolerance: float = STEP_CHECK_TOLERANCE,
                 absolute: float | None = None) -> Verdict:
    """"Twice the steps move the value by less than ``tolerance`` (relative)", or by less than ``absolute`` when
    given (the smallest difference the table decides): an equivalence test of twice - at."""
    if absolute is not None:
        return compare(twice, at, "within", margin=absolute, what=f"{what}: 2x steps - steps")
    return compare(twice, at, "within", margin=tolerance, relative=True, what=f"{what}: (2x steps - steps) / steps")


def step_check_verdict(pairs: Sequence[tuple[str, Estimate, Estimate, int]], *,
                       tolerance: float = STEP_CHECK_TOLERANCE, absolute: float | None = None) -> Verdict | None:
    """:func:`step_check`'s verdict (None: no run at twice the steps)."""
    if not pairs:
        return None
    return all_of([step_verdict(f"{what} at {steps:,} vs {2 * steps:,} steps", a, b, tolerance, absolute)
                   for what, a, b, steps in pairs], "every check")


def step_check(pairs: Sequence[tuple[str, Estimate, Estimate, int]], *,
               tolerance: float = STEP_CHECK_TOLERANCE, absolute: float | None = None,
               absolute_is: str = "the smallest difference this table decides",
               quantity: str = "W2 to the clean data") -> str:
    """``pairs``: (what, the value at the chosen steps, at twice them, the chosen steps). The criterion holds
    where the change's interval lies inside ±``tolerance`` (relative) or, with ``absolute`` (the smallest
    difference the table decides), inside ±``absolute``: then a decided ranking cannot be an artefact of
    stopping early."""
    verdict = step_check_verdict(pairs, tolerance=tolerance, absolute=absolute)
    if verdict is None:
        return "Step count: not checked (no run at twice the steps)."
    said = "; ".join(f"{what}: {a.value:.3f} at {steps:,} steps, {b.value:.3f} at {2 * steps:,}"
                     for what, a, b, steps in pairs)
    bound = (f"{absolute:.3f}, {absolute_is}" if absolute is not None
             else f"{tolerance:.0%}")
    note = claim_note("ours; the paper states no step count",
                      f"twice the steps move no {quantity} by more than {bound}",
                      verdict, details=f"({said}.)").replace("Claim (", "Step count (", 1)
    if verdict.verdict != "holds":
        note += (" Until it holds, the claims of this table that it decided read undecided: a ranking may reflect "
                 "where training stopped rather than the claim.")
    return note


def sweep_step_check(figure_rows: pd.DataFrame, check_rows: pd.DataFrame, absolute: float | None = None,
                     column: str = "w2", quantity: str = "W2 to the clean data") -> str:
    """The W2-vs-noise sweep's step check: each (loss, noise) of the ``step_check`` rows against the figure rows
    of the same loss and noise level, on ``column`` (W2; the second measure's KID is checked the same way)."""
    return step_check(_sweep_pairs(figure_rows, check_rows, column), absolute=absolute, quantity=quantity)


def sweep_step_verdict(figure_rows: pd.DataFrame, check_rows: pd.DataFrame,
                       absolute: float | None = None, column: str = "w2") -> Verdict | None:
    """:func:`sweep_step_check`'s verdict, which the sweep's claims are read under (``claims.unconverged``)."""
    return step_check_verdict(_sweep_pairs(figure_rows, check_rows, column), absolute=absolute)


def _sweep_pairs(figure_rows: pd.DataFrame, check_rows: pd.DataFrame,
                 column: str = "w2") -> list[tuple[str, Estimate, Estimate, int]]:
    pairs = []
    for (loss, noise), g in check_rows.groupby(["loss", "noise"]):
        base = figure_rows[(figure_rows["loss"] == loss) & (figure_rows["noise"] == noise)]
        if len(base):
            steps = int(base["steps"].iloc[0]) if "steps" in base else int(g["steps"].iloc[0]) // 2
            pairs.append((f"{loss} σ={noise:g}", estimate_of_rows(base, column), estimate_of_rows(g, column), steps))
    return pairs
