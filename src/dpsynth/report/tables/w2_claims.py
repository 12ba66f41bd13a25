"""The claims Reshetova, Chen, Ozgur ("Training generative models from privatized data via entropic optimal
transport", ISIT 2024, arXiv:2306.09547) make about their Fig. 5 beyond "the entropic loss is lowest"
(``w2.entropic_claim``), checked with the numbers of our W2-vs-noise sweep, and the step-count check that
Figs. 5 and 11 share:

- the entropic loss's W2 to the clean data grows the slowest with the noise (section 4.5: "the slope of our
  method ... is the smallest"): a least-squares slope of W2 against sigma per loss;
- the Sinkhorn divergence and the unregularized loss "do not implicitly minimize" the entropic W2 to the
  privatized data (Fig. 5, right): at each noise level the entropic loss's generator has the smallest;
- the step count (the paper states none for these runs) is ours, chosen so that twice the steps move no W2
  to the clean data by more than ``evaluate.w2.STEP_CHECK_TOLERANCE``.

Each function returns one note: the claim, then "Ours: holds / holds in part / does not hold" with the numbers.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from dpsynth.evaluate.w2 import STEP_CHECK_TOLERANCE


SLOPE_CLAIM = "the W2 of the entropic loss's generator grows the slowest with the noise σ (the smallest slope)"
PRIVATIZED_CLAIM = ("the Sinkhorn divergence and the unregularized loss do not minimise the entropic W2 to the "
                    "privatized data (the entropic loss's generator has the smallest at every noise level)")


def _verdict(held: int, of: int) -> str:
    return "holds" if held == of else "holds in part" if held else "does not hold"


def slope_claim(df: pd.DataFrame, *, figure: str = "Fig. 5") -> str:
    """Fitted slope of the mean W2 to the clean data against sigma, per loss (``df``: the sweep's figure rows,
    columns ``loss``, ``noise``, ``w2``)."""
    head = f"Claim (Reshetova et al., {figure}): {SLOPE_CLAIM}."
    slopes: dict[str, float] = {}
    for loss, g in df.groupby("loss"):
        means = g.groupby("noise")["w2"].mean()
        if len(means) >= 2:
            slopes[str(loss)] = float(np.polyfit(means.index.to_numpy(float), means.to_numpy(float), 1)[0])
    if "entropic" not in slopes or len(slopes) < 2:
        return f"{head} Ours: not checked (the entropic loss and another need two noise levels each)."
    smallest = min(slopes, key=slopes.__getitem__)
    said = ", ".join(f"{loss} {s:+.3f}" for loss, s in sorted(slopes.items(), key=lambda kv: kv[1]))
    verdict = "holds" if smallest == "entropic" else "does not hold"
    return (f"{head} Ours: {verdict} -- least-squares slope of the mean W2 against σ, smallest first: {said} "
            "(W2 per unit of σ).")


def privatized_claim(df: pd.DataFrame, *, figure: str = "Fig. 5") -> str:
    """At each noise level, which loss's generator has the smallest entropic W2 (at λ = 2σ²) to held-out
    privatized records (column ``entropic_w2_privatized``)."""
    head = f"Claim (Reshetova et al., {figure}, right): {PRIVATIZED_CLAIM}."
    if "entropic_w2_privatized" not in df or not df["entropic_w2_privatized"].notna().any():
        return f"{head} Ours: not checked (the sweep recorded no entropic W2 to privatized data)."
    held, levels, said = 0, 0, []
    for noise, g in sorted(df.groupby("noise"), key=lambda kv: kv[0]):
        means = g.groupby("loss")["entropic_w2_privatized"].mean().dropna()
        if "entropic" not in means or len(means) < 2:
            continue
        levels += 1
        held += str(means.idxmin()) == "entropic"
        said.append(f"σ={noise:g}: " + ", ".join(f"{loss} {v:.2f}" for loss, v in means.sort_values().items()))
    if not levels:
        return f"{head} Ours: not checked (no noise level has the entropic loss and another)."
    return (f"{head} Ours: {_verdict(held, levels)} -- entropic smallest at {held} of {levels} noise levels "
            f"(entropic W2 to held-out privatized records, squared units, smallest first: {'; '.join(said)}).")


def step_check(pairs: Sequence[tuple[str, float, float, int]], *, tolerance: float = STEP_CHECK_TOLERANCE) -> str:
    """``pairs``: (what, W2 at the chosen steps, W2 at twice them, the chosen steps). The criterion holds when
    every relative change is at most ``tolerance``."""
    if not pairs:
        return "Step count: not checked (no run at twice the steps)."
    moves = [(what, a, b, steps, (b - a) / a) for what, a, b, steps in pairs]
    ok = sum(abs(m[-1]) <= tolerance for m in moves)
    said = "; ".join(f"{what}: {a:.3f} at {steps:,} steps, {b:.3f} at {2 * steps:,} ({rel:+.1%})"
                     for what, a, b, steps, rel in moves)
    return (f"Step count (ours; the paper states none): twice the steps move no W2 to the clean data by more than "
            f"{tolerance:.0%}. Ours: {_verdict(ok, len(moves))} -- {said}.")


def sweep_step_check(figure_rows: pd.DataFrame, check_rows: pd.DataFrame) -> str:
    """The W2-vs-noise sweep's step check: each ``step_check`` row against the figure row of its loss and
    noise level."""
    pairs = []
    for r in check_rows.itertuples():
        base = figure_rows[(figure_rows["loss"] == r.loss) & (figure_rows["noise"] == r.noise)]
        if len(base):
            steps = int(base["steps"].iloc[0]) if "steps" in base else int(r.steps) // 2
            pairs.append((f"{r.loss} σ={r.noise:g}", float(base["w2"].mean()), float(r.w2), steps))
    return step_check(pairs)
