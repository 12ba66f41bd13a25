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

With ``--references`` it rebuilds the reference rows instead (``evaluate.w2_references.reference_rows``, as the
sweep computes them: the Gaussian fit to the clean records joined them after the sweep ran): every committed
reference row must come out again with the committed W2 and KID, else nothing is written; then the reference rows
are replaced by the recomputed ones, every other row kept.
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
    ap.add_argument("--references", action="store_true", help="rebuild the reference rows, not the baselines")
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
        if args.references:
            return _rebuild_references(df, csv, data, seeds[0], n_eval, draws, extra, n_train)
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


def _rebuild_references(df, csv, data, seed, n_eval, draws, extra, n_train) -> int:  # type: ignore[no-untyped-def]
    """The reference rows recomputed by the sweep's own function; written only if every committed one reproduces."""
    import pandas as pd

    from dpsynth.evaluate.w2_references import REFERENCE, reference_rows
    from dpsynth.stages.w2noise import FIELDS

    t0 = time.perf_counter()
    rows = {r["loss"]: r for r in reference_rows(data.x_train, data.x_test, seed=seed, n_eval=n_eval, draws=draws,
                                                 extra=extra)}
    committed = df[df["role"] == REFERENCE]
    for _, old in committed.iterrows():
        new = rows.get(old["loss"])
        ok = new is not None and all(math.isclose(new[k], old[k], rel_tol=1e-6 if k == "w2" else 1e-3, abs_tol=1e-7)
                                     for k in ("w2", "kid"))
        print(f"check: {old['loss']}: W2 {new['w2'] if new else float('nan'):.6f} (committed {old['w2']:.6f}), KID "
              f"{new['kid'] if new else float('nan'):.6g} (committed {old['kid']:.6g})", flush=True)
        if not ok:
            print("a committed reference row does not reproduce: nothing written", file=sys.stderr)
            return 1
    scale = str(df["scale"].dropna().iloc[0])
    missing = [r for name, r in rows.items() if name not in set(committed["loss"])]
    new_rows = pd.DataFrame([{**r, "n_train": n_train, "scale": scale} for r in missing])
    at = int(committed.index.max())  # before the last reference row (the mean image, the constant)
    out = pd.concat([df.loc[:at - 1], new_rows, df.loc[at:]], ignore_index=True)
    out = out[[c for c in FIELDS if c in out.columns]]
    out.to_csv(csv, index=False, lineterminator="\n")
    print(f"{len(new_rows)} reference rows added -> {csv} ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
