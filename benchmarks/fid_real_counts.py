"""The "Real data" rows' FID (real train vs real test) at several sample counts, and its 1/N trend.

FID is biased upward at small N: for two sets of N images the expected FID is close to
FID_inf + k / N (Chong & Forsyth, "Effectively Unbiased FID", CVPR 2020). The quick pipeline
computes 500 vs 500; the papers report real-data FID at full counts (MNIST 1.6, Fashion-MNIST
2.5). This script extracts Inception features ONCE for the first ``--max`` training and test
images (the same extractor, resize and statistics as ``dpsynth evaluate``), computes FID at every
count in ``--counts`` from nested prefixes, fits FID(N) = a + k/N by least squares and writes
the measured and fitted values:

    .venv/bin/python benchmarks/fid_real_counts.py mnist fashion_mnist \
        --counts 500,1000,2000,5000,10000 --threads 2 --json benchmarks/results/fid_real_counts.json

Needs data/processed/<dataset>.npz (`dpsynth data prepare <dataset>`) and the offline Inception
(`make env`). Cost: ~0.1-0.2 s per image per CPU thread; 2 x max images per dataset.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dpsynth.data import load_processed
from dpsynth.evaluate.fid import InceptionFeatures, frechet_distance, resolve_weights
from dpsynth.io import write_json


def stats(feats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and unbiased covariance in float64, as torch-fidelity's fid_features_to_statistics."""
    f = feats.astype(np.float64)
    return f.mean(axis=0), np.cov(f, rowvar=False)


def fit_inverse_n(counts: list[int], fids: list[float]) -> dict[str, float]:
    """Least-squares FID(N) = a + k/N; a is the extrapolated FID at infinite N."""
    a_mat = np.stack([np.ones(len(counts)), 1.0 / np.asarray(counts, np.float64)], axis=1)
    (a, k), *_ = np.linalg.lstsq(a_mat, np.asarray(fids, np.float64), rcond=None)
    resid = np.asarray(fids) - a_mat @ np.array([a, k])
    return {"fid_inf": float(a), "k": float(k), "max_abs_residual": float(np.abs(resid).max())}


def measure(dataset: str, counts: list[int], root: Path, extractor: InceptionFeatures) -> dict[str, Any]:
    real = load_processed(root / f"{dataset}.npz")
    n_max = max(counts)
    if n_max > min(len(real.x_train), len(real.x_test)):
        raise SystemExit(f"{dataset}: --counts up to {n_max} exceed the splits "
                         f"({len(real.x_train)} train, {len(real.x_test)} test)")
    t0 = time.perf_counter()
    f_train = extractor.features(real.x_train[:n_max]).numpy()
    f_test = extractor.features(real.x_test[:n_max]).numpy()
    seconds = time.perf_counter() - t0
    rows = []
    for n in counts:
        fid = frechet_distance(*stats(f_train[:n]), *stats(f_test[:n]))
        rows.append({"n_train": n, "n_test": n, "fid": fid})
        print(f"{dataset}: real train vs test, {n} vs {n}: FID {fid:.2f}", flush=True)
    fit = fit_inverse_n(counts, [r["fid"] for r in rows])
    print(f"{dataset}: fit FID(N) = {fit['fid_inf']:.2f} + {fit['k']:.0f}/N "
          f"(max residual {fit['max_abs_residual']:.2f}); {2 * n_max} images in {seconds:.0f} s", flush=True)
    return {"rows": rows, "fit": fit, "feature_seconds": seconds, "images": 2 * n_max}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("datasets", nargs="+")
    ap.add_argument("--counts", default="500,1000,2000", help="comma-separated sample counts per side")
    ap.add_argument("--root", default="data/processed")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    counts = sorted({int(c) for c in args.counts.split(",")})
    torch.set_num_threads(args.threads)
    path, reason = resolve_weights(None, allow_download=False)
    if path is None:
        raise SystemExit(f"no Inception network: {reason}")
    extractor = InceptionFeatures(path)
    out: dict[str, Any] = {"extractor": extractor.extractor, "weights_sha256": extractor.weights_sha256,
                           "threads": args.threads, "machine": platform.processor() or platform.machine(),
                           "torch": torch.__version__, "datasets": {}}
    for ds in args.datasets:
        out["datasets"][ds] = measure(ds, counts, Path(args.root), extractor)
    if args.json:
        write_json(args.json, out)


if __name__ == "__main__":
    main()
