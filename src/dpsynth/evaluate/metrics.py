"""One evaluation protocol for every generator (docs/architecture.md, evaluation): classifiers trained on each
synthetic set and scored on the real test split, FID against the real test split, and the
privacy guarantee, gathered into ``results/runs/{experiment}/metrics.json``.

The real test split is only ever passed to the final scoring calls (``train_and_score``
fits on training data first; see ``classifiers``); nothing is selected on it.
"""

from __future__ import annotations

import hashlib
import platform
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dpsynth import __version__
from dpsynth.data.dataset import Dataset, images_to_signed, subset_indices
from dpsynth.errors import ConfigError, DataError
from dpsynth.evaluate.classifiers import max_batches, train_and_score
from dpsynth.evaluate.record import mean_std
from dpsynth.evaluate.sampling import load_synthetic
from dpsynth.progress import Progress

if TYPE_CHECKING:
    from dpsynth.evaluate.gswgan_protocol import GsWganSettings


@contextmanager
def _naming(source: str | Path | None) -> Iterator[None]:
    """A ``DataError`` about one set's records ("y_train contains a single class", "w2: x contains NaN or
    Inf") names the file those records came from: without it the user cannot tell which set is bad."""
    try:
        yield
    except DataError as exc:
        if source is None or str(exc).startswith(str(source)):
            raise
        raise DataError(f"{source}: {exc}") from None


