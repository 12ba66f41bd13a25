"""The claims of Reshetova et al.'s Fig. 5 beyond "entropic lowest" (slopes, the right panel) and the step-count
check shared with Fig. 11, on hand-made sweep rows: each verdict follows the numbers, and each can fail."""

from __future__ import annotations

import pandas as pd

from dpsynth.report.tables.w2_claims import privatized_claim, slope_claim, step_check, sweep_step_check


def _rows(w2: dict[str, list[float]], ent: dict[str, list[float]] | None = None) -> pd.DataFrame:
    noise = [0.5, 1.0, 1.5, 2.0]
    recs = []
    for loss, values in w2.items():
        for k, (s, v) in enumerate(zip(noise, values)):
            rec = {"loss": loss, "noise": s, "w2": v, "steps": 5000}
            if ent is not None:
                rec["entropic_w2_privatized"] = ent[loss][k]
            recs.append(rec)
    return pd.DataFrame(recs)


def test_slope_claim_holds_only_when_the_entropic_slope_is_smallest() -> None:
    df = _rows({"entropic": [10, 10.5, 11, 11.5], "exact": [10, 11, 12, 13], "sinkhorn_divergence": [10, 12, 14, 16]})
    note = slope_claim(df)
    assert "Ours: holds" in note and "entropic +1.000" in note and "exact +2.000" in note
    df = _rows({"entropic": [10, 12, 14, 16], "exact": [10, 11, 12, 13]})
    assert "Ours: does not hold" in slope_claim(df)
    assert "not checked" in slope_claim(_rows({"exact": [1, 2, 3, 4]}))


def test_privatized_claim_counts_the_levels_where_entropic_is_smallest() -> None:
    w2 = {"entropic": [1, 1, 1, 1], "exact": [1, 1, 1, 1]}
    held = _rows(w2, {"entropic": [5, 6, 7, 8], "exact": [6, 7, 8, 9]})
    assert "Ours: holds -- entropic smallest at 4 of 4" in privatized_claim(held)
    part = _rows(w2, {"entropic": [5, 8, 7, 10], "exact": [6, 7, 8, 9]})
    assert "Ours: holds in part -- entropic smallest at 2 of 4" in privatized_claim(part)
    assert "not checked" in privatized_claim(_rows(w2))


def test_step_check_passes_within_five_percent_and_fails_beyond() -> None:
    assert "Ours: holds" in step_check([("a", 10.0, 9.6, 5000)])  # -4 %
    note = step_check([("a", 10.0, 9.6, 5000), ("b", 10.0, 9.4, 5000)])  # -6 % on b
    assert "Ours: holds in part" in note and "-6.0%" in note and "10,000" in note
    assert "Ours: does not hold" in step_check([("a", 10.0, 10.6, 5000)])
    fig = _rows({"entropic": [10, 10, 10, 10], "exact": [10, 10, 10, 12]})
    checks = pd.DataFrame([{"loss": "entropic", "noise": 2.0, "w2": 10.2, "steps": 10000},
                           {"loss": "exact", "noise": 2.0, "w2": 10.8, "steps": 10000}])
    note = sweep_step_check(fig, checks)
    assert "entropic σ=2: 10.000 at 5,000 steps, 10.200 at 10,000 (+2.0%)" in note
    assert "exact σ=2: 12.000" in note and "-10.0%" in note and "holds in part" in note
