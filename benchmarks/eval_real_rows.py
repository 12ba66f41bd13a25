"""One-off measurement of the "Real data" rows (docs/architecture.md, evaluation) on digits and Fashion-MNIST.

Trains the evaluation classifiers on REAL training data and scores them on the real test
split, recording accuracy and wall time, to check the acceptance bars (Fashion-MNIST: CNN
>= 88%, logistic regression >= 83%) and to size the ``quick`` scale. Run:

    .venv/bin/python benchmarks/eval_real_rows.py --out results/bench/eval_real_rows.json \
        [--only digits|fashion] [--fashion-subsets 10000,60000] [--cnn-max-epochs 8]

Fashion-MNIST is read from the Debian package files with a tiny local IDX reader (the
project's reader lives in dpsynth.data and is not a dependency of this script).
"""

from __future__ import annotations

import argparse
import gzip
import os
import platform
import struct
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dpsynth.evaluate.classifiers import train_and_score
from dpsynth.io import write_json

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")


def read_idx_gz(path: Path) -> np.ndarray:
    """Minimal IDX reader: magic (0, 0, dtype=0x08 ubyte, ndim), big-endian dims, raw bytes."""
    with gzip.open(path, "rb") as fh:
        data = fh.read()
    zero, dtype_code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype_code != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    dims = struct.unpack(">" + "I" * ndim, data[4 : 4 + 4 * ndim])
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if arr.size != int(np.prod(dims)):
        raise ValueError(f"{path}: expected {dims} elements, got {arr.size}")
    return arr.reshape(dims)


def load_fashion() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    xtr = read_idx_gz(FASHION_DIR / "train-images-idx3-ubyte.gz")[:, None]
    ytr = read_idx_gz(FASHION_DIR / "train-labels-idx1-ubyte.gz").astype(np.int64)
    xte = read_idx_gz(FASHION_DIR / "t10k-images-idx3-ubyte.gz")[:, None]
    yte = read_idx_gz(FASHION_DIR / "t10k-labels-idx1-ubyte.gz").astype(np.int64)
    return xtr, ytr, xte, yte


def load_digits_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = np.rint(d.images * 255.0 / 16.0).astype(np.uint8)[:, None]  # 0..16 -> 0..255
    y = d.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=360, stratify=y, random_state=0)
    return xtr, ytr, xte, yte


def run(name: str, kind: str, data: tuple[np.ndarray, ...], n_sub: int | None, **kw: Any) -> dict[str, Any]:
    xtr, ytr, xte, yte = data
    if n_sub is not None and n_sub < len(xtr):
        idx = np.random.default_rng(0).permutation(len(xtr))[:n_sub]
        xtr, ytr = xtr[idx], ytr[idx]
    t0 = time.perf_counter()
    r = train_and_score(kind, xtr, ytr, xte, yte, num_classes=10, seed=0, **kw)  # type: ignore[arg-type]
    r.update(dataset=name, subset=len(xtr), total_seconds=time.perf_counter() - t0)
    print(
        f"{name:8s} {kind:6s} n={len(xtr):6d} acc={r['accuracy']:.4f} epochs={r['epochs_run']} best={r['best_epoch']} "
        f"iters={r['iterations']} conv={r['converged']} time={r['total_seconds']:.1f}s",
        flush=True,
    )
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--only", choices=["digits", "fashion"], default=None)
    ap.add_argument("--kinds", default="logreg,mlp,cnn")
    ap.add_argument("--fashion-subsets", default="60000", help="comma-separated training subset sizes")
    ap.add_argument("--cnn-max-epochs", type=int, default=100)
    ap.add_argument("--mlp-max-epochs", type=int, default=100)
    ap.add_argument("--threads", type=int, default=None, help="torch threads; 1 is faster on a busy CPU")
    args = ap.parse_args()
    kinds = args.kinds.split(",")
    rows: list[dict[str, Any]] = []
    meta = {
        "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "machine": platform.machine(),
        "loadavg_start": os.getloadavg(), "args": vars(args),
        "note": "shared CPU: other people's jobs ran concurrently",
    }
    epochs = {"mlp": args.mlp_max_epochs, "cnn": args.cnn_max_epochs, "logreg": 1}
    if args.only in (None, "digits"):
        data = load_digits_split()
        for kind in kinds:
            rows.append(run("digits", kind, data, None, max_epochs=200, num_threads=args.threads))
    if args.only in (None, "fashion"):
        data = load_fashion()
        for n_sub in (int(s) for s in args.fashion_subsets.split(",")):
            for kind in kinds:
                rows.append(run("fashion", kind, data, n_sub, max_epochs=epochs[kind], num_threads=args.threads))
                meta["loadavg_end"] = os.getloadavg()
                write_json(args.out, {"meta": meta, "rows": rows})  # after each row: partial results survive
    meta["loadavg_end"] = os.getloadavg()
    write_json(args.out, {"meta": meta, "rows": rows})


if __name__ == "__main__":
    main()
