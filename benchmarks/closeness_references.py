"""What W2 and the second measure (``dpsynth.evaluate.closeness``) say about images whose answer is known.

For each seed: 1,000 clean MNIST training images, the same blurred (Gaussian, sigma 1 pixel), shrunk 30 %
towards the mean image, averages of 5 same-class images, the mean image repeated, and uniform noise
(``closeness.reference_sets``); each scored by the exact W2 to the clean test records, as the W2-vs-noise
sweep scores a generator, and by KID, precision and recall in the classifier feature space fitted on half of
the test split (``closeness.closeness``). Prints mean ± std over the seeds and writes every row:

    .venv/bin/python benchmarks/closeness_references.py --seeds 0,1,2,3,4 \\
        --json benchmarks/results/closeness_references_mnist.json

``--space-seed`` fits the feature space on another half of the test split (the ranking should not depend
on it). Needs data/processed/mnist.npz (`dpsynth data prepare mnist`). One torch and BLAS thread.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from dpsynth.data import load_processed
from dpsynth.evaluate.closeness import REFERENCES, SPACE_SEED, FeatureSpace, closeness, reference_rows
from dpsynth.io import write_json

COLUMNS = (("w2", 1.0, 3), ("kid", 1000.0, 3), ("precision", 1.0, 3), ("recall", 1.0, 3))


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: one line per reference set, each column mean ± std over the seeds (KID x 1000)."""
    seeds = sorted({r["seed"] for r in rows})
    head = "| reference | " + " | ".join("KID ×10³" if c == "kid" else c for c, _, _ in COLUMNS) + " |"
    lines = [f"{len(seeds)} seeds ({', '.join(map(str, seeds))}), {rows[0]['n']} records each; mean ± std over seeds",
             "", head, "|" + "---|" * (len(COLUMNS) + 1)]
    for name in REFERENCES:
        cells = []
        for col, scale, digits in COLUMNS:
            v = np.array([r[col] for r in rows if r["reference"] == name]) * scale
            cells.append(f"{v.mean():.{digits}f} ± {v.std():.{digits}f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--space-seed", type=int, default=SPACE_SEED)
    ap.add_argument("--root", default="data/processed")
    ap.add_argument("--cache-dir", default=None, help="where the feature network is cached (default: the machine's)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    torch.set_num_threads(1)
    with threadpool_limits(1):
        d = load_processed(Path(args.root) / "mnist.npz")
        t0 = time.perf_counter()
        space = FeatureSpace.from_test_split(d.x_test, d.y_test, d.num_classes, cache_dir=args.cache_dir,
                                             seed=args.space_seed)
        space_seconds = time.perf_counter() - t0
        print(f"feature space: {space.info}", flush=True)
        rows = reference_rows(d.x_train, d.y_train, d.x_test, space=space, seeds=seeds, n=args.n)
        # the cost the sweep pays per generator: features, KID and precision / recall of n records
        probe = np.random.default_rng(0).uniform(-1.0, 1.0, (args.n, d.x_test[0].size))
        t1 = time.perf_counter()
        closeness(probe, seed=0, space=space)
        per_set = time.perf_counter() - t1
    print(table(rows))
    print(f"\ncloseness of {args.n} records: {per_set:.2f} s on one thread; the space: {space_seconds:.1f} s "
          f"(network {'cached' if space.info['network']['cached'] else 'fitted'})")
    if args.json:
        write_json(args.json, {
            "rows": [{k: v for k, v in r.items() if k != "space"} for r in rows], "space": space.info,
            "seeds": seeds, "n": args.n, "table": table(rows), "closeness_seconds_per_set": round(per_set, 2),
            "space_seconds": round(space_seconds, 1), "threads": 1,
            "timing_note": "one torch/BLAS thread on a machine whose cores other jobs share: an upper bound",
            "machine": platform.processor() or platform.machine(), "torch": torch.__version__,
            "date": time.strftime("%Y-%m-%d")})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
