"""'The generator is closer to the clean data than the trivial private baselines' (issue 69 item 3), decided by the
one claim checker on each measure separately, and the baseline rows in the W2 table with their privacy."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dpsynth.report.tables.baselines import (
    BASELINE_SHARES,
    baseline_claims,
    baseline_records,
    closer_than_baselines,
)
from dpsynth.report.tables.w2 import read_w2_csv, rows_of_role, sweep_cell, sweep_closeness_cells

K10, GAUSS = "baseline: k-means codebook, k = 10", "baseline: Gaussian fit, noise removed"


def _rows(values: dict[str, float], role: str, *, noise: float = 2.0, steps: int | None = 5000,
          kid: dict[str, float] | None = None) -> pd.DataFrame:
    """Three seeds per name; each seed offsets every name alike (+-0.3: what one seed's noise instance shares) and
    adds a small jitter of its own (+-0.01), so a per-seed difference is tight while Welch's interval is wide."""
    common, own = [-0.3, 0.0, 0.3], [0.01, -0.01, 0.0]
    recs = []
    for i, (name, v) in enumerate(values.items()):
        for seed in range(3):
            rec = {"loss": name, "noise": noise, "role": role, "seed": seed,
                   "w2": v + common[seed] + np.roll(own, i)[seed], "steps": steps}
            if kid is not None:
                rec["kid"] = kid[name] + 1e-5 * np.roll(own, i)[seed]
            recs.append(rec)
    return pd.DataFrame(recs)


def test_the_claim_is_decided_per_measure_paired_by_seed() -> None:
    """Generators 0.1 below the best baseline on W2 with a seed effect of +-0.3 common to both: per seed the
    difference is -0.1 +- 0.01 (holds); Welch over the raw runs would see +-0.3 and decide nothing. On KID the same
    generators are further than the Gaussian baseline (does not hold): each measure is read on its own."""
    gens = _rows({"entropic": 12.0, "exact": 12.05}, "figure", kid={"entropic": 2.6e-3, "exact": 2.5e-3})
    bases = _rows({K10: 12.1, GAUSS: 14.0}, "baseline", steps=None, kid={K10: 4.0e-3, GAUSS: 1.0e-3})
    w2 = closer_than_baselines(gens, bases, "w2", "less")
    assert w2 is not None and w2.verdict == "holds"
    leaf = w2.parts[0].parts[0]
    assert leaf.what == f"σ=2: entropic - {K10}" and abs(leaf.difference + 0.1) < 1e-9
    assert "paired by seed" in leaf.rule and BASELINE_SHARES in leaf.rule
    kid = closer_than_baselines(gens, bases, "kid", "less", scale=1e3)
    assert kid is not None and kid.verdict == "does not hold"
    assert kid.parts[0].parts[0].what == f"σ=2: entropic - {GAUSS}"  # the best baseline on KID, not on W2
    notes = baseline_claims(gens, bases, source="ours")
    assert len(notes) == 2 and "Ours: holds" in notes[0] and "W2 to the clean data" in notes[0]
    assert "Ours: does not hold" in notes[1] and "KID ×10³" in notes[1]
    # a baseline closer than the generators on W2: does not hold
    worse = closer_than_baselines(gens, _rows({K10: 11.5}, "baseline", steps=None), "w2", "less")
    assert worse is not None and worse.verdict == "does not hold"


def test_a_difference_that_flips_at_twice_the_steps_reads_undecided() -> None:
    gens = _rows({"entropic": 12.0}, "figure")
    bases = _rows({K10: 12.1}, "baseline", steps=None)
    kept = closer_than_baselines(gens, bases, "w2", "less", checks=_rows({"entropic": 11.8}, "step_check",
                                                                           steps=10000))
    assert kept is not None and kept.verdict == "holds"
    flipped = closer_than_baselines(gens, bases, "w2", "less", checks=_rows({"entropic": 12.3}, "step_check",
                                                                              steps=10000))
    assert flipped is not None and flipped.verdict == "undecided"
    assert "the sign flips" in flipped.parts[0].parts[0].check and "10,000 steps" in flipped.parts[0].parts[0].check
    # a level with no run at twice the steps: undecided, saying so
    other = closer_than_baselines(_rows({"entropic": 12.0}, "figure", noise=1.0),
                                  _rows({K10: 12.1}, "baseline", noise=1.0, steps=None), "w2", "less",
                                  checks=_rows({"entropic": 11.8}, "step_check", steps=10000))
    assert other is not None and other.verdict == "undecided" and "no run at" in other.parts[0].parts[0].check


def test_baseline_rows_are_labelled_with_their_privacy_and_counts(tmp_path) -> None:
    """Through the W2 table's own CSV reader and cell formats: one row per (baseline, σ), its fits counted like
    training runs, its privacy from the CSV."""
    csv = tmp_path / "mnist.csv"
    pd.concat([_rows({"entropic": 12.0}, "figure"),
               _rows({K10: 12.1}, "baseline", steps=None).assign(privacy="none: seeded")]).rename(
        columns={"noise": "noise_std"}).to_csv(csv, index=False)
    every = read_w2_csv(csv, role=None)
    recs = baseline_records(rows_of_role(every, "baseline"), run="mnist.csv", scale="paper_cpu", paper_cell="x",
                            cell=sweep_cell, closeness=sweep_closeness_cells)
    assert len(recs) == 1 and recs[0]["Loss"] == K10 and recs[0]["Privacy"] == "none: seeded"
    assert recs[0]["n"] == "3" and recs[0]["W2 to clean data ours"].endswith("(3 runs)")


def test_the_w2_table_shows_the_baseline_rows_and_their_claims(tmp_path) -> None:
    """The report's Fig. 5 table built from a sweep CSV with baseline rows: a row per (baseline, σ) with its privacy
    (the generators' rows carry none: n/a), and a baseline claim per measure the CSV has (here W2 only)."""
    from dpsynth.config import parse_params
    from dpsynth.report.tables import build_table
    from tests.test_report import fixture_raw

    params = parse_params(fixture_raw(), source="fixture")
    csv = tmp_path / "w2_noise" / "mnist.csv"
    csv.parent.mkdir(parents=True)
    pd.concat([_rows({"entropic": 12.0, "exact": 12.05}, "figure"),
               _rows({K10: 12.1, GAUSS: 14.0}, "baseline", steps=None).assign(privacy="none: seeded")]).rename(
        columns={"noise": "noise_std"}).to_csv(csv, index=False)
    built = build_table("local_privacy_w2", params, tmp_path)
    f = built.frame
    base = f[f["Loss"] == K10].iloc[0]
    assert base["Privacy"] == "none: seeded" and base["n"] == "3" and base["Noise σ"] == "2"
    assert f[f["Loss"] == "entropic"].iloc[0]["Privacy"] == "n/a"
    claims = [n for n in built.notes if n.startswith("Claim (ours)") and "trivial private baselines" in n]
    assert len(claims) == 1 and "Ours: holds" in claims[0] and "paired by seed" in claims[0]
    assert any(n.startswith("Ours: the 'baseline' rows are trivial generators") for n in built.notes)


def test_fig11s_baseline_claim_is_per_n_and_unpaired() -> None:
    """Fig. 11's runs (one loss) against baselines per n: Welch (a baseline's privatization is another noise
    instance), the runs at the most steps taken as the step check of their n."""
    from dpsynth.report.tables.baselines import train_size_baseline_claims

    runs = pd.DataFrame([{"n": n, "seed": s, "steps": st, "w2": w + 0.01 * s}
                         for n, w in ((1000, 13.3), (60000, 12.3)) for s in range(3) for st in (5000,)]
                        + [{"n": 60000, "seed": s, "steps": 10000, "w2": 11.9 + 0.01 * s} for s in range(3)])
    bases = pd.DataFrame([{"baseline": K10, "n": n, "seed": s, "w2": w + 0.01 * s}
                          for n, w in ((1000, 14.5), (60000, 11.0)) for s in range(3)])
    notes = train_size_baseline_claims(runs, bases, source="ours")
    assert len(notes) == 1 and "Ours: does not hold" in notes[0]  # at n = 60,000 the codebook is closer, kept at 10k
    assert "n=1,000: entropic - " + K10 in notes[0] and "Welch" in notes[0] and "paired" not in notes[0]
    assert "no run at 10,000 steps (n=1,000)" in notes[0]
