#!/usr/bin/env python3
"""Re-decide the committed Reshetova et al. MNIST results (docs/results/reshetova-mnist/) with the current report
code -- the counted cells and the one claim checker -- from the raw numbers committed beside them, without
training anything:

- Fig. 5 (``local_privacy_w2_mnist``): from ``w2_noise_mnist.csv``, the sweep's own rows, through the table
  builder as `dpsynth report` would build it;
- Fig. 11 (``reshetova_fig11_mnist``): from the committed table's per-n values (one training run per n; the
  runs' metrics.json files were not committed), mapped to the first seed's cells of today's sweep, through the
  same builder and the same figure code.

Usage: .venv/bin/python scripts/redecide-reshetova-mnist.py [DIR]   (default docs/results/reshetova-mnist)
Writes the two tables (.md, .csv) and the Fig. 11 figure in DIR. A later `make reshetova-mnist` run replaces
them all with tables built from its own runs.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from dpsynth.config import load_params  # noqa: E402
from dpsynth.report.runs import Run, RunStore  # noqa: E402
from dpsynth.report.tables import build_table  # noqa: E402
from dpsynth.report.tables.render import write_table  # noqa: E402
from dpsynth.report.train_size import train_size_figure  # noqa: E402

PROVENANCE = ("Re-decided on {date} by scripts/redecide-reshetova-mnist.py from the committed raw numbers of the "
              "2026-11-28 run (one training run per cell): the cells now say their counts and each claim is "
              "decided by the claim checker; no run was repeated.")


class CommittedRuns(RunStore):
    """The Fig. 11 cells' W2 as committed (one run per n), served as runs of the first seed's cells."""

    def __init__(self, results: Path, w2: dict[str, float]) -> None:
        super().__init__(results)
        self.w2 = w2

    def experiment(self, name: str) -> Run | None:
        if name not in self.w2:
            return None
        return Run(name, self.results / name / "metrics.json",
                   {"w2": {"mean": self.w2[name], "n": 1, "values": [self.w2[name]]}, "scale": "paper_cpu",
                    "train": {"steps": 5000}})


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "docs" / "results" / "reshetova-mnist"
    import datetime

    date = datetime.date.today().isoformat()
    params = load_params(REPO / "params.yaml").model_copy(update={"scale": "paper_cpu"})
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp)
        (results / "w2_noise").mkdir()
        for suffix in (".csv", ".json"):
            shutil.copy(out / f"w2_noise_mnist{suffix}", results / "w2_noise" / f"mnist{suffix}")
        fig5 = build_table("local_privacy_w2_mnist", params, results)
        fig5.notes.insert(0, PROVENANCE.format(date=date))
        write_table(fig5, out, "paper_cpu")

        committed = pd.read_csv(out / "reshetova_fig11_mnist.csv", dtype=str)
        w2 = {}
        for r in committed.itertuples():
            n = int(str(r.n).replace(",", ""))
            cell = next(c for c in params.cells_of("n_mnist_fig11")
                        if params.all_experiments()[c].train_size == n and c.endswith(f"-n{n}") and "seed0" in c)
            w2[cell] = float(str(r._4).split()[0])
        table = params.tables["reshetova_fig11_mnist"]
        from dpsynth.report.tables.train_size import _train_size_table

        fig11 = _train_size_table("reshetova_fig11_mnist", table, params, CommittedRuns(results, w2))
        fig11.notes.insert(0, PROVENANCE.format(date=date) + " The step check of that run trained the n = 1,000 "
                           "cell at 10,000 steps (13.359 -> 13.219, -1.0 %, one run each: no interval, so it "
                           "decides nothing); today's check trains the n = 60,000 cell, which converges slowest.")
        write_table(fig11, out, "paper_cpu")
        train_size_figure(fig11, params, out)
    print(f"re-decided {out}/local_privacy_w2_mnist.md and reshetova_fig11_mnist.md (+ .csv, .png)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
