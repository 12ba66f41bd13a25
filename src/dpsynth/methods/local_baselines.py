"""Trivial generators fitted to locally privatized records: what a trained generator must beat.

Reshetova, Chen, Ozgur ("Training generative models from privatized data via entropic optimal transport",
IEEE JSAIT 2024 / ISIT 2024, arXiv:2306.09547) train a generator on locally privatized records and score it
by the W2 to the clean data. Whether the generator learnt anything a trivial method would not is a question the
paper's figures cannot answer; these baselines answer it on the same records and the same estimator (issue 69
item 3):

- **k-means codebook** (k = 10 and k = 100): Lloyd's k-means (scikit-learn's ``KMeans``) on the privatized
  records, sampled by cluster frequency -- each sample a cluster centre, drawn with the share of records the
  cluster holds. A centre averages hundreds of noisy records, so the noise mostly cancels and what is left is
  an average of clean digits: exactly what the W2 to clean records rewards (blur scores below real images;
  ``evaluate.w2_references``).
- **Gaussian fit, noise removed**: the privatized records' mean and covariance with the known noise covariance
  (``LocalNoise.coordinate_std``^2 times the identity: the noise is i.i.d. per coordinate, and its scale
  follows from the public epsilon, delta and radius) subtracted, the eigenvalues clipped at 0 -- the
  moment estimator of the clean records' Gaussian fit (the projection onto the ball is part of the clean
  distribution here, as it is for the generators). KID can reward such a blob; precision and recall flag it.

Privacy. Every baseline is a function of the privatized records and public constants (the noise scale, k,
a seed) alone: post-processing of locally private records, so private at the records' own (epsilon, delta)
(Dwork and Roth, "The Algorithmic Foundations of Differential Privacy", FnT-TCS 2014, Prop. 2.1). No accountant
is involved and no release is made beyond the privatization's. :func:`read_privatized` reads the privatize
stage's output files only -- the clean records' file is never opened (``tests/test_local_baselines.py``
removes it before building them). The seeds here drive k-means' initialisation and the sampling, never noise
that protects anyone, so they may be fixed and recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from dpsynth.errors import ConfigError, DataError

__all__ = ["Baseline", "Codebook", "DenoisedGaussian", "PrivatizedRecords", "fit_codebook",
           "fit_denoised_gaussian", "fit_local_baselines", "read_privatized", "codebook_name", "GAUSSIAN",
           "CODEBOOK_KS"]

#: The codebook sizes the issue asks for: 10 (one per MNIST class, if k-means found them) and 100.
CODEBOOK_KS = (10, 100)
GAUSSIAN = "baseline: Gaussian fit, noise removed"
#: Lloyd iterations per fit: on 60,000 MNIST records k-means stops well before (tolerance 1e-4).
MAX_ITER = 100


def codebook_name(k: int) -> str:
    return f"baseline: k-means codebook, k = {k}"


class Baseline(Protocol):
    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` records (n, D) drawn from the fitted model."""
        ...


def _clip(x: np.ndarray, domain: tuple[float, float] | None) -> np.ndarray:
    return x if domain is None else np.clip(x, domain[0], domain[1])


@dataclass(frozen=True)
class Codebook:
    """k centres and the share of the privatized records each holds; a sample is a centre drawn by its share."""

    centres: np.ndarray  # (k, D)
    weights: np.ndarray  # (k,), sums to 1

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.centres[rng.choice(len(self.centres), size=n, p=self.weights)]


@dataclass(frozen=True)
class DenoisedGaussian:
    """N(mean, factor factor^T): ``factor`` the eigenvectors of the denoised covariance scaled by the square roots
    of its clipped eigenvalues (rank = the count of positive ones). ``domain``: the records' range, samples
    clipped to it (public: images live in [-1, 1])."""

    mean: np.ndarray  # (D,)
    factor: np.ndarray  # (D, r)
    domain: tuple[float, float] | None = None

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        z = rng.standard_normal((n, self.factor.shape[1]))
        return _clip(self.mean[None, :] + z @ self.factor.T, self.domain)


