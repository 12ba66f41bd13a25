"""Fidelity measures that stay honest at small sample counts, beside FID (``fid``).

FID is biased upward by roughly (const / N): at the quick scale's 200 vs 200 images real MNIST
reads 35.4 (31.7 at 250 vs 250) against the papers' 1.6 at 60,000 vs 10,000. Two remedies, both computed on the same
2048-d Inception features FID uses (one Inception pass per image set):

- **KID**: Binkowski, Sutherland, Arbel and Gretton, "Demystifying MMD GANs", ICLR 2018
  (arXiv:1801.01401). The unbiased estimate of MMD^2 with the cubic polynomial kernel
  k(x, y) = (x.y / d + 1)^3, averaged over random subsets; unbiased at any N, so its value does
  not drift with the sample count (its variance does). Computed by torch-fidelity
  (``kid_features_to_metric``), whose defaults are the paper's (100 subsets of 1,000); the
  subset size here is min(1000, n_a, n_b), since torch-fidelity needs it <= both counts.
- **FID-infinity**: Chong and Forsyth, "Effectively Unbiased FID and Inception Score and where
  to find them", CVPR 2020 (arXiv:1911.07023). FID_N is close to linear in 1/N (they fit
  N = 5,000 to 50,000), so FID is evaluated on random subsets of the generated features at
  several N against fixed reference statistics, FID_N = a + b/N is fitted by least squares, and
  a (N -> infinity) is reported. It removes the generated side's bias only: the reference's own
  finite-sample bias stays, which is why the reference should be large (the paper keeps it at
  full size). Below N = 2048 (the feature dimension, the quick scale's regime) FID_N still
  curves in 1/N and the extrapolation stays well above the large-N FID (measured numbers:
  ``metrics.small_n_scores``).

Beside them, on the same features, **precision and recall**: Kynkäänniemi, Karras, Laine, Lehtinen and
Aila, "Improved Precision and Recall Metric for Assessing Generative Models", NeurIPS 2019
(arXiv:1904.06991). Each set's manifold is the union of balls around its features, each of radius the
distance to its k-th nearest neighbour in the same set (k = 3, as they recommend); precision is the
fraction of generated features inside the real manifold, recall the fraction of real features inside
the generated one. Unlike FID, KID and FID-infinity they separate the two failures a generator can
have: images unlike any real one (low precision) and real images it never makes (low recall, e.g. a
dropped class).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpsynth.errors import DataError

#: torch-fidelity's (and Binkowski et al.'s) defaults: 100 subsets of at most 1,000 features.
KID_SUBSETS = 100
KID_MAX_SUBSET_SIZE = 1000
KID_KERNEL = "polynomial (x.y / d + 1)^3"
#: Chong and Forsyth evaluate FID_N at 15 values of N (their code: np.linspace(5000, 50000, 15)).
FID_INF_POINTS = 15
#: Kynkäänniemi et al.'s neighbourhood size: the radius of each ball is the distance to the 3rd nearest neighbour.
PRC_K = 3
#: Rows of distances held at once: a 1,000 x n float32 block (40 MB at n = 10,000, 80 MB at CelebA's 19,962),
#: so the paper scale's 10,000 x 10,000 never sits in memory whole (torch-fidelity's default, 10,000 rows, would
#: hold 400 MB blocks); the numbers do not depend on it.
PRC_BATCH_SIZE = 1000


def kid(features_a: Any, features_b: Any, *, seed: int, subsets: int = KID_SUBSETS,
        max_subset_size: int = KID_MAX_SUBSET_SIZE) -> dict[str, Any]:
    """KID between two (N, d) feature sets through torch-fidelity: {"kid", "subset_std", "subset_size",
    "subsets", "seed", "kernel"}. ``subset_std`` is the spread over subsets; when the subset size
    equals both counts every subset is the whole of both sets (the MMD estimate is invariant to
    order), so one is computed (``subsets`` says 1) and the spread is 0."""
    import torch
    from torch_fidelity.metric_kid import KEY_METRIC_KID_MEAN, KEY_METRIC_KID_STD, kid_features_to_metric

    a, b = (torch.as_tensor(np.asarray(f, np.float32)) for f in (features_a, features_b))
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise DataError(f"KID needs two (N, d) feature arrays of the same d, got {tuple(a.shape)} and {tuple(b.shape)}")
    size = min(max_subset_size, len(a), len(b))
    if size < 2:
        raise DataError(f"KID needs at least 2 features per set, got {len(a)} and {len(b)}")
    if size == len(a) == len(b):
        subsets = 1  # every subset would be the whole of both sets, so every draw gives this one number
    out = kid_features_to_metric(a, b, kid_subsets=subsets, kid_subset_size=size, rng_seed=seed, verbose=False)
    return {"kid": float(out[KEY_METRIC_KID_MEAN]), "subset_std": float(out[KEY_METRIC_KID_STD]),
            "subset_size": size, "subsets": subsets, "seed": seed, "kernel": KID_KERNEL}


def fid_inf_sizes(n: int, points: int = FID_INF_POINTS) -> list[int]:
    """The subset sizes FID_N is evaluated at: ``points`` values evenly spaced in N from n // 5 to n
    (rounded, duplicates dropped; at least 2, a covariance's minimum). The paper's code spaces them
    evenly in N too, from 5,000 to its 50,000; n // 5 keeps a span of that kind at every n.

    Two alternatives were measured and not taken. Spacing evenly in 1/N (the fit's abscissa) puts
    most points at the smallest N, where FID_N still curves in 1/N because N < 2048 (the feature
    dimension): on real MNIST at n = 250 it extrapolated 26.3 instead of 25.2 (mean of 5 seeds).
    A fixed N_min = 50 at every n would, at the paper scale's n = 60,000, put one rank-49 point 100x
    further out in 1/N than the others, and that point would set the slope alone."""
    n_min = max(2, n // 5)
    sizes = sorted({int(round(v)) for v in np.linspace(n_min, n, points)})
    if len(sizes) < 3:
        raise DataError(f"FID-infinity needs at least 4 images per set (3 subset sizes to fit), got {n}")
    return sizes


def reference_factor(sigma: np.ndarray, features: Any | None = None) -> np.ndarray:
    """A factor of the reference covariance for ``fid.frechet_distance``: its features' factor when
    there are fewer than d of them (the cheap path), else ``fid.psd_sqrt`` (d x d)."""
    from dpsynth.evaluate.fid import covariance_factor, psd_sqrt

    if features is not None and len(features) < np.shape(sigma)[0]:
        return covariance_factor(features)
    return psd_sqrt(sigma)


def fid_infinity(features: Any, mu_ref: np.ndarray, sigma_ref: np.ndarray, *, seed: int,
                 points: int = FID_INF_POINTS, factor_ref: np.ndarray | None = None) -> dict[str, Any]:
    """FID-infinity of one (n, d) generated feature set against fixed reference statistics.

    For each N of ``fid_inf_sizes(n)``, FID_N is the Fréchet distance (``fid.frechet_distance``)
    of a random N-subset (drawn without replacement from ``numpy.random.default_rng(seed)``, a
    fresh draw per N, as the paper's code shuffles before each) to the reference; then
    FID_N = a + b/N by least squares. Returns {"fid_inf": a, "slope": b, "n_values", "fid_values",
    "fit_residual_rms", "seed"}. ``factor_ref`` (``reference_factor``) saves recomputing it when
    several sets share a reference."""
    from dpsynth.evaluate.fid import covariance_factor, frechet_distance

    x = np.asarray(features, np.float64)
    d = np.asarray(mu_ref).size
    if x.ndim != 2 or x.shape[1] != d:
        raise DataError(f"FID-infinity: features of shape {x.shape} do not match reference statistics of dimension {d}")
    sizes = fid_inf_sizes(len(x), points)
    factor_ref = reference_factor(sigma_ref) if factor_ref is None else factor_ref
    rng = np.random.default_rng(seed)
    fids = []
    for n in sizes:
        sub = x[rng.choice(len(x), n, replace=False)]
        f = covariance_factor(sub)
        fids.append(frechet_distance(mu_ref, sigma_ref, sub.mean(0), f @ f.T, factor1=factor_ref,
                                     factor2=f if n < d else None))
    design = np.stack([np.ones(len(sizes)), 1.0 / np.asarray(sizes, np.float64)], axis=1)
    (a, b), *_ = np.linalg.lstsq(design, np.asarray(fids), rcond=None)
    resid = np.asarray(fids) - design @ np.array([a, b])
    return {"fid_inf": float(a), "slope": float(b), "n_values": sizes, "fid_values": [float(v) for v in fids],
            "fit_residual_rms": float(np.sqrt(np.mean(resid ** 2))), "seed": seed}


def precision_recall(generated: Any, real: Any, *, k: int = PRC_K, batch_size: int = PRC_BATCH_SIZE) -> dict[str, Any]:
    """Kynkäänniemi et al.'s precision and recall of a generated (N, d) feature set against a real one,
    through torch-fidelity (``prc_features_to_metric``): {"precision", "recall", "k", "n_generated",
    "n_reference", "implementation"}.

    torch-fidelity's function is the paper's definition: the k-th nearest neighbour of a feature within
    its own set is the (k + 1)-th smallest of its distances to that set (the 0 to itself is the first,
    as in the authors' code), a feature is inside a manifold when its distance to some member is <= that
    member's radius, precision counts generated features inside the real manifold and recall real features
    inside the generated one (tests/test_precision_recall.py checks it against the definition written out).
    Its chunked path (``save_cpu_ram``) holds ``batch_size`` rows of distances at a time.

    The paper takes equal counts from both distributions: a larger set's k-NN radii are smaller, so unequal
    counts would tilt one number against the other. Both sets are cut to their first n = min(N_g, N_r)
    features (the sets are exchangeable, so the first n are as good as a random n, and no draw needs a seed).
    A set smaller than k + 1 has no k-th neighbour: a ``DataError``, never a number."""
    import torch
    import torch_fidelity
    from torch_fidelity.metric_prc import KEY_METRIC_PRECISION, KEY_METRIC_RECALL, prc_features_to_metric

    g, r = (torch.as_tensor(np.asarray(f, np.float32)) for f in (generated, real))
    if g.dim() != 2 or r.dim() != 2 or g.shape[1] != r.shape[1]:
        raise DataError(f"precision and recall need two (N, d) feature arrays of the same d, "
                        f"got {tuple(g.shape)} and {tuple(r.shape)}")
    n = min(len(g), len(r))
    if n < k + 1:
        raise DataError(f"precision and recall need at least k + 1 = {k + 1} features per set (each one's k = {k} "
                        f"nearest neighbours in its own set), got {len(g)} generated and {len(r)} real")
    out = prc_features_to_metric(g[:n].contiguous(), r[:n].contiguous(), prc_neighborhood=k,
                                 prc_batch_size=batch_size, save_cpu_ram=True, verbose=False)
    # torch-fidelity averages float32 indicators: back to the exact fraction (a count over n) it stands for
    return {"precision": round(float(out[KEY_METRIC_PRECISION]) * n) / n,
            "recall": round(float(out[KEY_METRIC_RECALL]) * n) / n, "k": k,
            "n_generated": n, "n_reference": n,
            "implementation": f"torch-fidelity {torch_fidelity.__version__} prc_features_to_metric "
                              f"(Euclidean, float32, {batch_size}-row blocks)"}
