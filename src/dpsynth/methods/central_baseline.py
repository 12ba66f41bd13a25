"""The trivial central-DP baseline of the generative tables: a class-conditional Gaussian released through ONE
Gaussian mechanism (issue 69 item 3).

DP-Sinkhorn (Cao et al., "Don't Generate Me: Training Differentially Private Generative Models with Sinkhorn
Divergence", NeurIPS 2021, arXiv:2111.01177) and GS-WGAN (Chen et al., "GS-WGAN: A Gradient-Sanitized Approach
for Learning Differentially Private Generators", NeurIPS 2020, arXiv:2006.08265) report Table 1 at (10, 1e-5) on
MNIST and Fashion-MNIST. Whether a trained generator beats a closed-form model released at the same budget is
what this baseline answers. Released, per class c, from records z_i = x_i / sqrt(D) projected onto the unit ball
(images in [0, 1]; the projection moves nothing, it is what bounds the sensitivity whatever the data):

- ``second_moment``: the upper triangle of sum_i z_i z_i^T (every class) + noise; its top ``rank`` eigenvectors
  V are the subspace the covariances live in (post-processing);
- ``counts``: the class counts + noise;
- ``sums``: sum_{i in c} z_i + noise, per class;
- ``projected``: the upper triangle of sum_{i in c} (V^T z_i)(V^T z_i)^T + noise, per class (V is a released
  quantity: adaptive composition, and ||V^T z|| <= ||z|| <= 1 whatever V is).

Neighbours replace one record (the record count is public, as for DP-MERF's release, ``GaussianRelease``). The
L2 sensitivities are then ``SENSITIVITY`` (a replaced record leaves one class and joins another, or changes within
one: ||z z^T - z' z'^T||_F <= 2, ||z - z'|| <= 2, two counts move by 1). Query j is noised with std
s_j = Delta_j sigma / sqrt(w_j), sum_j w_j = 1, so sum_j (Delta_j / s_j)^2 = 1 / sigma^2: the four releases together
are ONE Gaussian mechanism of multiplier sigma (Dwork and Roth, FnT-TCS 2014, Thm. A.1 with the vector of every
query scaled by 1 / s_j; Mironov, "Renyi Differential Privacy", CSF 2017, Prop. 7 for the RDP of the
composition), accounted by the project's accountant as the registered ``gaussian_release`` (q = 1, one step) and
calibrated to the table's (epsilon, delta) by ``accounting.calibrate_sigma``.

The noise comes from the run's ``NoiseSource`` (secret: fresh OS entropy; never written anywhere), drawn only
after the release is reserved in the release ledger under its lock with the dataset's total budget checked
(``privacy.ledger_store``); the entry is confirmed with the file's hash once written, marked failed (counted) if
the job fails after the noise, cancelled if before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpsynth.errors import ConfigError, DataError

__all__ = ["ClassGaussian", "SENSITIVITY", "WEIGHTS", "RANK", "query_stds", "release_statistics", "fit",
           "release_baseline", "NAME"]

NAME = "class-conditional Gaussian (Gaussian mechanism)"
#: The covariance's rank: the top directions of the noisy global second moment (MNIST's first 20 principal
#: components hold about 65 % of its variance).
RANK = 20
#: Each query's share of the one mechanism's 1 / sigma^2 (the sums carry the most signal per record).
WEIGHTS = {"second_moment": 0.25, "counts": 0.05, "sums": 0.4, "projected": 0.3}
#: L2 sensitivity of each query when one record is replaced (records in the unit ball).
SENSITIVITY = {"second_moment": 2.0, "counts": math.sqrt(2.0), "sums": 2.0, "projected": 2.0}


def query_stds(sigma: float) -> dict[str, float]:
    """The noise std of each query for the one mechanism's multiplier ``sigma``: Delta_j sigma / sqrt(w_j)."""
    if not (math.isfinite(sigma) and sigma > 0):
        raise ConfigError(f"central baseline: sigma must be finite and > 0, got {sigma!r}")
    return {k: SENSITIVITY[k] * sigma / math.sqrt(WEIGHTS[k]) for k in WEIGHTS}


def _sym_noise(d: int, std: float, rng: np.random.Generator) -> np.ndarray:
    """Noise on the upper triangle (diagonal included), mirrored: the released values are d(d+1)/2 numbers."""
    g = np.triu(rng.normal(0.0, std, (d, d)))
    return g + np.triu(g, 1).T


def _unit_ball(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1.0)


