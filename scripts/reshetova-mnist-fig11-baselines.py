#!/usr/bin/env python3
"""The trivial private baselines (issue 69 item 3) beside the committed Fig. 11 runs of
docs/results/reshetova-mnist, without retraining a generator.

Each Fig. 11 cell (sweep n_mnist_fig11: n in 1,000 ... 60,000, seeds 0-2) trained on the first n MNIST training
records privatized by the Gaussian mechanism (epsilon 502.7643, delta 1e-4, radius 28: noise std 2). Their
privatized files are not committed (and their noise was secret), so this script privatizes the same records of
every cell again through the privatize stage itself (``stages.privatize``: same mechanism and parameters, fresh
secret noise, each a release recorded in a release ledger of its own under a temporary folder -- MNIST is a
public benchmark), and fits and scores the baselines with the evaluate stage's own function
(``evaluate.baselines.run_baselines``, what `dpsynth evaluate` now writes into a local-DP run's metrics.json): from
that privatized file alone (``methods.local_baselines.read_privatized``), scored as the evaluate stage scored each
cell (one set of 10,000 samples stored as uint8, W2 to 1,000 clean test records, KID / precision / recall in the
same feature space). Writes reshetova_fig11_mnist_baselines.csv beside the runs.

    .venv/bin/python scripts/reshetova-mnist-fig11-baselines.py [--folder ...] [--data data] [--sizes 1000 ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

R = Path(__file__).resolve().parents[1]
SWEEP = "n_mnist_fig11"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--folder", default=str(R / "docs/results/reshetova-mnist"))
    ap.add_argument("--data", default=str(R / "data"), help="data.root holding processed/mnist.npz")
    ap.add_argument("--sizes", type=int, nargs="*", default=None, help="only these n (default: every cell's)")
    args = ap.parse_args(argv)

    import pandas as pd
    import torch
    import yaml
    from threadpoolctl import threadpool_limits

    from dpsynth.config import parse_params, resolve_run
    from dpsynth.data import load_processed
    from dpsynth.evaluate.baselines import run_baselines
    from dpsynth.stages.privatize import privatize, privatized_paths

    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="fig11-baselines-"))
    root, ledger = tmp / "data", tmp / "ledger"
    (root / "processed").mkdir(parents=True)
    source = Path(args.data) / "processed" / "mnist.npz"
    os.symlink(source.resolve(), root / "processed" / "mnist.npz")
    os.environ["DPSYNTH_LEDGER"] = str(ledger)
    raw = yaml.safe_load((R / "params.yaml").read_text())
    raw.update(scale="paper_cpu", privacy_noise="secret")
    raw["data"]["root"] = str(root)
    params = parse_params(raw, source="params.yaml (paper_cpu, a temporary data root)")
    real = load_processed(source)
    cells = sorted((name for name in params.all_experiments() if name.startswith(f"{SWEEP}-")),
                   key=lambda n: (resolve_run(params, n).experiment.train_size, resolve_run(params, n).seed))
    preset = params.preset
    rows = []
    t0 = time.perf_counter()
    with threadpool_limits(limits=1):
        for name in cells:
            run = resolve_run(params, name)
            n = int(run.experiment.train_size)
            if args.sizes and n not in args.sizes:
                continue
            privatize(params, name)
            npz, _ = privatized_paths(root, name)
            rec = run_baselines(npz, real, n_synthetic=preset.n_synthetic, n_sets=preset.n_synthetic_sets,
                                seed=run.seed)
            assert rec["available"] and rec["n_records"] == n, (name, rec.get("n_records"), rec.get("reason"))
            for base, m in rec["models"].items():
                c = m["closeness"]
                rows.append({"baseline": base, "cell": name, "n": n, "seed": run.seed, "w2": m["mean"],
                             "kid": c["kid"]["mean"], "precision": c["precision"]["mean"],
                             "recall": c["recall"]["mean"], "epsilon": rec["epsilon"], "delta": rec["delta"],
                             "privacy": rec["privacy"]})
                print(f"{name} {base}: W2 {m['mean']:.3f}, KID×10³ {1e3 * c['kid']['mean']:.3f}, precision "
                      f"{c['precision']['mean']:.2f}, recall {c['recall']['mean']:.2f} "
                      f"({time.perf_counter() - t0:.0f} s)", flush=True)
            npz.unlink()  # the privatized copy (a release recorded in the temporary ledger) is not kept
    out = Path(args.folder) / "reshetova_fig11_mnist_baselines.csv"
    pd.DataFrame(rows).to_csv(out, index=False, lineterminator="\n")
    print(f"{len(rows)} rows -> {out} ({time.perf_counter() - t0:.0f} s); ledger {ledger / 'releases.jsonl'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
