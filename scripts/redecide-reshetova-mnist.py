#!/usr/bin/env python3
"""Re-decide the committed Reshetova et al. MNIST results (docs/results/reshetova-mnist/) with the current report
code -- the one claim checker, paired by seed where the runs share seeds, each claim step-checked on its own
quantity -- from the raw rows committed beside them, without training anything:

- Fig. 5 (``local_privacy_w2_mnist``): from ``w2_noise_mnist.csv`` / ``.json``, the sweep's own rows (every run
  with its seed, the runs at twice the steps, the reference rows), through the table builder as `dpsynth report`
  builds it from ``results/w2_noise/mnist.csv``;
- Fig. 11 (``reshetova_fig11_mnist``): from ``reshetova_fig11_mnist_runs.csv``, every run's released numbers
  (its name, n, seed, steps, W2, KID, precision, recall), served to the same builder as the runs' metrics.json
  would be, and the same figure code. The seed pairing comes from params.yaml (the design), not from the CSV's
  column, which the script only checks against it.

Usage: .venv/bin/python scripts/redecide-reshetova-mnist.py [DIR]   (default docs/results/reshetova-mnist)
Writes the two tables (.md, .csv) and the Fig. 11 figure in DIR; the sample grids and Fig. 5's figure need the
runs' samples and are left as they are. A later `make reshetova-mnist` run replaces them all.
"""

from __future__ import annotations

import datetime
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from dpsynth.config import load_params  # noqa: E402
from dpsynth.evaluate.record import mean_std  # noqa: E402
from dpsynth.report.runs import Run, RunStore  # noqa: E402
from dpsynth.report.tables import build_table  # noqa: E402
from dpsynth.report.tables.render import write_table  # noqa: E402
from dpsynth.report.tables.train_size import seed_of  # noqa: E402
from dpsynth.report.train_size import train_size_figure  # noqa: E402

PROVENANCE = ("Re-decided on {date} by scripts/redecide-reshetova-mnist.py from the committed raw rows of the "
              "2026-11-28 run ({what}): the claims decided again by the current claim checker -- paired by seed "
              "where the compared runs share one, each decided difference checked on itself at twice the steps; "
              "no run was repeated.")


class CommittedRuns(RunStore):
    """The Fig. 11 runs as committed in ``reshetova_fig11_mnist_runs.csv`` (one row per run), served as the
    metrics.json records the table builder reads."""

    def __init__(self, results: Path, rows: pd.DataFrame) -> None:
        super().__init__(results)
        self.rows = {str(r["run"]): r for _, r in rows.iterrows()}
        self.preset: dict = {}  # the scale's settings the runs' metrics.json carried (their scale notes read them)

    def experiment(self, name: str) -> Run | None:
        r = self.rows.get(name)
        if r is None:
            return None
        close = {k: mean_std([float(r[k])]) for k in ("kid", "precision", "recall")}
        return Run(name, self.results / name / "metrics.json",
                   {"w2": {**mean_std([float(r["w2"])]), "closeness": {**close, "n_points": 1000}},
                    "scale": "paper_cpu", "train": {"steps": int(r["steps"])}, "preset": self.preset})


def main() -> int:
    out = (Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "docs" / "results" / "reshetova-mnist").resolve()
    date = datetime.date.today().isoformat()
    params = load_params(REPO / "params.yaml").model_copy(update={"scale": "paper_cpu"})
    runs = pd.read_csv(out / "reshetova_fig11_mnist_runs.csv")
    wrong = [str(r.run) for r in runs.itertuples() if seed_of(params, str(r.run)) != int(r.seed)]
    if wrong:
        raise SystemExit(f"the runs' seeds in the CSV differ from params.yaml's design: {wrong}")
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)  # the notes name the sweep's file as `dpsynth report` does, relative: results/w2_noise/...
        results, rendered = Path("results"), Path(tmp) / "out"
        (results / "w2_noise").mkdir(parents=True)
        rendered.mkdir()
        for suffix in (".csv", ".json"):
            shutil.copy(out / f"w2_noise_mnist{suffix}", results / "w2_noise" / f"mnist{suffix}")
        fig5 = build_table("local_privacy_w2_mnist", params, results)
        fig5.notes.insert(0, PROVENANCE.format(date=date, what="w2_noise_mnist.csv, 3 seeds per setting"))
        write_table(fig5, rendered, "paper_cpu")

        table = params.tables["reshetova_fig11_mnist"]
        from dpsynth.report.tables.train_size import _train_size_table

        store = CommittedRuns(results, runs)
        store.preset = params.scales["paper_cpu"].model_dump(mode="json")
        fig11 = _train_size_table("reshetova_fig11_mnist", table, params, store)
        fig11.notes.insert(0, PROVENANCE.format(date=date, what="reshetova_fig11_mnist_runs.csv, 3 seeds per n"))
        write_table(fig11, rendered, "paper_cpu")
        train_size_figure(fig11, params, rendered)
        for name in ("local_privacy_w2_mnist.md", "local_privacy_w2_mnist.csv", "reshetova_fig11_mnist.md",
                     "reshetova_fig11_mnist.csv", "reshetova_fig11_mnist.png"):
            shutil.copy(rendered / name, out / name)
    print(f"re-decided {out}/local_privacy_w2_mnist.md and reshetova_fig11_mnist.md (+ .csv, .png)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
