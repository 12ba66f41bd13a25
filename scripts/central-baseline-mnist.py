#!/usr/bin/env python3
"""The central-DP baseline (issue 69 item 3) on MNIST at DP-Sinkhorn / GS-WGAN Table 1's (10, 1e-5), scored by
the evaluate stage's own code at the quick scale's sizes -- until a pipeline stage does it (not wired yet).

Releases the class-conditional Gaussian (``methods.central_baseline.release_baseline``: accounted, reserved in a
release ledger of its own under a temporary folder -- MNIST is public --, secret noise), samples one synthetic set
of ``--n`` images with balanced labels (``sampling.balanced_labels``), stores it as the sampling stage stores a
generator's (``sampling.write_synthetic``, uint8, its privacy report inside) and scores it with
``metrics.evaluate_synthetic`` (the classifiers on the real test split, FID) and ``closeness.closeness_of_sets``
(KID, precision, recall). Prints one JSON object.

    .venv/bin/python scripts/central-baseline-mnist.py [--data data] [--n 10000] [--epsilon 10] [--delta 1e-5]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

R = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(R / "data"))
    ap.add_argument("--dataset", default="mnist")
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--epsilon", type=float, default=10.0)
    ap.add_argument("--delta", type=float, default=1e-5)
    args = ap.parse_args(argv)

    import numpy as np
    import torch
    from threadpoolctl import threadpool_limits

    from dpsynth.data import load_processed
    from dpsynth.evaluate.closeness import closeness_of_sets
    from dpsynth.evaluate.metrics import evaluate_synthetic
    from dpsynth.evaluate.sampling import balanced_labels, write_synthetic
    from dpsynth.methods.central_baseline import NAME, release_baseline
    from dpsynth.privacy.ledger_store import ReleaseLedger
    from dpsynth.privacy.randomness import NoiseSource

    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp(prefix="central-baseline-"))
    os.environ["DPSYNTH_LEDGER"] = str(tmp / "ledger")
    real = load_processed(Path(args.data) / "processed" / f"{args.dataset}.npz")
    x = real.x_train.reshape(len(real.x_train), -1) / 255.0
    with threadpool_limits(limits=1):
        model, report = release_baseline(x, real.y_train, real.num_classes, dataset=args.dataset,
                                         name=f"central_baseline_{args.dataset}", epsilon=args.epsilon,
                                         delta=args.delta, out=tmp / "release.npz", noise=NoiseSource("secret"),
                                         ledger=ReleaseLedger.configured(None))
        rng = np.random.default_rng()  # sampling the released model: post-processing, no privacy role
        labels = balanced_labels(args.n, real.num_classes, rng)
        imgs = model.sample_labels(labels, rng)
        u8 = (imgs * 255.0).round().astype(np.uint8).reshape(args.n, *real.record_shape)
        path = tmp / "seed0.npz"
        write_synthetic(path, u8, labels, real.num_classes, report, {"baseline": NAME})
        scores = evaluate_synthetic([path], real, kinds=["logreg", "mlp", "cnn"], max_epochs=3, train_subset=5000,
                                    fid_samples=200, fid_weights=None, fid_download=False, fid_timeout=60.0,
                                    test_subset=2000)
        close = closeness_of_sets([u8], real.x_test, real.y_test, real.num_classes)
    out = {"baseline": NAME, "dataset": args.dataset, "epsilon": report["epsilon"], "sigma": report["sigma"],
           "classifiers": {k: v.get("mean") if isinstance(v, dict) else v
                           for k, v in scores["classifiers"].items()},
           "fid": scores["fid"].get("mean"), "fid_reason": scores["fid"].get("reason"),
           "kid": close["kid"]["mean"], "precision": close["precision"]["mean"], "recall": close["recall"]["mean"],
           "n_synthetic": args.n, "seconds": scores["seconds"]}
    print(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
