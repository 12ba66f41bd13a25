#!/usr/bin/env python3
"""Compare the released outputs of two pipeline runs: the "no behaviour change" check of a refactoring.

Usage: python scripts/compare-runs.py TREE_A TREE_B

Run the same pipeline in both trees first, with noise that can be replayed, e.g. in two git worktrees
(before and after a change): `snakemake --cores 2 --config scale=smoke privacy_noise=reproducible`.
Then this compares, file by file: every released generator (`models/*/generator.pt`, weights), every
synthetic set (`data/synthetic/*/*.npz`), every privacy report and every `metrics.json` (timings and
speeds left out: they are the machine's, not the run's). Identical files say "same"; otherwise the
largest absolute difference of the numbers that differ (and which keys). Exit 0 when all are the same,
1 otherwise.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

TIMING = ("seconds", "per_s", "elapsed", "wall", "time", "created", "host", "threads")
GLOBS = ("models/*/generator.pt", "data/synthetic/*/*.npz", "models/*/privacy.json", "results/runs/*/metrics.json",
         "results/real/*/metrics.json")


def _numbers(obj: object, path: str = "") -> dict[str, object]:
    """Flatten JSON to {path: leaf}, timing keys left out."""
    if isinstance(obj, dict):
        out: dict[str, object] = {}
        for k, v in obj.items():
            if not any(t in k for t in TIMING):
                out.update(_numbers(v, f"{path}.{k}"))
        return out
    if isinstance(obj, list):
        out = {}
        for i, v in enumerate(obj):
            out.update(_numbers(v, f"{path}[{i}]"))
        return out
    return {path: obj}


def _arrays(path: Path) -> dict[str, np.ndarray]:
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as z:
            return {k: np.asarray(z[k]) for k in z.files}
    import torch

    blob = torch.load(path, map_location="cpu", weights_only=True)
    return {k: v.numpy() for k, v in blob["state_dict"].items()}


def compare(a: Path, b: Path) -> str:
    if a.read_bytes() == b.read_bytes():
        return "same"
    if a.suffix == ".json":
        na, nb = _numbers(json.loads(a.read_text())), _numbers(json.loads(b.read_text()))
        keys = sorted(k for k in set(na) | set(nb) if na.get(k) != nb.get(k))
        if not keys:
            return "same (timings differ)"
        num = [abs(float(na[k]) - float(nb[k])) for k in keys  # type: ignore[arg-type]
               if isinstance(na.get(k), (int, float)) and isinstance(nb.get(k), (int, float))]
        return f"differs in {len(keys)} values ({', '.join(keys[:4])}{' ...' if len(keys) > 4 else ''})" + \
            (f", max |diff| {max(num):.3g}" if num else "")
    xa, xb = _arrays(a), _arrays(b)
    if set(xa) != set(xb) or any(xa[k].shape != xb[k].shape for k in xa):
        return "differs in its arrays' names or shapes"
    other = sorted(k for k in xa if not np.issubdtype(xa[k].dtype, np.number) and not np.array_equal(xa[k], xb[k]))
    diff = max([float(np.abs(xa[k].astype(np.float64) - xb[k].astype(np.float64)).max())
                for k in xa if np.issubdtype(xa[k].dtype, np.number) and xa[k].size] or [0.0])
    if diff == 0 and not other:
        return "same arrays"
    return f"differs: max |diff| {diff:.3g}" + (f"; also {', '.join(other)}" if other else "")


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] in ("-h", "--help"):
        print(__doc__.strip().splitlines()[2])
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    ta, tb = Path(argv[0]), Path(argv[1])
    files = sorted({p.relative_to(ta) for g in GLOBS for p in ta.glob(g)} | {p.relative_to(tb) for g in GLOBS
                                                                             for p in tb.glob(g)})
    if not files:
        print(f"no pipeline outputs under {ta} or {tb}", file=sys.stderr)
        return 2
    bad = 0
    for rel in files:
        if not (ta / rel).is_file() or not (tb / rel).is_file():
            verdict = f"only in {ta if (ta / rel).is_file() else tb}"
        else:
            verdict = compare(ta / rel, tb / rel)
        bad += not verdict.startswith("same")
        print(f"{verdict:<60} {rel}")
    print(f"{len(files) - bad} of {len(files)} the same")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
