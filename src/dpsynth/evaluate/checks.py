"""Input checks shared by the classifiers and FID: fail loudly, name the bad array.

Checks come in two halves on purpose. ``check_images_meta`` / ``check_labels_meta`` look
only at shape and dtype (no element is read), so the evaluation code can reject a bad
*test* split up front without reading its contents before model selection is over; the
value checks (label range, NaN) run on the test split only when it is finally scored.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpsynth.errors import DataError


def _shape_dtype(name: str, a: Any) -> tuple[tuple[int, ...], np.dtype]:
    shape = getattr(a, "shape", None)
    dtype = getattr(a, "dtype", None)
    if shape is None or dtype is None:
        raise DataError(f"{name} must be a numpy array, got {type(a).__name__}")
    return tuple(int(s) for s in shape), np.dtype(dtype)


def check_images_meta(name: str, x: Any) -> tuple[int, int, int, int]:
    """Reject anything that is not a non-empty uint8 (N, C, H, W) array; return its shape.

    Float images are refused rather than rescaled: a float array could be in [0, 1],
    [-1, 1] or [0, 255], and guessing wrong silently ruins every metric downstream.
    """
    shape, dtype = _shape_dtype(name, x)
    if len(shape) != 4:
        raise DataError(f"{name} must have shape (N, C, H, W), got ndim={len(shape)} shape={shape}")
    n, c, h, w = shape
    if n == 0:
        raise DataError(f"{name} is empty (shape {shape})")
    if c not in (1, 3):
        raise DataError(f"{name} must have 1 (grayscale) or 3 (RGB) channels in axis 1, got shape {shape}")
    if h == 0 or w == 0:
        raise DataError(f"{name} has an empty spatial size (shape {shape})")
    if dtype != np.uint8:
        hint = ""
        if dtype.kind == "f":
            hint = " (float input; convert to uint8 0..255 first"
            hint += ", and it contains NaN)" if bool(np.isnan(np.asarray(x)).any()) else ")"
        raise DataError(f"{name} must be uint8 images, got dtype {dtype}{hint}")
    return n, c, h, w


def check_labels_meta(name: str, y: Any, n: int) -> None:
    """Reject labels that are not a 1-D integer array of length ``n`` (no element read)."""
    shape, dtype = _shape_dtype(name, y)
    if len(shape) != 1:
        raise DataError(f"{name} must be 1-D, got shape {shape}")
    if shape[0] != n:
        raise DataError(f"{name} has {shape[0]} labels but the images have {n}; lengths must match")
    if dtype.kind not in "iu":
        raise DataError(f"{name} must be an integer array, got dtype {dtype}")


def check_labels_values(name: str, y: np.ndarray, num_classes: int) -> None:
    """Labels must lie in [0, num_classes): an out-of-range label would crash or be miscounted."""
    if y.size == 0:
        raise DataError(f"{name} is empty")
    lo, hi = int(y.min()), int(y.max())
    if lo < 0 or hi >= num_classes:
        raise DataError(f"{name} has labels in [{lo}, {hi}], outside [0, num_classes={num_classes})")