def _subset(x: np.ndarray, y: np.ndarray, n: int | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    idx = subset_indices(len(x), n, seed)
    return (x, y) if idx is None else (x[idx], y[idx])


def classifier_scores(train_sets: list[tuple[np.ndarray, np.ndarray]], real: Dataset, *, kinds: list[str],
                      max_epochs: int, train_subset: int | None, seed: int = 0,
                      on_fitted: Callable[[Any], None] | None = None,
                      sources: list[str | Path] | None = None, test_subset: int | None = None,
                      device: str = "cpu", show_scores: bool = True) -> dict[str, Any]:
    """Accuracy on the real test split of each classifier kind, mean/std over the training sets.
    ``on_fitted`` receives each fitted model (``classifiers.train_and_score``); ``sources`` (the file of
    each training set) are named in a data error about that set. ``test_subset``: score on that many
    test images (drawn once with ``seed``, the same for every kind and set; each run records n_test).
    ``device``: where the MLP and CNN train and predict (logistic regression is scikit-learn's, on the CPU);
    each run records it. ``show_scores`` False: the progress lines leave the accuracies out (classifiers
    trained on real records, the real-data row: no released file holds them, and job logs are not private)."""
    out: dict[str, Any] = {}
    x_test, y_test = _subset(real.x_test, real.y_test, test_subset, seed)
    for kind in kinds:
        runs = []
        for k, (x, y) in enumerate(train_sets):
            xs, ys = _subset(x, y, train_subset, seed + k)
            # an upper bound: early stopping may end it sooner (the last line then says "stopped")
            with Progress(max_batches(kind, len(xs), max_epochs), f"classifier {kind} set {k + 1}/{len(train_sets)}", unit="batch",
                          bar=False) as bar:
                with _naming(sources[k] if sources else None):
                    runs.append(train_and_score(kind, xs, ys, x_test, y_test, num_classes=real.num_classes,
                                                seed=seed + k, max_epochs=max_epochs, on_batch=bar.update,
                                                on_fitted=on_fitted, device=device))
                bar.set(epochs=runs[-1]["epochs_run"], **({"accuracy": runs[-1]["accuracy"]} if show_scores else {}))
        out[kind] = {**mean_std([r["accuracy"] for r in runs]), "runs": runs}
    return out


def reference_statistics(extractor: Any, ref: np.ndarray, cache_dir: str | Path | None) -> Any:
    """Inception statistics (and features, which KID needs) of the reference images, cached in
    ``cache_dir`` across evaluate jobs.

    The real test split is the same reference for every run of a dataset, and at 299x299 its
    Inception forward costs as much as the synthetic set's (~0.2 s per image per CPU thread), so
    it is computed once. The cache key is the SHA-256 of the exact reference bytes, the weights
    and the layer: a different split, count or network can never be served stale statistics. A
    cache file that cannot be read (or does not match its key, or predates KID and holds no
    features) is recomputed and replaced.
    """
    if cache_dir is None:
        return extractor.statistics(ref, keep_features=True)
    path = _reference_cache_path(extractor, ref, cache_dir)
    st = cached_reference_statistics(extractor, ref, path)
    if st is None:
        st = extractor.statistics(ref, keep_features=True)
        st.save(path)
    return st


def _reference_cache_path(extractor: Any, ref: np.ndarray, cache_dir: str | Path) -> Path:
    """The cache file of ``ref``'s statistics: keyed on the exact bytes, the weights and the layer."""
    h = hashlib.sha256(f"{ref.shape}|{ref.dtype}|{extractor.weights_sha256}|{extractor.feature_layer}|".encode())
    h.update(np.ascontiguousarray(ref).tobytes())
    return Path(cache_dir) / f"n{len(ref)}-{h.hexdigest()[:20]}.npz"


def cached_reference_statistics(extractor: Any, ref: np.ndarray, path: Path) -> Any:
    """The statistics cached at ``path`` when they are usable for ``ref``, else None (then they are
    computed: unreadable, another key, or from before KID and without features)."""
    from dpsynth.errors import DataError
    from dpsynth.evaluate.fid import FidStatistics

    if not path.is_file():
        return None
    try:
        st = FidStatistics.load(path)
    except DataError:
        return None
    if (st.n, st.weights_sha256, st.feature_layer) == (len(ref), extractor.weights_sha256, extractor.feature_layer) \
            and st.features is not None and st.features.shape[0] == len(ref):
        return st
    return None


def _images_to_compute(extractor: Any, cached_sets: list[np.ndarray], cache_dir: str | Path | None) -> int:
    """How many images of ``cached_sets`` (each read through the cache) Inception will really see:
    a set whose statistics are cached costs none, and a set that appears twice is computed once.
    Known before the progress line starts, so its total never changes midway."""
    if cache_dir is None:
        return sum(len(a) for a in cached_sets)
    todo: dict[Path, int] = {}
    for a in cached_sets:
        path = _reference_cache_path(extractor, a, cache_dir)
        if path not in todo:
            todo[path] = 0 if cached_reference_statistics(extractor, a, path) is not None else len(a)
    return sum(todo.values())


def small_n_scores(features: list[np.ndarray], ref: Any, *, seed: int, split: str = "test") -> dict[str, Any]:
    """KID, FID-infinity, precision and recall (``dpsynth.evaluate.fidelity``) of each synthetic set's
    Inception features against the reference (``FidStatistics`` with features): {"kid", "fid_inf",
    "precision", "recall"}, each mean/std over the sets plus the protocol (subset sizes, the N values and
    fit; k, the counts and the implementation), or {"available": False, "reason"} when a set is too small.
    Set i draws its KID and FID-infinity subsets from seed + i (precision and recall draw nothing).

    The reference is FID's own (the first ``n_reference`` test images), so the FID column keeps its
    meaning and nothing costs more Inception time. At the quick scale that is 200 images, whose own
    finite-sample bias FID-infinity cannot remove (it extrapolates the generated side only; Chong
    and Forsyth keep the reference at full size, as the paper scale does). Measured on real MNIST
    (250 training images, FID 31.7 against 250 test images): FID-infinity 25.3 against those 250,
    19.3 against 1,000 and 18.6 against 2,000 (mean of 5 seeds) -- still an order above the
    papers' 1.6, because FID_N is not yet linear in 1/N at N < 2048 -- while each extra reference
    image costs ~0.2 s of Inception per CPU thread per dataset (750 more: ~150 s on each of
    MNIST and Fashion-MNIST, in a quick pipeline with under 5 minutes to spare), so a larger
    reference was not taken."""
    from dpsynth.errors import DataError
    from dpsynth.evaluate.fidelity import fid_infinity, kid, precision_recall, reference_factor

    common = {"n_reference": int(ref.n), "reference_split": split}
    out: dict[str, Any] = {}
    try:
        kids = [kid(f, ref.features, seed=seed + k) for k, f in enumerate(features)]
        out["kid"] = {"available": True, **mean_std([r["kid"] for r in kids]),
                      "subset_std": [r["subset_std"] for r in kids], "subset_size": kids[0]["subset_size"],
                      "subsets": kids[0]["subsets"], "kernel": kids[0]["kernel"], "seed": seed, **common}
    except DataError as exc:
        out["kid"] = {"available": False, "reason": str(exc)}
    try:
        factor = reference_factor(ref.sigma, ref.features)
        fits = [fid_infinity(f, ref.mu, ref.sigma, seed=seed + k, factor_ref=factor) for k, f in enumerate(features)]
        out["fid_inf"] = {"available": True, **mean_std([r["fid_inf"] for r in fits]),
                          "n_values": fits[0]["n_values"], "fid_values": [r["fid_values"] for r in fits],
                          "slope": [r["slope"] for r in fits],
                          "fit_residual_rms": [r["fit_residual_rms"] for r in fits],
                          "fit": "least squares FID_N = a + b/N over n_values; FID-infinity = a",
                          "seed": seed, **common}
    except DataError as exc:
        out["fid_inf"] = {"available": False, "reason": str(exc)}
    try:
        t0 = time.perf_counter()
        prcs = [precision_recall(f, ref.features) for f in features]
        protocol = {key: prcs[0][key] for key in ("k", "n_generated", "n_reference", "implementation")}
        seconds = round(time.perf_counter() - t0, 2)
        for key in ("precision", "recall"):
            out[key] = {"available": True, **mean_std([r[key] for r in prcs]), **protocol,
                        "reference_split": split, "seconds": seconds}
    except DataError as exc:
        out["precision"], out["recall"] = ({"available": False, "reason": str(exc)} for _ in range(2))
    return out


def _head(st: Any, n: int) -> Any:
    """The ``FidStatistics`` of the first ``n`` images of a set whose statistics ``st`` kept the features."""
    if st.n <= n:
        return st
    import torch
    from torch_fidelity.metric_fid import fid_features_to_statistics

    from dpsynth.evaluate.fid import FidStatistics

    feats = st.features[:n]
    head = fid_features_to_statistics(torch.from_numpy(np.ascontiguousarray(feats)))
    return FidStatistics(mu=head["mu"], sigma=head["sigma"], n=n, weights_sha256=st.weights_sha256,
                         feature_layer=st.feature_layer, features=feats)


def _train_split_fid(extractor: Any, generated: list[Any], ref: Any) -> dict[str, Any]:
    """GS-WGAN's FID: each set's statistics against the real TRAINING split's (``fid_scores(train_fid=)``),
    with KID, FID-infinity, precision and recall from the same features against the same reference
    (``small_n_scores``).

    Through covariance factors (``fid.frechet_distance``): with fewer images than the 2,048 features
    (the quick scale) an n x m SVD instead of 2048 x 2048 eigensolves, milliseconds instead of ~5 s
    per set on one CPU thread; the same number (tests/test_gswgan_protocol.py checks it against
    ``compute_fid``)."""
    from dpsynth.evaluate.fid import frechet_distance
    from dpsynth.evaluate.fidelity import reference_factor

    t0 = time.perf_counter()
    factor_ref = reference_factor(ref.sigma, ref.features)
    fids = []
    for g in generated:
        if (g.weights_sha256, g.feature_layer) != (ref.weights_sha256, ref.feature_layer):
            raise ConfigError("FID statistics of the training split come from other Inception weights or layer")
        fids.append(frechet_distance(g.mu, g.sigma, ref.mu, ref.sigma, factor1=reference_factor(g.sigma, g.features),
                                     factor2=factor_ref))
    if not all(np.isfinite(fids)):
        return {"available": False, "reason": f"FID computation gave a non-finite value ({fids})",
                "reference_split": "train"}
    # KID, FID-infinity, precision and recall beside it, as beside every FID here: same features and reference
    small_n = small_n_scores([g.features for g in generated], ref, seed=0, split="train")
    return {"available": True, **mean_std(fids), "reference_split": "train",
            "n_generated": int(generated[0].n), "n_reference": int(ref.n), "extractor": extractor.extractor,
            **small_n, "seconds": round(time.perf_counter() - t0, 2)}


def fid_scores(sets: list[np.ndarray], real: Dataset, *, n_samples: int, weights: str | None,
               allow_download: bool, timeout: float, cache_dir: str | Path | None = None,
               n_reference: int | None = None, seed: int = 0, train_fid: tuple[int, int | None] | None = None,
               real_row: bool = False, device: str = "cpu") -> dict[str, Any]:
    """FID of each synthetic set vs the real test split; 'unavailable' (with reason), never a number.
    Beside it, from the same features and reference, KID and FID-infinity (``small_n_scores``),
    which do not read high merely because N is small, and precision and recall, which tell poor images
    from missing ones.

    The network is loaded once and the reference statistics computed once for all sets (and, with
    ``cache_dir``, once for all jobs: ``reference_statistics``).

    ``train_fid`` = (n_generated, n_train_reference; None: the whole split) adds, under
    ``"train_split"``, GS-WGAN's FID: each set's first n_generated images against the first
    n_train_reference real TRAINING images, from the same features (one Inception pass per set, over
    the larger of the two counts). ``real_row``: the sets are real training images (the Real data
    row), whose statistics are cached like a reference -- so the GS-WGAN rows' training reference,
    the same images at the quick scale, is computed once per dataset -- and the training-split FID
    compares the real TEST images with them. ``device``: where Inception runs (the features, and so every
    statistic, come back to the CPU; the record names the device)."""
    from dpsynth.evaluate.fid import InceptionFeatures, compute_fid, resolve_weights

    path, reason = resolve_weights(weights, allow_download=allow_download, download_timeout_s=timeout)
    if path is None:
        return {"available": False, "fid": None, "reason": reason, "reference_split": "test"}
    extractor = InceptionFeatures(path, device=device)
    # the reference side: the first n_reference real test images (None: as many as n_samples)
    ref = real.x_test[:n_samples if n_reference is None else n_reference]
    n_feat = n_samples if train_fid is None or real_row else max(n_samples, train_fid[0])
    train_ref = None if train_fid is None else real.x_train[:train_fid[1]]
    # the real row compares its real TEST images with the training split (cached: FID's own reference)
    real_gen = real.x_test[:train_fid[0]] if train_fid is not None and real_row else None
    through_cache = [ref, *([x[:n_samples] for x in sets] if real_row else []),
                     *(a for a in (real_gen, train_ref) if a is not None)]
    todo = _images_to_compute(extractor, through_cache, cache_dir) + (
        0 if real_row else sum(min(n_feat, len(x)) for x in sets))
    with Progress(todo, "fid inception", unit="image", bar=False) as bar:
        extractor.on_images = bar.update

        def cached(images: np.ndarray) -> Any:
            return reference_statistics(extractor, images, cache_dir)

        ref_stats = cached(ref)
        full = [cached(x[:n_samples]) if real_row else extractor.statistics(x[:n_feat], keep_features=True)
                for x in sets]
        stats = [_head(st, n_samples) for st in full]
        records = [compute_fid(st, ref_stats, extractor=extractor) for st in stats]
        if train_ref is not None and train_fid is not None:
            generated = [cached(real_gen)] if real_gen is not None else [_head(st, train_fid[0]) for st in full]
            train_split = _train_split_fid(extractor, generated, cached(train_ref))
    if not all(r.get("available") for r in records):
        bad = next(r for r in records if not r.get("available"))
        return {"available": False, "fid": None, "reason": bad.get("reason"), "reference_split": "test"}
    t0 = time.perf_counter()
    small_n = small_n_scores([st.features for st in stats], ref_stats, seed=seed)
    return {"available": True, **mean_std([r["fid"] for r in records]), "reference_split": "test",
            "n_synthetic": int(min(n_samples, len(sets[0]))), "n_reference": int(len(ref)),
            "extractor": extractor.extractor, "feature_extractor": extractor.extractor_name,
            "weights_path": str(path), "weights_sha256": extractor.weights_sha256, "device": device,
            **small_n, "small_n_seconds": round(time.perf_counter() - t0, 2),
            **({} if train_ref is None else {"train_split": train_split})}


def real_data_fid(real: Dataset, *, n_samples: int, weights: str | None, allow_download: bool,
                  timeout: float, cache_dir: str | Path | None = None, n_reference: int | None = None,
                  seed: int = 0, train_fid: tuple[int, int | None] | None = None,
                  device: str = "cpu") -> dict[str, Any]:
    """The "Real data" row's FID, KID, FID-infinity, precision and recall: the real training split vs the real test
    split, the floor any generator's (same reference, same counts) is read against -- and where a
    reader sees how far FID-infinity at these counts still is from the papers' FID at 60,000.
    ``train_fid``: also GS-WGAN's real row, the real test split against the training split."""
    if not real.is_image:
        return {"available": False, "fid": None, "reason": "not an image dataset"}
    return {**fid_scores([real.x_train], real, n_samples=n_samples, weights=weights,
                         allow_download=allow_download, timeout=timeout, cache_dir=cache_dir, n_reference=n_reference,
                         seed=seed, train_fid=train_fid, real_row=True, device=device),
            "compared_split": "train"}


def w2_scores(sets: list[np.ndarray], real: Dataset, n: int = 1000,
              sources: list[str | Path] | None = None, train: np.ndarray | None = None) -> dict[str, Any]:
    """W2 (exact OT on 1,000-point subsamples) to the CLEAN test split: the local-privacy metric.
    Images are compared as flat vectors in [-1, 1], the space the generator is trained in. ``sources``
    (each set's file) are named in a data error about that set.

    ``train`` (the run's own training records, CLEAN, as ``RunSpec.train_indices`` picks them): also the
    W2 to those, under ``"train"`` (Reshetova et al., arXiv:2306.09547, Fig. 11's "train" curve beside the
    held-out "test" one). An evaluation quantity on the clean private records, as the paper computes it:
    not a private release."""
    from dpsynth.evaluate.w2 import w2_distance

    def flat(x: np.ndarray) -> np.ndarray:
        if x.ndim == 4:
            return images_to_signed(x.reshape(len(x), -1))
        return x.astype(np.float64)

    ref = flat(real.x_test)

    def one(k: int, x: np.ndarray) -> float:
        with _naming(sources[k] if sources else None):
            return w2_distance(flat(x), ref, n=n, seed=k)

    # "n" stays mean_std's (how many sets; the record checks it against the values): the points of
    # each side of a W2 are "n_points" (an "n" of 1,000 here made the report refuse every W2 record)
    out = {**mean_std([one(k, x) for k, x in enumerate(sets)]),
           "n_points": n, "reference_split": "test (clean)"}
    if train is not None:
        # a uniform subsample of at most 10 x n records before flattening (60,000 MNIST images would be
        # 376 MB as float64); w2_distance then draws its n points from those
        keep = subset_indices(len(train), 10 * n, 0)
        ref = flat(train if keep is None else train[keep])

        def to_train(k: int, x: np.ndarray) -> float:
            with _naming(sources[k] if sources else None):
                return w2_distance(flat(x), ref, n=n, seed=k)

        out["train"] = {**mean_std([to_train(k, x) for k, x in enumerate(sets)]), "n_points": min(n, len(ref)),
                        "n_records": int(len(train)),
                        "reference_split": "the run's own training records (clean, not privatized)"}
    return out


def evaluate_synthetic(paths: list[Path], real: Dataset, *, kinds: list[str], max_epochs: int,
                       train_subset: int | None, fid_samples: int, fid_weights: str | None,
                       fid_download: bool, fid_timeout: float, conditional: bool = True,
                       fid_cache: str | Path | None = None, fid_reference: int | None = None,
                       gswgan: GsWganSettings | None = None, test_subset: int | None = None,
                       device: str = "cpu", train_records: np.ndarray | None = None) -> dict[str, Any]:
    """Classifier accuracies for conditional generators; W2 to the clean data for unconditional ones
    (the local-privacy method); FID whenever the records are images. With ``gswgan``, also GS-WGAN's
    Table 1 protocol (``gswgan_protocol``) for a conditional image generator, as ``protocols``.
    ``device`` runs the MLP/CNN classifiers and Inception (the IS network: ``gswgan``'s own device)."""
    t0 = time.perf_counter()
    loaded = [load_synthetic(p, expect_shape=real.record_shape, num_classes=real.num_classes) for p in paths]
    reports = [rep for _, _, rep in loaded]
    if any(r != reports[0] for r in reports[1:]):
        from dpsynth.errors import DataError

        raise DataError(f"synthetic sets {', '.join(map(str, paths))} carry different privacy reports")
    if reports:
        from dpsynth.privacy.verify import verify_report

        verify_report(reports[0], f"{paths[0]} (privacy report inside)")
    sets = [(x, y) for x, y, _ in loaded]
    t1 = time.perf_counter()
    if conditional:
        clf, w2 = classifier_scores(sets, real, kinds=kinds, max_epochs=max_epochs, train_subset=train_subset,
                                    sources=list(paths), test_subset=test_subset, device=device), None
    else:
        clf, w2 = {}, w2_scores([x for x, _ in sets], real, sources=list(paths), train=train_records)
        if real.is_image:  # the second measure beside W2, which rewards blur (evaluate.closeness)
            from dpsynth.evaluate.closeness import closeness_of_sets

            w2["closeness"] = closeness_of_sets([x for x, _ in sets], real.x_test, real.y_test, real.num_classes)
    t2 = time.perf_counter()
    protocol = gswgan is not None and conditional and real.is_image
    fid = fid_scores([x for x, _ in sets], real, n_samples=fid_samples, weights=fid_weights,
                     allow_download=fid_download, timeout=fid_timeout, cache_dir=fid_cache,
                     n_reference=fid_reference, train_fid=gswgan.train_fid if protocol and gswgan else None,
                     device=device) \
        if real.is_image else {"available": False, "fid": None, "reason": "not an image dataset"}
    t3 = time.perf_counter()
    out: dict[str, Any] = {
        "classifiers": clf, "w2": w2, "fid": fid, "privacy": reports[0], "n_synthetic_sets": len(paths),
        "n_synthetic": int(len(sets[0][0])),
        "seconds": {"load": round(t1 - t0, 2), "classifiers": round(t2 - t1, 2), "fid": round(t3 - t2, 2)}}
    if protocol and gswgan is not None:
        from dpsynth.evaluate.gswgan_protocol import gswgan_scores
        from dpsynth.evaluate.record import GS_WGAN

        out["protocols"] = {GS_WGAN: gswgan_scores(sets, [x for x, _ in sets], real, gswgan, cnn=clf.get("cnn"),
                                                   fid_train=fid.pop("train_split", None))}
        out["seconds"]["gs_wgan"] = round(time.perf_counter() - t3, 2)
    return out


def environment() -> dict[str, str]:
    import sklearn
    import torch

    return {"dpsynth": __version__, "torch": torch.__version__, "sklearn": sklearn.__version__,
            "python": platform.python_version()}
