"""Precision and recall (Kynkäänniemi, Karras, Laine, Lehtinen and Aila, "Improved Precision and Recall
Metric for Assessing Generative Models", NeurIPS 2019, arXiv:1904.06991) through
``dpsynth.evaluate.fidelity.precision_recall``: on features whose answer is known (identical sets,
disjoint sets, a generator that covers half the modes of a mixture), against the paper's definition
written out here, and as the evaluate stage records them beside KID and FID-infinity. Nothing of the
math is mocked."""

from __future__ import annotations

import numpy as np
import pytest

from dpsynth.errors import DataError
from dpsynth.evaluate.fid import FidStatistics
from dpsynth.evaluate.fidelity import PRC_K, precision_recall
from dpsynth.evaluate.metrics import small_n_scores

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def gauss(n: int, d: int, seed: int, shift: float = 0.0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, d)) + shift


def mixture(modes: range, per: int, rng: np.random.Generator, d: int = 32, sep: float = 50.0) -> np.ndarray:
    """``per`` points of each mode: a 2-D standard normal blob (coordinates 0, 1) moved ``sep`` along its own
    axis (coordinate 2 + mode), so two modes' blobs are ~70 apart while a blob's own points are ~1 apart."""
    x = np.zeros((len(modes) * per, d))
    for i, m in enumerate(modes):
        x[i * per:(i + 1) * per, :2] = rng.normal(size=(per, 2))
        x[i * per:(i + 1) * per, 2 + m] = sep
    return x


def by_definition(gen: np.ndarray, real: np.ndarray, k: int) -> tuple[float, float]:
    """The paper's Eq. (1)-(2) in float64: f(x, S) = 1 when ||x - s|| <= ||s - NN_k(s)|| for some s in S,
    NN_k(s) the k-th nearest other member of S; precision = mean f(gen, real), recall = mean f(real, gen)."""
    def dist(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.sqrt(((a[:, None, :] - b[None, :, :]) ** 2).sum(-1))

    def radii(s: np.ndarray) -> np.ndarray:
        d = dist(s, s)
        np.fill_diagonal(d, np.inf)  # "other member": itself excluded
        return np.sort(d, axis=1)[:, k - 1]

    def inside(x: np.ndarray, s: np.ndarray) -> float:
        return float((dist(x, s) <= radii(s)[None, :]).any(axis=1).mean())

    return inside(gen, real), inside(real, gen)


def test_identical_sets_score_one_and_far_apart_sets_zero() -> None:
    """Exact answers: every feature lies in its own ball (distance 0), and a set moved 1,000 away (radii
    here are ~10) lies in none."""
    x = gauss(300, 64, 0)
    same = precision_recall(x, x)
    assert same["precision"] == same["recall"] == 1.0
    far = precision_recall(x, x + 1000.0)
    assert far["precision"] == far["recall"] == 0.0
    assert same["k"] == PRC_K == 3 and same["n_generated"] == same["n_reference"] == 300
    assert same["implementation"].startswith("torch-fidelity ")


def test_a_generator_of_half_the_modes_is_precise_and_recalls_half() -> None:
    """Ten modes, 100 real points each; the generator makes 200 points of each of modes 0-4 only. Ideal:
    precision 1, recall 0.5. A k-NN manifold of a finite sample misses the tails of fresh points from the
    same blob, so both read a little lower: over 50 seeds precision 0.966 +- 0.010 (min 0.942) and recall
    0.487 +- 0.005 (min 0.471), while a generator of all ten modes reads 0.966 / 0.964. Tolerances:
    precision >= 0.92 (over 4 sd below its mean), recall in [0.45, 0.5] -- 0.5 is a hard ceiling, since the
    missed modes' real points are ~70 from any generated ball of radius ~1 -- and the all-mode generator's
    recall >= 0.92, so the missing half is what halves it."""
    for seed in range(3):
        rng = np.random.default_rng(seed)
        real = mixture(range(10), 100, rng)
        half = precision_recall(mixture(range(5), 200, rng), real)
        assert half["precision"] >= 0.92 and 0.45 <= half["recall"] <= 0.5, (seed, half)
        full = precision_recall(mixture(range(10), 100, rng), real)
        assert full["recall"] >= 0.92 and full["precision"] >= 0.92, (seed, full)


def test_torch_fidelity_computes_the_papers_definition_on_equal_counts() -> None:
    """Against ``by_definition`` (float64, every distance) on random sets: the same fractions (the inputs
    are continuous, so no distance sits within float32 round-off of a radius here). Unequal sets are cut to
    their first min(N_g, N_r) features, as the paper takes equal counts; the block size changes nothing."""
    gen, real = gauss(90, 8, 1, shift=0.4), gauss(60, 8, 2)
    got = precision_recall(gen, real)
    assert got["n_generated"] == got["n_reference"] == 60
    want = by_definition(gen[:60], real, PRC_K)
    assert (got["precision"], got["recall"]) == pytest.approx(want, abs=1e-12)
    assert 0.0 < want[0] < 1.0 and 0.0 < want[1] < 1.0  # a case where the counting matters
    assert precision_recall(gen, real, batch_size=7) == {**got, "implementation": got["implementation"].replace(
        "1000-row", "7-row")}
    k1 = precision_recall(gen, real, k=1)  # smaller balls: neither number can grow
    assert k1["precision"] <= got["precision"] and k1["recall"] <= got["recall"]
    assert (k1["precision"], k1["recall"]) == pytest.approx(by_definition(gen[:60], real, 1), abs=1e-12)


def test_a_set_too_small_for_k_neighbours_is_refused_not_scored() -> None:
    with pytest.raises(DataError, match=r"at least k \+ 1 = 4 features per set .* got 3 generated and 40 real"):
        precision_recall(gauss(3, 8, 0), gauss(40, 8, 1))
    assert precision_recall(gauss(4, 8, 0), gauss(40, 8, 1))["n_generated"] == 4  # k + 1 is enough
    with pytest.raises(DataError, match="same d"):
        precision_recall(gauss(10, 8, 0), gauss(10, 9, 1))


def test_small_n_scores_record_precision_and_recall_beside_kid() -> None:
    """The evaluate stage's block inside ``fid``: per-set values, k, the equal counts and the
    implementation; a set too small says "unavailable" with the reason, while KID (2 features suffice)
    is still a number."""
    d = 16
    feats = gauss(40, d, 0)
    ref = FidStatistics(feats.mean(0), np.cov(feats, rowvar=False), 40, "w", "2048", feats.astype(np.float32))
    out = small_n_scores([gauss(30, d, 1), gauss(30, d, 2, shift=5.0)], ref, seed=0)
    for key in ("precision", "recall"):
        rec = out[key]
        assert rec["available"] and rec["n"] == 2 and rec["values"][0] > rec["values"][1] == 0.0, rec
        assert rec["k"] == 3 and rec["n_generated"] == rec["n_reference"] == 30 and rec["reference_split"] == "test"
        assert rec["mean"] == pytest.approx(np.mean(rec["values"])) and "torch-fidelity" in rec["implementation"]
    first = precision_recall(gauss(30, d, 1), feats)
    assert out["precision"]["values"][0] == first["precision"] and out["recall"]["values"][0] == first["recall"]
    tiny = small_n_scores([gauss(3, d, 1)], ref, seed=0)
    assert tiny["kid"]["available"]
    for key in ("precision", "recall"):
        assert tiny[key]["available"] is False and "mean" not in tiny[key]
        assert tiny[key]["reason"].startswith("precision and recall need at least k + 1 = 4 features per set")
