"""The processed dataset format and its validating loader.

``data/processed/{name}.npz`` holds ``x_train``, ``y_train``, ``x_test``, ``y_test``:
images as uint8 ``(N, C, H, W)``, 2-D points as float32 ``(N, 2)``, labels int64 in
``[0, num_classes)``. A JSON sidecar holds the provenance. The loader checks all of it
so every later stage can trust the arrays it is given.
"""

from __future__ import annotations

import errno
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dpsynth.errors import DataError

KEYS = ("x_train", "y_train", "x_test", "y_test")


def subset_indices(n: int, subset: int | None, seed: int) -> np.ndarray | None:
    """``subset`` of ``n`` record indices, sorted, drawn without replacement and fixed by ``seed``
    (None: all): the one subset choice, for a scale's private training records and the
    evaluation's classifier training sets and, at the smoke scale, its test subset alike."""
    if subset is None or subset >= n:
        return None
    return np.sort(np.random.default_rng(seed).choice(n, size=subset, replace=False))


def images_to_signed(x: np.ndarray, dtype: type[np.floating] = np.float64) -> np.ndarray:
    """uint8 images -> ``x / 255 * 2 - 1`` in ``dtype``: the [-1, 1] record space the Sinkhorn-based
    generators (tanh output) train in and the W2 metric compares in. One formula, so training and
    evaluation see the same numbers (``x / 127.5 - 1`` can differ in the last bit)."""
    return np.asarray(x).astype(dtype) / dtype(255.0) * dtype(2.0) - dtype(1.0)


@dataclass(frozen=True)
class Dataset:
    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int

    @property
    def is_image(self) -> bool:
        return self.x_train.ndim == 4

    @property
    def record_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])


def validate_arrays(name: str, arrays: dict[str, np.ndarray], num_classes: int, source: str) -> None:
    """Raise DataError naming ``source`` and the array if anything is off."""
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if x.ndim == 4:
            if x.dtype != np.uint8:
                raise DataError(f"{source}: x_{split} must be uint8 images, got {x.dtype}")
        elif x.ndim == 2:
            if not np.issubdtype(x.dtype, np.floating) or not np.isfinite(x).all():
                raise DataError(f"{source}: x_{split} point cloud must be finite floats")
        else:
            raise DataError(f"{source}: x_{split} has shape {x.shape}; expected (N, C, H, W) or (N, D)")
        if y.ndim != 1 or y.shape[0] != x.shape[0]:
            raise DataError(f"{source}: y_{split} has shape {y.shape}, expected ({x.shape[0]},)")
        if not np.issubdtype(y.dtype, np.integer):
            raise DataError(f"{source}: y_{split} must be integer labels, got {y.dtype}")
        if y.size and (y.min() < 0 or y.max() >= num_classes):
            raise DataError(f"{source}: y_{split} has labels outside [0, {num_classes}): "
                            f"min {y.min()}, max {y.max()}")
    if arrays["x_train"].shape[0] == 0:
        raise DataError(f"{source}: the training split of {name} is empty")
    if arrays["x_train"].shape[1:] != arrays["x_test"].shape[1:]:
        raise DataError(f"{source}: train records {arrays['x_train'].shape[1:]} and test records "
                        f"{arrays['x_test'].shape[1:]} differ in shape")


def load_processed(path: str | Path, num_classes: int | None = None) -> Dataset:
    """Load and validate ``data/processed/{name}.npz``."""
    path = Path(path)
    if not path.is_file():
        if path.is_symlink():  # a link that leads nowhere: "run prepare" would not fix it
            try:
                path.stat()
                why = "is not a regular file"
            except OSError as exc:
                why = "is a symbolic link loop" if exc.errno == errno.ELOOP else \
                    f"is a symbolic link to a missing file ({os.readlink(path)})"
            raise DataError(f"{path}: {why}; remove or fix the link, then run `dpsynth data prepare {path.stem}`")
        from dpsynth.data.registry import DATASETS, unknown_dataset_message  # lazy: only on this error path

        if path.stem not in DATASETS:  # `data prepare <typo>` would only fail again: name the right ones
            raise DataError(f"{path}: processed dataset not found: {unknown_dataset_message(path.stem)}")
        raise DataError(f"{path}: processed dataset not found (run `dpsynth data prepare {path.stem}`)")
    try:
        with np.load(path, allow_pickle=False) as npz:
            missing = [k for k in KEYS if k not in npz.files]
            if missing:
                raise DataError(f"{path}: missing array(s) {missing}")
            arrays = {k: npz[k] for k in KEYS}
            nc = int(npz["num_classes"]) if "num_classes" in npz.files else num_classes
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise DataError(f"{path}: unreadable .npz ({exc})") from None
    if nc is None:
        raise DataError(f"{path}: num_classes is not recorded")
    validate_arrays(path.stem, arrays, nc, str(path))
    return Dataset(name=path.stem, num_classes=nc, **arrays)
