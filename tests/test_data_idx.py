"""IDX parsing: valid files round-trip; truncated or wrong-magic files fail clearly, write nothing."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from dpsynth.data.download import RawFile
from dpsynth.data.idx import parse_idx
from dpsynth.data.prepare import Sources, prepare
from dpsynth.data.registry import DATASETS, DatasetSpec
from dpsynth.errors import DataError


def idx_bytes(arr: np.ndarray) -> bytes:
    return struct.pack(">HBB", 0, 0x08, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.tobytes()


def test_roundtrip_images_and_labels():
    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 256, (5, 28, 28), dtype=np.uint8)
    labels = np.arange(5, dtype=np.uint8)
    np.testing.assert_array_equal(parse_idx(idx_bytes(imgs)), imgs)
    np.testing.assert_array_equal(parse_idx(idx_bytes(labels), expect_ndim=1), labels)


@pytest.mark.parametrize("mutate, message", [
    (lambda b: b[:-1], "truncated"),
    (lambda b: b + b"\x00", "trailing bytes"),
    (lambda b: b"\x00\x00\x0d" + b[3:], "wrong IDX magic"),  # float type code
    (lambda b: b"\x12\x34" + b[2:], "wrong IDX magic"),
    (lambda b: b[:10], "truncated IDX header"),
    (lambda b: b[:2], "not an IDX file"),
])
def test_corrupt_idx_is_rejected(mutate, message):
    good = idx_bytes(np.zeros((3, 4, 4), np.uint8))
    with pytest.raises(DataError, match=message) as info:
        parse_idx(mutate(good), source="some/file-idx3-ubyte")
    assert "some/file-idx3-ubyte" in str(info.value)


def test_wrong_rank_is_rejected():
    with pytest.raises(DataError, match="3 dimensions, expected 1"):
        parse_idx(idx_bytes(np.zeros((2, 2, 2), np.uint8)), expect_ndim=1)


def _tiny_idx_spec(tmp_path: Path, images: bytes, name: str = "tiny_idx") -> DatasetSpec:
    """A registry entry whose files live in tmp_path, checksummed by their decompressed bytes."""
    import hashlib

    rng = np.random.default_rng(1)
    contents = {
        "train_images": images,
        "train_labels": idx_bytes(rng.integers(0, 10, 6, dtype=np.uint8)),
        "test_images": idx_bytes(rng.integers(0, 256, (2, 28, 28), dtype=np.uint8)),
        "test_labels": idx_bytes(rng.integers(0, 10, 2, dtype=np.uint8)),
    }
    files = {}
    for role, blob in contents.items():
        fname = f"{role}.gz"
        (tmp_path / "src").mkdir(exist_ok=True)
        (tmp_path / "src" / fname).write_bytes(gzip.compress(blob))
        files[role] = RawFile(fname, sha256=hashlib.sha256(blob).hexdigest())
    return DatasetSpec(name=name, kind="idx", description="test", shape=(1, 28, 28), num_classes=10,
                       files=files, system_dirs=(tmp_path / "src",))


def test_truncated_file_leaves_no_output(tmp_path, monkeypatch):
    imgs = np.random.default_rng(0).integers(0, 256, (6, 28, 28), dtype=np.uint8)
    bad = idx_bytes(imgs)[:-100]  # checksummed as-is, so only the parser can catch it
    spec = _tiny_idx_spec(tmp_path, bad)
    monkeypatch.setitem(DATASETS, spec.name, spec)
    root = tmp_path / "data"
    with pytest.raises(DataError, match="truncated"):
        prepare(spec.name, Sources(root=root, mirrors=()))
    assert not list(root.glob("processed/*")), "a failed prepare must not leave outputs"


def test_good_tiny_idx_prepares(tmp_path, monkeypatch):
    imgs = np.random.default_rng(0).integers(0, 256, (6, 28, 28), dtype=np.uint8)
    spec = _tiny_idx_spec(tmp_path, idx_bytes(imgs))
    monkeypatch.setitem(DATASETS, spec.name, spec)
    info = prepare(spec.name, Sources(root=tmp_path / "data", mirrors=()))
    assert info["n_train"] == 6 and info["n_test"] == 2
    with np.load(tmp_path / "data/processed/tiny_idx.npz") as npz:
        np.testing.assert_array_equal(npz["x_train"][:, 0], imgs)
        assert npz["x_train"].dtype == np.uint8 and npz["y_train"].dtype == np.int64
