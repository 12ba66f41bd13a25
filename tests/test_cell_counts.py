"""Issue 64: no table shows a single value as exact. One training run on one synthetic set reads "x (1 run)",
never "x ± 0.0"; the generated tables of a real smoke run and the committed results are both read."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO

#: "± 0.0", "± 0.000" (not followed by a non-zero digit): a spread of exactly zero printed as if measured.
ZERO_SPREAD = re.compile(r"± 0\.0+(?![0-9]*[1-9])")


def _offenders(files: list[Path]) -> list[str]:
    out = []
    for f in files:
        for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            if ZERO_SPREAD.search(line):
                out.append(f"{f}:{i}: {line[:160]}")
    return out


def test_the_pattern_finds_a_zero_spread_and_nothing_else() -> None:
    assert ZERO_SPREAD.search("13.359 ± 0.000") and ZERO_SPREAD.search("61.0 ± 0.0 |")
    assert not ZERO_SPREAD.search("12.100 (1 run; ± 0.050 over 8 sample draws)")
    assert not ZERO_SPREAD.search("0.200 ± 0.008 (1 run, std over 3 sets)") and not ZERO_SPREAD.search("31.1 (1 run)")


def test_committed_results_show_no_single_value_as_exact() -> None:
    files = sorted((REPO / "docs" / "results").rglob("*.md")) + sorted((REPO / "docs" / "results").rglob("*.csv"))
    assert files, "docs/results holds no table"
    assert _offenders(files) == []


def test_smoke_tables_show_no_single_value_as_exact(smoke_snakemake: Path) -> None:
    tables = smoke_snakemake / "results" / "tables"
    files = sorted(tables.glob("*.md")) + sorted(tables.glob("*.csv"))
    assert len(files) > 10
    assert _offenders(files) == []
    table1 = (tables / "table1_fmnist.md").read_text(encoding="utf-8")
    assert "(1 run)" in table1  # the smoke scale scores one synthetic set of one run: it says so


def test_the_evaluate_jobs_log_gives_one_set_as_one_value() -> None:
    """The job log's score lines follow the tables' rule: one synthetic set reads "x (1 set)", never "+- 0.0000";
    several give their spread and count."""
    from dpsynth.evaluate.record import mean_std
    from dpsynth.stages.evaluate import _spread

    assert _spread(mean_std([0.4208])) == "0.4208 (1 set)"
    assert _spread(mean_std([0.4, 0.5])) == "0.4500 +- 0.0500 (std over 2 sets)"


def test_a_spread_that_rounds_to_zero_shows_its_first_digit_and_an_exact_zero_says_all_equal() -> None:
    """Several runs whose spread rounds to 0 at the cell's digits (recall 0.000 / 0.001 / 0.000) must not read
    "± 0.00" either: the spread keeps its first significant digit, and an exact zero says the runs were equal."""
    from dpsynth.report.runs import fmt_summary, fmt_values

    cells = [fmt_values([0.06, 0.061, 0.059], digits=2), fmt_values([0.0, 0.0, 0.0], digits=2),
             fmt_summary([{"mean": 1.0, "std": 0.0, "n": 3, "values": [1.0, 1.0, 1.0]}]),
             fmt_summary([{"mean": 1.0, "std": 0.0, "n": 2, "values": [1.0, 1.0]},
                          {"mean": 2.0, "std": 0.0, "n": 2, "values": [2.0, 2.0]}])]
    assert cells == ["0.06 ± 0.001 (3 runs)", "0.00 (3 runs, all equal)", "1.0 (1 run, 3 sets, all equal)",
                     "1.5 ± 0.7 (2 runs; within a run all equal over 2 sets)"]
    assert not any(ZERO_SPREAD.search(c) for c in cells)
