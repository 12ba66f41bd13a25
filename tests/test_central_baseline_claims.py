"""The central-DP methods tables' baseline claim (report.tables.methods.baseline_claims): "every private generator
is closer to the data than the trivial baseline released at the same target", decided per measure by the one
checker. Synthetic records, so each verdict is known in advance: a run's accuracy over five synthetic sets spread
by 0.002 against a gap of 0.2 decides (the t interval's half-width is about 0.003); one set decides nothing."""

from __future__ import annotations

from pathlib import Path

from dpsynth.report.runs import Run
from dpsynth.report.tables.methods import BASELINE_CLAIM, CENTRAL_MEASURES, baseline_claims


def _run(name: str, accuracy: float, fid: float, sets: int = 5) -> Run:
    def rec(v: float) -> dict:
        values = [v + 0.002 * (k - (sets - 1) / 2) for k in range(sets)]
        return {"mean": sum(values) / sets, "std": 0.0, "n": sets, "values": values}

    return Run(name, Path(f"/results/runs/{name}/metrics.json"), {
        "classifiers": {k: rec(accuracy) for k in ("logreg", "mlp", "cnn")},
        "fid": {"available": True, **rec(fid), "kid": rec(fid / 1000), "precision": rec(0.5), "recall": rec(0.5)}})


def _verdicts(notes: list[str]) -> dict[str, str]:
    out = {}
    for note in notes:
        measure = note.split(f"{BASELINE_CLAIM}, on ")[1].split(". Ours: ")[0]
        out[measure] = note.split(". Ours: ")[1].split(" -- ")[0]
    return out


def test_a_baseline_far_below_the_generators_makes_the_claim_hold() -> None:
    gens = [("A", [_run("a", 0.9, 50.0)]), ("B", [_run("b", 0.8, 60.0)])]
    v = _verdicts(baseline_claims(gens, [("baseline", [_run("base", 0.5, 200.0)])]))
    assert v["LogReg accuracy (%)"] == v["MLP accuracy (%)"] == v["CNN accuracy (%)"] == "holds"
    assert v["FID"] == v["KID ×10³"] == "holds"
    # precision and recall tie at 0.5 everywhere: the interval straddles 0
    assert v["precision"] == v["recall"] == "undecided"
    assert "FID∞" not in v  # a measure no row carries gets no claim


def test_one_generator_below_the_baseline_makes_it_not_hold() -> None:
    gens = [("A", [_run("a", 0.9, 50.0)]), ("B", [_run("b", 0.3, 300.0)])]
    notes = baseline_claims(gens, [("baseline", [_run("base", 0.5, 200.0)])])
    v = _verdicts(notes)
    assert v["CNN accuracy (%)"] == v["FID"] == "does not hold"
    cnn = next(n for n in notes if "on CNN accuracy" in n)
    assert "B - the baseline = -20.00" in cnn  # printed in percent, as the table prints the column


def test_one_set_of_one_run_decides_nothing_and_says_why() -> None:
    gens = [("A", [_run("a", 0.9, 50.0, sets=1)])]
    notes = baseline_claims(gens, [("baseline", [_run("base", 0.5, 200.0, sets=1)])])
    assert set(_verdicts(notes).values()) == {"undecided"}
    assert all("no noise estimate" in n for n in notes)


def test_every_measure_the_table_prints_has_its_rule() -> None:
    from dpsynth.report.runs import METRICS, SMALL_N_METRICS

    assert {m for m, *_ in CENTRAL_MEASURES} == set(METRICS) | set(SMALL_N_METRICS)
    assert all(rule in ("less", "greater") for _, _, rule, _ in CENTRAL_MEASURES)
