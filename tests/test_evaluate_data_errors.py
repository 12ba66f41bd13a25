"""A data error about one synthetic set names its file (issue 45, fault 9): "y_train contains a single
class" or "w2: x contains NaN or Inf" alone does not say which of five sets (or the real row's data) is bad."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dpsynth.data.dataset import Dataset
from dpsynth.errors import DataError
from dpsynth.evaluate.metrics import classifier_scores, w2_scores


def _real() -> Dataset:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (20, 1, 4, 4), dtype=np.uint8)
    y = np.arange(20) % 2
    return Dataset("tiny", x, y, x, y, 2)


def test_a_single_class_set_is_named_by_its_file() -> None:
    real = _real()
    good = (real.x_train, real.y_train)
    bad = (real.x_train, np.zeros(20, dtype=np.int64))
    with pytest.raises(DataError) as info:
        classifier_scores([good, bad], real, kinds=["logreg"], max_epochs=1, train_subset=None,
                          sources=[Path("syn/seed0.npz"), Path("syn/seed1.npz")])
    assert str(info.value).startswith("syn/seed1.npz: y_train contains a single class"), info.value


def test_a_nan_set_is_named_by_its_file() -> None:
    real = _real()
    x = np.zeros((20, 16))
    x[3, 5] = np.nan
    with pytest.raises(DataError) as info:
        w2_scores([np.zeros((20, 16)), x], real, n=10, sources=["syn/seed0.npz", "syn/seed1.npz"])
    assert str(info.value).startswith("syn/seed1.npz: w2: x contains NaN or Inf"), info.value
