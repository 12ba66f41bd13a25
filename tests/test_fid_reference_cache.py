"""The real test split's FID statistics are computed once per (images, network) and reused by every
evaluate job; anything else (other images, count, weights, a damaged file) is recomputed."""

from __future__ import annotations

import numpy as np

from dpsynth.evaluate.fid import FidStatistics
from dpsynth.evaluate.metrics import _images_to_compute, reference_statistics


class CountingExtractor:
    """Stands in for InceptionFeatures: statistics are the pixel mean/cov of 2 features, counted."""

    def __init__(self, sha: str = "a" * 64, layer: str = "2048") -> None:
        self.weights_sha256, self.feature_layer, self.calls = sha, layer, 0

    def statistics(self, images: np.ndarray, *, keep_features: bool = False) -> FidStatistics:
        self.calls += 1
        f = images.reshape(len(images), -1)[:, :2].astype(np.float64)
        return FidStatistics(f.mean(0), np.cov(f, rowvar=False), len(images), self.weights_sha256, self.feature_layer,
                             f.astype(np.float32) if keep_features else None)


def images(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(n, 1, 4, 4), dtype=np.uint8)


def test_computed_once_and_reused(tmp_path):
    ex = CountingExtractor()
    a = reference_statistics(ex, images(20), tmp_path)
    b = reference_statistics(ex, images(20), tmp_path)
    assert ex.calls == 1 and len(list(tmp_path.glob("*.npz"))) == 1
    assert np.array_equal(a.mu, b.mu) and np.array_equal(a.sigma, b.sigma) and b.n == 20
    assert b.features is not None and np.array_equal(a.features, b.features)  # KID's reference side


def test_a_cache_file_from_before_kid_is_recomputed_with_features(tmp_path):
    ex = CountingExtractor()
    st = reference_statistics(ex, images(20), tmp_path)
    (path,) = tmp_path.glob("*.npz")
    FidStatistics(st.mu, st.sigma, st.n, st.weights_sha256, st.feature_layer).save(path)  # no features
    again = reference_statistics(ex, images(20), tmp_path)
    assert ex.calls == 2 and again.features is not None and FidStatistics.load(path).features.shape == (20, 2)


def test_other_images_count_or_weights_are_not_served_stale(tmp_path):
    ex = CountingExtractor()
    reference_statistics(ex, images(20), tmp_path)
    reference_statistics(ex, images(20, seed=1), tmp_path)   # same count, other pixels
    reference_statistics(ex, images(10), tmp_path)           # another count
    other = CountingExtractor(sha="b" * 64)
    st = reference_statistics(other, images(20), tmp_path)   # another network
    assert ex.calls == 3 and other.calls == 1 and st.weights_sha256 == "b" * 64
    assert len(list(tmp_path.glob("*.npz"))) == 4


def test_damaged_cache_file_is_recomputed_and_replaced(tmp_path):
    ex = CountingExtractor()
    good = reference_statistics(ex, images(20), tmp_path)
    (path,) = tmp_path.glob("*.npz")
    path.write_bytes(path.read_bytes()[:40])  # truncated
    again = reference_statistics(ex, images(20), tmp_path)
    assert ex.calls == 2 and np.array_equal(good.mu, again.mu)
    assert FidStatistics.load(path).n == 20  # the replacement is readable


def test_no_cache_dir_computes_every_time(tmp_path):
    ex = CountingExtractor()
    reference_statistics(ex, images(20), None)
    reference_statistics(ex, images(20), None)
    assert ex.calls == 2


def test_the_progress_total_counts_only_images_not_cached_once_each(tmp_path):
    """The FID progress line's total is fixed before it starts (issue 46: it began at /400, then
    counted /200 once the reference came from the cache)."""
    ex = CountingExtractor()
    ref, other = images(20), images(30, seed=1)
    assert _images_to_compute(ex, [ref, other, ref], tmp_path) == 50  # the repeated set is computed once
    reference_statistics(ex, ref, tmp_path)
    assert _images_to_compute(ex, [ref, other], tmp_path) == 30 and ex.calls == 1
    assert _images_to_compute(ex, [ref, other], None) == 50
