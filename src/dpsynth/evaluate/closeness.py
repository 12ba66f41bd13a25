"""Closeness to the clean data that blur does not win: KID, precision and recall in the feature space of a
digit classifier that learnt from public data only.

Why a second measure. Reshetova, Chen and Ozgur ("Training generative models from privatized data via
entropic optimal transport", ISIT 2024, arXiv:2306.09547) score MNIST generators by the exact W2 to clean
records in pixel space (``w2.w2_distance``). That W2 rewards blur: on the 1,000 clean test records real
training images score 12.4, the same images blurred by a 1-pixel Gaussian 10.9, shrunk 30 % towards the
mean image 11.3, averages of 5 same-class images 11.4 (``benchmarks/closeness_references.py``). A
generator that averages its way to the middle of the pixel cloud can read closer than the data itself.

The space. The project's CNN (``classifiers.CNN``: conv 32, conv 64, dense; fitted by
``classifiers.fit_classifier`` and cached by ``classifier_is.ClassifierCache``) is trained on one half of
the TEST split (drawn with ``SPACE_SEED``); no statistic of the training records enters the measure. The
features are its last convolution's ReLU activations averaged over the image (64-d), the analogue of the
globally pooled Inception features FID reads: the classifier needs sharp strokes to tell digits apart, so
blur, shrinking and averaging move these features where W2 in pixels moves closer. The other half of the
test split, which the network never saw, is the reference set. The space is fixed (not seeded by the run),
so every generator of a sweep is compared in one space.

The measures (``fidelity``'s, on these features):

- **KID** (Binkowski et al., ICLR 2018, arXiv:1801.01401), the headline: unbiased at any sample count, so
  1,000 samples read the same as more. Measured (``benchmarks/results/closeness_references_mnist.json``;
  5 seeds of 1,000 records, mean and std over the seeds, KID x 10^3): clean training images 0.000 (std 0.002),
  shrunk 0.92, blurred 1.33, averages of 5 1.64, the mean image 5.48, uniform noise 20.5 -- real images best,
  the mean image worst of the images, every margin over 300 times the spread. Two other halvings of the test
  split (``SPACE_SEED`` 1 and 2) give the same order (shrunk 1.34 and 1.38, the mean image 8.25 and 8.58), but
  other values: a KID is comparable only within one space, which is why the space is fixed.
- **Precision and recall** (Kynkäänniemi et al., NeurIPS 2019, arXiv:1904.06991; k = 3) beside it, to say
  which failure a generator has: real images 0.93 / 0.95, blurred 0.14 / 0.02, shrunk 0.13 / 0.03, averages
  0.06 / 0.02-0.25 (recall varies with the draw), the mean image 0 / 0. Not the headline: a precision or
  recall near 0 no longer ranks the sets that are all far off.

Measured and not taken (an earlier fit of the same network on another halving, 8 epochs, 2 seeds): KID on the
class logits (10-d) ranks the sets right too, but its precision called the mean image precise (1.0 in one of
the two seeds); features pooled to 4 x 4 positions (1,024-d) rank them right, at about five times the cost,
and their precision is 1.0 for the mean image; the first convolution's pooled features (32-d) rank them
right, but their precision is 0 for every altered set; the unpooled last layer (36,864-d) costs hours per
KID on one CPU thread.

The spread ``closeness`` returns is over reference draws (KID's subsets, precision and recall's disjoint
reference draws) for the one set of generated records it is given; the spread over a generator's own sample
draws or training runs is the caller's to measure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dpsynth.data.dataset import images_to_signed
from dpsynth.errors import DataError
from dpsynth.evaluate.classifiers import FittedClassifier

__all__ = ["FeatureSpace", "closeness", "CloseToClean", "ROW_FIELDS", "closeness_of_sets", "reference_sets", "reference_rows", "split_test", "REFERENCES",
           "SPACE_SEED", "MAX_EPOCHS", "PR_DRAWS", "FEATURES"]

#: Seeds the split of the test split into the network's half and the reference half, and the network's fit.
SPACE_SEED = 0
#: Epochs of the feature network's fit (early stopping on its 10 % hold-out keeps the best; it reads 98 %).
MAX_EPOCHS = 10
#: Disjoint reference draws precision and recall are averaged over (their spread is the reported std).
PR_DRAWS = 5
FEATURES = "CNN last convolution's ReLU, mean over positions (64-d), fitted on half of the test split"
#: The reference sets of ``reference_sets``, in the order a table prints them, and what each is.
REFERENCES = {
    "clean": "clean training images",
    "blurred": "the same, blurred by a Gaussian of sigma 1 pixel",
    "shrunk": "the same, shrunk 30 % towards the mean training image",
    "averaged": "averages of 5 training images of the same class",
    "mean": "the mean training image, repeated",
    "noise": "uniform noise in [-1, 1]",
}


def split_test(n_test: int, seed: int = SPACE_SEED) -> tuple[np.ndarray, np.ndarray]:
    """(rows the feature network learns from, reference rows) of an ``n_test``-row test split: a seeded
    permutation cut in half, each half sorted. Disjoint, so the reference is data the network never saw."""
    if n_test < 4:
        raise DataError(f"closeness: the test split has {n_test} images; the feature space needs at least 4")
    perm = np.random.default_rng([seed, 0xC105E]).permutation(n_test)
    return np.sort(perm[: n_test // 2]), np.sort(perm[n_test // 2:])


def pooled_features(fitted: FittedClassifier, records: np.ndarray, *, batch_size: int = 500) -> np.ndarray:
    """(N, 64) features of records in [-1, 1] (``images_to_signed``'s space, flattened): the CNN's last
    ReLU output averaged over positions. Records are mapped back to the network's [0, 1] input scale as
    floats (no rounding to uint8: a generator's outputs are not quantized either)."""
    import torch
    from torch import nn

    c, h, w = fitted.image_shape
    x = np.asarray(records, dtype=np.float32)
    if x.ndim != 2 or x.shape[1] != c * h * w or len(x) == 0:
        raise DataError(f"closeness: records must be a non-empty (N, {c * h * w}) array, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise DataError("closeness: records contain NaN or Inf")
    layers = list(fitted.model.net)
    body = nn.Sequential(*layers[: max(i for i, m in enumerate(layers) if isinstance(m, nn.ReLU)) + 1]).eval()
    dev = torch.device(fitted.device)
    out = []
    with torch.no_grad():
        for i in range(0, len(x), batch_size):
            xb = torch.from_numpy((x[i: i + batch_size] + 1.0) / 2.0).reshape(-1, c, h, w).to(dev)
            out.append(body(xb).mean(dim=(2, 3)).cpu().numpy())
    return np.concatenate(out).astype(np.float64)


@dataclass(frozen=True)
class FeatureSpace:
    """The fitted feature network, the reference half's features, and which test rows each half holds
    (``feature_indices``: the only images the network learnt from; ``reference_indices``: the rest)."""

    fitted: FittedClassifier
    reference: np.ndarray
    feature_indices: np.ndarray
    reference_indices: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_test_split(cls, x_test: np.ndarray, y_test: np.ndarray, num_classes: int, *,
                        cache_dir: str | Path | None = None, seed: int = SPACE_SEED, max_epochs: int = MAX_EPOCHS,
                        device: str = "cpu") -> FeatureSpace:
        """Fit (or load from ``cache_dir``, default ``dpsynth.cache.cache_dir("closeness")``: the network
        is a function of public data alone, so it belongs to the machine, like the FID weights) the CNN on
        one half of the test split and compute the other half's features. Takes the test split only: no
        training record can reach the network."""
        from dpsynth.cache import cache_dir as machine_cache
        from dpsynth.evaluate.classifier_is import ClassifierCache
        from dpsynth.evaluate.checks import check_images_meta, check_labels_meta

        n = check_images_meta("x_test", x_test)[0]
        check_labels_meta("y_test", y_test, n)
        fit_idx, ref_idx = split_test(n, seed)
        cache = ClassifierCache(x_test[fit_idx], y_test[fit_idx], num_classes,
                                machine_cache("closeness") if cache_dir is None else cache_dir,
                                max_epochs=max_epochs, seed=seed, device=device, trained_on="half of the test split")
        fitted, net_info = cache.get()
        reference = pooled_features(fitted, images_to_signed(x_test[ref_idx].reshape(len(ref_idx), -1)))
        info = {"features": FEATURES, "n_feature_set": len(fit_idx), "n_reference": len(ref_idx),
                "space_seed": seed, "network": net_info}
        return cls(fitted, reference, fit_idx, ref_idx, info)

    def features(self, records: np.ndarray) -> np.ndarray:
        return pooled_features(self.fitted, records)


def closeness(generated_records: np.ndarray, *, seed: int, space: FeatureSpace) -> dict[str, Any]:
    """KID (the headline) and precision / recall of (N, D) records in [-1, 1] against the reference half.

    ``kid``: against all reference features, subsets of min(1,000, N) (``fidelity.kid``); ``kid_subset_std``
    is its spread over the 100 subsets (reference draws). ``precision`` / ``recall``: the mean over
    ``PR_DRAWS`` disjoint reference draws of N features each (fewer when the reference holds fewer;
    Kynkäänniemi et al. compare equal counts), ``*_std`` their spread. ``seed`` draws the subsets."""
    from dpsynth.evaluate.fidelity import kid, precision_recall

    g = space.features(generated_records)
    ref = space.reference
    k = kid(g, ref, seed=seed)
    n = min(len(g), len(ref))
    perm = np.random.default_rng(seed).permutation(len(ref))
    draws = max(1, min(PR_DRAWS, len(ref) // n))
    prs = [precision_recall(g[:n], ref[perm[j * n:(j + 1) * n]]) for j in range(draws)]
    p, r = [d["precision"] for d in prs], [d["recall"] for d in prs]
    return {"measure": "kid", "kid": k["kid"], "kid_subset_std": k["subset_std"], "kid_subsets": k["subsets"],
            "kid_subset_size": k["subset_size"], "precision": float(np.mean(p)), "precision_std": float(np.std(p)),
            "recall": float(np.mean(r)), "recall_std": float(np.std(r)), "pr_draws": draws, "pr_k": prs[0]["k"],
            "n": len(g), "seed": seed, "space": space.info}


#: The columns ``CloseToClean`` adds to a sweep's row (the W2 sweep's CSV, the reference rows).
ROW_FIELDS = ("kid", "kid_subset_std", "precision", "recall")


@dataclass(frozen=True)
class CloseToClean:
    """The second measure as a callable a sweep applies to each generator's first sample draw (and to each
    reference set): ``(records, seed) -> {kid, kid_subset_std, precision, recall}``. Picklable (the fitted
    network travels to the W2 sweep's worker processes once, with the worker's data)."""

    space: FeatureSpace

    def __call__(self, records: np.ndarray, seed: int) -> dict[str, float]:
        m = closeness(records, seed=seed, space=self.space)
        return {k: float(m[k]) for k in ROW_FIELDS}


def closeness_of_sets(sets: list[np.ndarray], x_test: np.ndarray, y_test: np.ndarray, num_classes: int, *,
                      n: int = 1000) -> dict[str, Any]:
    """A run's second measure beside its W2 (``metrics.json``'s ``w2.closeness``): per synthetic set (uint8
    images), ``closeness`` of its first ``n`` records; KID, precision and recall each as mean and std over the
    sets (``record.mean_std``), the feature space named. Reads the test split only (``FeatureSpace``)."""
    from dpsynth.evaluate.record import mean_std

    space = FeatureSpace.from_test_split(x_test, y_test, num_classes)
    per = [CloseToClean(space)(images_to_signed(x[:n].reshape(min(n, len(x)), -1)), k) for k, x in enumerate(sets)]
    return {**{key: mean_std([m[key] for m in per]) for key in ("kid", "precision", "recall")},
            "n_points": min(n, *(len(x) for x in sets)), "features": FEATURES, "space": space.info}


def reference_sets(images: np.ndarray, labels: np.ndarray, *, n: int = 1000, seed: int) -> dict[str, np.ndarray]:
    """The records of ``REFERENCES`` (each (n, D) in [-1, 1]), built from ``n`` images drawn with ``seed``:
    what W2 and the second measure are read against. The mean image is the whole split's."""
    from scipy.ndimage import gaussian_filter

    total, c, h, w = images.shape
    if not 1 <= n <= total:
        raise DataError(f"closeness: {n} reference records asked of a split of {total} images")
    rng = np.random.default_rng(seed)
    idx = rng.choice(total, n, replace=False)
    clean = images_to_signed(images[idx].reshape(n, -1))
    mean = images_to_signed(images.reshape(total, -1).mean(axis=0, dtype=np.float64))
    blurred = gaussian_filter(clean.reshape(n, c, h, w), sigma=(0, 0, 1.0, 1.0)).reshape(n, -1)
    by_class = {int(k): np.flatnonzero(labels == k) for k in np.unique(labels)}
    averaged = np.stack([images_to_signed(images[rng.choice(by_class[int(k)], 5, replace=False)].reshape(5, -1))
                         .mean(axis=0) for k in labels[idx]])
    sets = {"clean": clean, "blurred": blurred, "shrunk": mean + 0.7 * (clean - mean), "averaged": averaged,
            "mean": np.repeat(mean[None], n, axis=0), "noise": rng.uniform(-1.0, 1.0, clean.shape)}
    return {name: sets[name] for name in REFERENCES}


def reference_rows(images: np.ndarray, labels: np.ndarray, clean_images: np.ndarray, *, space: FeatureSpace,
                   seeds: list[int], n: int = 1000) -> list[dict[str, Any]]:
    """One row per (seed, reference set): the W2 to ``clean_images`` exactly as the sweep measures a
    generator (``w2.w2_distance`` on ``n`` records a side, the same seed) and ``closeness`` of the very
    same records, so a report prints them beside the generators'."""
    from dpsynth.evaluate.w2 import w2_distance

    clean = images_to_signed(clean_images.reshape(len(clean_images), -1))
    rows = []
    for seed in seeds:
        for name, records in reference_sets(images, labels, n=n, seed=seed).items():
            m = closeness(records, seed=seed, space=space)
            rows.append({"reference": name, "description": REFERENCES[name], "seed": seed, "n": n,
                         "w2": w2_distance(records, clean, n=n, seed=seed),
                         **{k: v for k, v in m.items() if k not in ("n", "seed")}})
    return rows