def release_statistics(x01: np.ndarray, y: np.ndarray, num_classes: int, *, sigma: float, rank: int,
                       rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The four noisy queries (module docstring) of images ``x01`` (N, D) in [0, 1] with labels ``y``: the only
    function here that reads records; everything it returns carries its noise."""
    x = np.asarray(x01, dtype=np.float64)
    if x.ndim != 2 or len(x) != len(y) or not np.isfinite(x).all():
        raise DataError(f"central baseline: records must be a finite (N, D) array beside N labels, got {x.shape}")
    d = x.shape[1]
    if not 1 <= rank <= d:
        raise ConfigError(f"central baseline: rank {rank} must be in [1, {d}]")
    z = _unit_ball(x / math.sqrt(d))
    s = query_stds(sigma)
    second = z.T @ z + _sym_noise(d, s["second_moment"], rng)
    basis = np.linalg.eigh(second)[1][:, ::-1][:, :rank]  # post-processing of a released matrix
    counts = np.bincount(y, minlength=num_classes).astype(np.float64) + rng.normal(0.0, s["counts"], num_classes)
    sums = np.stack([z[y == c].sum(axis=0) for c in range(num_classes)]) + rng.normal(0.0, s["sums"],
                                                                                    (num_classes, d))
    proj = z @ basis
    projected = np.stack([proj[y == c].T @ proj[y == c] + _sym_noise(rank, s["projected"], rng)
                          for c in range(num_classes)])
    return {"basis": basis, "counts": counts, "sums": sums, "projected": projected}


@dataclass(frozen=True)
class ClassGaussian:
    """Per class: prior, mean (in z = x / sqrt(D) units) and a covariance factor in the released subspace."""

    priors: np.ndarray  # (C,)
    means: np.ndarray  # (C, D)
    basis: np.ndarray  # (D, r)
    factors: np.ndarray  # (C, r, r)

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``n`` images (n, D) in [0, 1] and their labels, the labels drawn by the released priors."""
        labels = rng.choice(len(self.priors), size=n, p=self.priors)
        return self.sample_labels(labels, rng), labels

    def sample_labels(self, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One image (in [0, 1]) per given label: the evaluation protocol's balanced labels, as a generator is
        sampled (``sampling.balanced_labels``)."""
        e = rng.standard_normal((len(labels), self.basis.shape[1]))
        z = self.means[labels] + np.einsum("nr,nkr->nk", e, self.factors[labels]) @ self.basis.T
        return np.clip(z * math.sqrt(self.means.shape[1]), 0.0, 1.0)


def fit(stats: dict[str, np.ndarray]) -> ClassGaussian:
    """The model from the released statistics alone (post-processing): counts clipped at 1, covariances
    symmetrised with their eigenvalues clipped at 0."""
    counts = np.maximum(stats["counts"], 1.0)
    priors = counts / counts.sum()
    means = stats["sums"] / counts[:, None]
    mu = means @ stats["basis"]
    factors = []
    for c in range(len(counts)):
        cov = stats["projected"][c] / counts[c] - np.outer(mu[c], mu[c])
        vals, vecs = np.linalg.eigh((cov + cov.T) / 2)
        factors.append(vecs * np.sqrt(np.clip(vals, 0.0, None))[None, :])
    return ClassGaussian(priors, means, stats["basis"], np.stack(factors))


def release_baseline(x01: np.ndarray, y: np.ndarray, num_classes: int, *, dataset: str, name: str,
                     epsilon: float, delta: float, out: str | Path, noise: Any, ledger: Any,
                     budgets: dict[str, Any] | None = None, rank: int = RANK) -> tuple[ClassGaussian, dict[str, Any]]:
    """Calibrate sigma to (``epsilon``, ``delta``), reserve the release in ``ledger`` (``ReleaseLedger``; its
    dataset's total budget in ``budgets`` checked under the lock: refused before any noise), draw the noise from
    ``noise`` (``NoiseSource``), write the released statistics to ``out`` (.npz) and the privacy report beside it
    (.json), confirm the release with the file's hash. Returns the fitted model and the report."""
    from dataclasses import replace

    from dpsynth.io import sha256_file, write_json, write_npz
    from dpsynth.privacy import accounting as acc
    from dpsynth.privacy import releases
    from dpsynth.privacy.ledger_store import Reservation, settled
    from dpsynth.privacy.mechanism_base import REPLACE_ONE
    from dpsynth.privacy.report import gaussian_release_report
    from dpsynth.privacy.verify import central_rdp

    out = Path(out)
    sigma = acc.calibrate_sigma(1.0, 1, delta, epsilon)
    rep = gaussian_release_report(sigma=sigma, dataset_size=len(x01), delta=delta, bound=1.0, target_epsilon=epsilon,
                                  extra={"baseline": NAME, "rank": rank, "weights": WEIGHTS, "sensitivity": SENSITIVITY,
                                         "query_stds": query_stds(sigma)})
    report = {**rep.to_dict(), "noise": noise.describe()}
    private = bool(noise.private)
    rdp = central_rdp(report, str(out))
    entry = releases.Release(dataset=dataset, stage="baseline", name=name, mechanism="gaussian_release",
                             epsilon=float(report["epsilon"][report["headline"]]) if private else math.inf,
                             delta=float(delta), neighbours=REPLACE_ONE, output=str(out.resolve()), sha256="",
                             rdp=[float(v) for v in rdp] if rdp is not None and private else None,
                             key=str(out.resolve()), note="" if private else "reproducible noise: not private")
    held = ledger.reserve([Reservation(entry)], budgets or {}, f"baseline {name}")
    drawn = False
    with settled(ledger, held, lambda: drawn):
        rng = noise.numpy_rng(31)
        drawn = True
        stats = release_statistics(x01, y, num_classes, sigma=sigma, rank=rank, rng=rng)
        out.parent.mkdir(parents=True, exist_ok=True)
        write_npz(out, **stats)
        write_json(out.with_suffix(".json"), report)
        ledger.settle(held[0].release, "confirmed", replace(entry, sha256=sha256_file(out)))
    return fit(stats), report
