#!/usr/bin/env python3
"""Add the trivial private baselines (issue 69 item 3) to the committed Fig. 5 sweep of
docs/results/reshetova-mnist, without retraining a generator.

The committed sweep's generators trained on MNIST's 60,000 training records privatized with seeded noise
(``evaluate.w2.privatized_records``: seed, noise level) and were scored against the clean test split. This script
rebuilds those very privatized records per (seed, level), fits the baselines to them and scores them by the
sweep's own path (``evaluate.baselines.sweep_baseline_rows``: ``w2.score_sampler`` and ``closeness.CloseToClean`` in
the same feature space), then writes them into the committed CSV as rows of role ``baseline`` (replacing earlier
baseline rows; the other rows keep every value, with an empty privacy cell).

Before it adds a row it checks that it reproduces the committed estimator: the ``clean training records``
reference row's first draw, recomputed here, must give the committed W2 and KID (same records, same test
subsample, same feature network); else it stops and writes nothing.

    .venv/bin/python scripts/reshetova-mnist-baselines.py [--folder docs/results/reshetova-mnist] [--data data]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

R = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--folder", default=str(R / "docs/results/reshetova-mnist"))
    ap.add_argument("--data", default=str(R / "data"), help="data.root holding processed/mnist.npz")
    args = ap.parse_args(argv)

    import numpy as np
    import pandas as pd
    from threadpoolctl import threadpool_limits

    from dpsynth.data import load_processed
    from dpsynth.evaluate.baselines import BASELINE, sweep_baseline_rows
    from dpsynth.evaluate.closeness import CloseToClean, FeatureSpace
    from dpsynth.evaluate.w2 import w2_distance
    from dpsynth.evaluate.w2_references import CLEAN, reference_sets
    from dpsynth.methods.entropic_wgan import to_records
    from dpsynth.stages.w2noise import FIELDS

    folder = Path(args.folder)
    csv, info = folder / "w2_noise_mnist.csv", json.loads((folder / "w2_noise_mnist.json").read_text())
    df = pd.read_csv(csv)
    st = info["settings"]
    seeds, levels, n_eval, draws = info["seeds"], st["noise_levels"], st["n_eval"], info["draws"]
    n_train = int(df["n_train"].dropna().iloc[0])
    data = load_processed(Path(args.data) / "processed" / "mnist.npz")
    if n_train != len(data.x_train):
        print(f"the committed sweep trained on {n_train} records, this dataset has {len(data.x_train)}: this script "
              "rebuilds the full-split sweep only", file=sys.stderr)
        return 2
    torch_threads = 1
    import torch

    torch.set_num_threads(torch_threads)
    with threadpool_limits(limits=torch_threads):
        space = FeatureSpace.from_test_split(data.x_test, data.y_test, data.num_classes)
        extra = CloseToClean(space)
        # the estimator reproduces: the committed 'clean training records' reference row, first draw
        ref_row = df[(df["role"] == "reference") & (df["loss"] == CLEAN)].iloc[0]
        train = to_records(data.x_train)
        clean = reference_sets(train, tuple(data.x_train.shape[1:]), np.random.default_rng([seeds[0], 0x5EF, 0]),
                               n_eval)[CLEAN]
        w2 = w2_distance(clean, to_records(data.x_test), n=n_eval, seed=seeds[0])
        kid = extra(clean, seeds[0])["kid"]
        print(f"check: clean training records W2 {w2:.6f} (committed {ref_row['w2']:.6f}), KID {kid:.6g} "
              f"(committed {ref_row['kid']:.6g})", flush=True)
        if not (math.isclose(w2, ref_row["w2"], rel_tol=1e-6) and math.isclose(kid, ref_row["kid"], rel_tol=1e-3,
                                                                                abs_tol=1e-7)):
            print("the estimator does not reproduce the committed reference row: nothing written", file=sys.stderr)
            return 1
        t0 = time.perf_counter()
        rows = sweep_baseline_rows(data.x_train, data.x_test, levels, seeds, n_eval=n_eval, draws=draws, extra=extra,
                                   on_row=lambda r: print(f"seed {r['seed']} σ {r['noise_std']:g} {r['loss']}: W2 "
                                                          f"{r['w2']:.3f}, KID×10³ {1e3 * r['kid']:.3f}, precision "
                                                          f"{r['precision']:.2f}, recall {r['recall']:.2f} "
                                                          f"({time.perf_counter() - t0:.0f} s)", flush=True))
    scale = str(df["scale"].dropna().iloc[0])
    new = pd.DataFrame([{**r, "n_train": n_train, "scale": scale} for r in rows])
    kept = df[df["role"] != BASELINE]
    columns = [c for c in FIELDS if c in kept.columns or c in new.columns]
    out = pd.concat([kept, new], ignore_index=True)[columns]
    out.to_csv(csv, index=False, lineterminator="\n")
    print(f"{len(new)} baseline rows -> {csv} ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