def _records(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2:
        raise DataError(f"local baselines: privatized records must be an (N >= 2, D) array, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise DataError("local baselines: privatized records contain NaN or Inf")
    return x


def fit_codebook(privatized: np.ndarray, k: int, *, seed: int) -> Codebook:
    """Lloyd's k-means (k-means++ initialisation, one start, ``MAX_ITER`` iterations at most) on the privatized
    records; the weights are the clusters' shares of the records."""
    from sklearn.cluster import KMeans

    x = _records(privatized)
    if not 1 <= k <= len(x):
        raise ConfigError(f"local baselines: a codebook of k = {k} needs 1 <= k <= {len(x)} records")
    # float32: half the time of float64 on 60,000 x 784 records; the centres are averages of hundreds of records
    km = KMeans(n_clusters=k, n_init=1, max_iter=MAX_ITER, random_state=seed).fit(x.astype(np.float32))
    counts = np.bincount(km.labels_, minlength=k).astype(np.float64)
    return Codebook(np.asarray(km.cluster_centers_, dtype=np.float64), counts / counts.sum())


def fit_denoised_gaussian(privatized: np.ndarray, noise_var: float, *,
                          domain: tuple[float, float] | None = None) -> DenoisedGaussian:
    """Mean and covariance of the privatized records, ``noise_var`` * I removed, eigenvalues clipped at 0.

    The privatized records are x + e with e independent of x, E e = 0, Cov e = noise_var I, so the sample mean
    estimates E x and the sample covariance minus noise_var I estimates Cov x; a finite sample makes some of its
    eigenvalues negative, which are set to 0 (the nearest positive semi-definite matrix in Frobenius norm)."""
    x = _records(privatized)
    if not (np.isfinite(noise_var) and noise_var >= 0):
        raise ConfigError(f"local baselines: the noise variance must be finite and >= 0, got {noise_var!r}")
    mean = x.mean(axis=0)
    cov = np.cov(x, rowvar=False, ddof=1).reshape(x.shape[1], x.shape[1])
    vals, vecs = np.linalg.eigh(cov - noise_var * np.eye(x.shape[1]))
    keep = vals > 0
    return DenoisedGaussian(mean, vecs[:, keep] * np.sqrt(vals[keep])[None, :], domain)


def fit_local_baselines(privatized: np.ndarray, noise_var: float, *, seed: int, ks: tuple[int, ...] = CODEBOOK_KS,
                        domain: tuple[float, float] | None = None) -> dict[str, Baseline]:
    """Every baseline, by the name a table prints (``codebook_name(k)`` per k, then ``GAUSSIAN``)."""
    out: dict[str, Baseline] = {codebook_name(k): fit_codebook(privatized, k, seed=seed) for k in ks}
    out[GAUSSIAN] = fit_denoised_gaussian(privatized, noise_var, domain=domain)
    return out


@dataclass(frozen=True)
class PrivatizedRecords:
    """The privatize stage's records (record space: images in [-1, 1] flattened, or points) with what the
    baselines need from its report: the noise variance per coordinate and the privacy it was released at."""

    records: np.ndarray
    noise_var: float
    epsilon: float
    delta: float
    mechanism: str
    private: bool  # False: reproducible noise, no guarantee
    record_shape: tuple[int, ...]

    @property
    def privacy(self) -> str:
        """The privacy cell of a baseline built from these records."""
        if not self.private:
            return "none (reproducible noise - not private)"
        delta = f", δ = {self.delta:g}" if self.delta else ""
        return f"ε = {self.epsilon:g}{delta} (local {self.mechanism}: post-processing of the privatized records)"

    @property
    def domain(self) -> tuple[float, float] | None:
        """The public range samples are clipped to: [-1, 1] for image records in pixels, none otherwise."""
        return (-1.0, 1.0) if len(self.record_shape) >= 2 else None


def read_privatized(npz_path: str | Path) -> PrivatizedRecords:
    """The privatize stage's ``{experiment}.npz`` and the report beside it (``.json``), and nothing else: the
    report's epsilons are recomputed from its mechanism (``privacy.verify``'s rule: a report that disagrees is
    refused) and the noise variance is what the mechanism says its noise scale gives per coordinate.
    Records in the DCT domain (``local.dct``) are refused: their noise is on coefficients, not pixels."""
    from dpsynth.data.dataset import load_processed
    from dpsynth.io import read_json
    from dpsynth.privacy import mechanisms

    npz = Path(npz_path)
    js = npz.with_suffix(".json")
    report = read_json(js)
    if not isinstance(report, dict) or "noise_scale" not in report or "mechanism" not in report:
        raise DataError(f"{js}: not a privatize stage's report (no mechanism or noise_scale)")
    if report.get("dct"):
        raise DataError(f"{js}: records in the DCT domain; the local baselines fit records in pixels")
    mech = mechanisms.local(str(report["mechanism"]))
    radius, scale, delta = float(report["radius"]), float(report["noise_scale"]), float(report.get("delta") or 0.0)
    want = mech.epsilons(radius, scale, delta)["sound"]
    if not np.isclose(float(report["epsilon"]), want, rtol=1e-9):
        raise DataError(f"{js}: epsilon {report['epsilon']!r} is not what its mechanism gives ({want:.6g}); "
                        "refusing it")
    data = load_processed(npz)
    std = mech.coordinate_std(scale)
    return PrivatizedRecords(_records(data.x_train), std * std, float(report["epsilon"]), delta,
                             str(report["mechanism"]), bool((report.get("noise") or {}).get("private", False)),
                             tuple(int(v) for v in report.get("record_shape") or (data.x_train.shape[1],)))
