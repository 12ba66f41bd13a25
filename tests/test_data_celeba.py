"""CelebA preparation from a small generated fixture in the official folder layout."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dpsynth.data.prepare import Sources, prepare
from dpsynth.errors import DataError

ATTRS = ["5_o_Clock_Shadow", "Bald", "Male", "Young"]


def make_celeba(root: Path, n: int = 12) -> dict[str, tuple[int, int, tuple[int, int, int]]]:
    """Official layout with 178x218 JPEGs; each image is a flat colour so downsampling is checkable.

    Returns file -> (partition, male, colour)."""
    (root / "img_align_celeba").mkdir(parents=True)
    (root / "Anno").mkdir()
    (root / "Eval").mkdir()
    truth = {}
    attr_rows, part_rows = [], []
    for i in range(1, n + 1):
        fname = f"{i:06d}.jpg"
        colour = (20 * i % 256, 255 - 15 * i, 128)
        male = i % 3 == 0
        part = [0, 0, 1, 2][i % 4]
        Image.new("RGB", (178, 218), colour).save(root / "img_align_celeba" / fname, quality=100)
        vals = ["-1", "1" if i % 2 else "-1", "1" if male else "-1", "1"]
        attr_rows.append(" ".join([fname, *vals]))
        part_rows.append(f"{fname} {part}")
        truth[fname] = (part, int(male), colour)
    (root / "Anno" / "list_attr_celeba.txt").write_text(f"{n}\n" + " ".join(ATTRS) + "\n" + "\n".join(attr_rows) + "\n")
    (root / "Eval" / "list_eval_partition.txt").write_text("\n".join(part_rows) + "\n")
    return truth


def test_celeba_fixture_prepares_to_32x32_with_gender_labels(tmp_path):
    truth = make_celeba(tmp_path / "celeba")
    info = prepare("celeba", Sources(root=tmp_path / "data", celeba_dir=tmp_path / "celeba"))
    with np.load(tmp_path / "data/processed/celeba.npz") as npz:
        x_tr, y_tr, x_te, y_te = (npz[k] for k in ("x_train", "y_train", "x_test", "y_test"))
    train = sorted(f for f, t in truth.items() if t[0] == 0)
    test = sorted(f for f, t in truth.items() if t[0] == 2)
    assert x_tr.shape == (len(train), 3, 32, 32) and x_te.shape == (len(test), 3, 32, 32)
    assert x_tr.dtype == np.uint8
    np.testing.assert_array_equal(y_tr, [truth[f][1] for f in train])
    np.testing.assert_array_equal(y_te, [truth[f][1] for f in test])
    # flat-colour images stay that colour after crop + area downsampling (JPEG error <= 3 levels)
    for img, f in zip(x_tr, train):
        np.testing.assert_allclose(img.reshape(3, -1).mean(1), truth[f][2], atol=3)
    assert info["n_train"] == len(train) and info["num_classes"] == 2


def test_celeba_missing_names_the_files_to_place(tmp_path):
    with pytest.raises(DataError) as info:
        prepare("celeba", Sources(root=tmp_path / "data", celeba_dir=tmp_path / "nowhere"))
    msg = str(info.value)
    assert "img_align_celeba" in msg and "list_attr_celeba.txt" in msg and "list_eval_partition.txt" in msg
    assert not (tmp_path / "data/processed/celeba.npz").exists()


def test_celeba_missing_image_is_an_error(tmp_path):
    make_celeba(tmp_path / "celeba")
    (tmp_path / "celeba/img_align_celeba/000004.jpg").unlink()
    with pytest.raises(DataError, match="000004.jpg"):
        prepare("celeba", Sources(root=tmp_path / "data", celeba_dir=tmp_path / "celeba"))
    assert not (tmp_path / "data/processed").exists() or not any((tmp_path / "data/processed").iterdir())
