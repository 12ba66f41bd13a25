"""The classifier Inception Score of GS-WGAN's Table 1: IS computed with a classifier trained on the
real data, not with the ImageNet Inception network.

GS-WGAN (Chen, Orekondy, Fritz, NeurIPS 2020, arXiv:2006.08265) reports an "Inception Score" for
MNIST and Fashion-MNIST whose network is a classifier of the dataset itself: the authors'
``evaluation/train_mnist_inception_score.py`` trains one (a VGG11 adapted to 28x28 grey images, SGD
with momentum, random crops and flips, 50 epochs) on the real training split, and
``eval_mnist_inception_score.py`` takes its softmax outputs p(y|x) on the shuffled images, cuts them
into 10 equal splits, and reports the mean and standard deviation over the splits of
exp(E_x KL(p(y|x) || p(y))), p(y) being the split's mean prediction. A perfect, confident generator
of K balanced classes scores K; one that always draws the same image scores 1.

The formula and the splits here are theirs. The network is the project's CNN (``classifiers``,
trained on the real training split with the scale's classifier settings), not their VGG11: the same
fit the real-data row already makes, so it costs nothing extra where that row runs
(docs/deviations.md). It is trained once per dataset and cached under the private root, as the
FID reference statistics are: it was fitted on the private training images.
"""

from __future__ import annotations

import hashlib
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from dpsynth.data.dataset import Dataset, subset_indices
from dpsynth.errors import DataError
from dpsynth.evaluate.classifiers import FittedClassifier, fit_classifier, predict

#: The authors' split count (eval_mnist_inception_score.py).
SPLITS = 10
#: The network: the project's CNN, the one a real-data row trains.
KIND = "cnn"
#: Changes when the cached file's layout does.
_FORMAT = "dpsynth-is-classifier/1"


def inception_score(probs: np.ndarray, splits: int = SPLITS) -> dict[str, Any]:
    """IS of (N, K) class probabilities in their order: the mean and (population) std over ``splits``
    contiguous, equal parts (the last takes the remainder, as integer division cuts them) of
    exp(mean_x sum_y p(y|x) (log p(y|x) - log p(y))), with 0 log 0 = 0 (the authors' float32 softmax
    never reaches an exact 0; ours may, in float64). Shuffle the rows first: a set ordered by class
    would make each split one class and score near 1."""
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 2 or len(p) < splits:
        raise DataError(f"inception score: need (N >= {splits}, K) probabilities, got shape {p.shape}")
    scores = []
    for i in range(splits):
        part = p[i * len(p) // splits:(i + 1) * len(p) // splits]
        marginal = part.mean(0, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            kl = np.where(part > 0, part * (np.log(part) - np.log(marginal)), 0.0)
        scores.append(float(np.exp(kl.sum(1).mean())))
    return {"mean": float(np.mean(scores)), "std": float(np.std(scores)), "splits": scores}


class ClassifierCache:
    """One fitted CNN (``classifiers.fit_classifier``) of the images ``x`` and labels ``y``, cached in
    ``cache_dir`` under the SHA-256 of those images, their labels and the fit's settings -- other data or
    settings can never be served a stale network. The device it was fitted on is not part of the key: a
    network fitted on the GPU serves a CPU job and vice versa (the same fit up to float rounding), and
    ``device`` is where this job runs and predicts with it. ``trained_on`` says in the record which data
    it learnt from (the IS network: the real training split; ``closeness``: half of the test split).

    ``get`` loads it or fits and stores it; ``store`` keeps a fit made elsewhere with the very same
    arguments."""

    def __init__(self, x: np.ndarray, y: np.ndarray, num_classes: int, cache_dir: str | Path | None, *,
                 max_epochs: int, seed: int = 0, device: str = "cpu", trained_on: str) -> None:
        self.x, self.y, self.num_classes = x, y, num_classes
        self.max_epochs, self.seed, self.device, self.trained_on = max_epochs, seed, device, trained_on
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        h = hashlib.sha256(f"{_FORMAT}|{KIND}|{seed}|{max_epochs}|{self.x.shape}|{num_classes}|".encode())
        h.update(np.ascontiguousarray(self.x).tobytes())
        h.update(np.ascontiguousarray(self.y).astype(np.int64).tobytes())
        self.key = h.hexdigest()
        self.path = None if self.cache_dir is None else self.cache_dir / f"{KIND}-n{len(self.x)}-{self.key[:20]}.npz"

    def store(self, fitted: FittedClassifier) -> None:
        """Keep ``fitted`` (a CNN fitted with this cache's arguments) for later jobs; atomic."""
        from dpsynth.io import write_npz

        if self.path is None or fitted.kind != KIND:
            return
        state = {f"w:{k}": v.detach().cpu().numpy() for k, v in fitted.model.state_dict().items()}
        write_npz(self.path, format=np.str_(_FORMAT), key=np.str_(self.key), shape=np.asarray(fitted.image_shape),
                  num_classes=np.int64(fitted.num_classes), epochs_run=np.int64(fitted.epochs_run or 0),
                  holdout_accuracy=np.float64(fitted.holdout_accuracy or np.nan), n_train=np.int64(fitted.n_train),
                  **state)

    def _load(self) -> FittedClassifier | None:
        import torch

        from dpsynth.evaluate.classifiers import build_net

        if self.path is None or not self.path.is_file():
            return None
        try:
            with np.load(self.path, allow_pickle=False) as z:
                if str(z["format"]) != _FORMAT or str(z["key"]) != self.key:
                    return None
                shape = tuple(int(v) for v in z["shape"])
                net = build_net(KIND, shape, int(z["num_classes"]))  # type: ignore[arg-type]
                net.load_state_dict({k[2:]: torch.from_numpy(z[k]) for k in z.files if k.startswith("w:")})
                net.to(torch.device(self.device))
                hold = float(z["holdout_accuracy"])
                epochs, n_train = int(z["epochs_run"]), int(z["n_train"])
        except (OSError, KeyError, ValueError, RuntimeError, EOFError, zipfile.BadZipFile):
            return None  # unreadable or from another layout: refitted and replaced
        net.eval()
        return FittedClassifier(
            kind=KIND, model=net, image_shape=shape, num_classes=self.num_classes,  # type: ignore[arg-type]
            n_train=n_train, n_holdout=len(self.x) - n_train, epochs_run=epochs, best_epoch=None, iterations=None,
            converged=True, holdout_loss=None, holdout_accuracy=None if np.isnan(hold) else hold, fit_seconds=0.0,
            device=self.device)

    def get(self) -> tuple[FittedClassifier, dict[str, Any]]:
        """The network and what the record says about it (cache hit or fitted now, size, hold-out accuracy)."""
        t0 = time.perf_counter()
        fitted, cached = self._load(), True
        if fitted is None:
            cached = False
            fitted = fit_classifier(KIND, self.x, self.y, num_classes=self.num_classes, seed=self.seed,
                                    max_epochs=self.max_epochs, device=self.device)
            self.store(fitted)
        # (no part of ``key`` in the record: a hash of the training subset would confirm a guess of those records)
        return fitted, {"kind": KIND, "trained_on": self.trained_on, "n_train": fitted.n_train,
                        "n_holdout": fitted.n_holdout, "max_epochs": self.max_epochs, "epochs_run": fitted.epochs_run,
                        "holdout_accuracy": fitted.holdout_accuracy, "seed": self.seed, "cached": cached,
                        "device": fitted.device, "seconds": round(time.perf_counter() - t0, 2)}


class ISClassifierCache(ClassifierCache):
    """The IS network of one dataset at one setting, trained on the real training split (the
    ``train_subset`` images ``subset_indices`` draws with ``seed``: the draw a real-data row's
    classifiers make). Cached under the private root, as the FID reference statistics are: it was fitted
    on the private training images. ``store`` keeps the real-data row's CNN (handed over by
    ``train_and_score(on_fitted=...)``), fitted with these very arguments."""

    def __init__(self, real: Dataset, cache_dir: str | Path | None, *, max_epochs: int,
                 train_subset: int | None, seed: int = 0, device: str = "cpu") -> None:
        self.real = real
        idx = subset_indices(len(real.x_train), train_subset, seed)
        x, y = (real.x_train, real.y_train) if idx is None else (real.x_train[idx], real.y_train[idx])
        super().__init__(x, y, real.num_classes, cache_dir, max_epochs=max_epochs, seed=seed, device=device,
                         trained_on="real training split")


def classifier_is(image_sets: list[np.ndarray], cache: ISClassifierCache, *, n_images: int | None,
                  seed: int = 0) -> dict[str, Any]:
    """The classifier IS of each image set (its first ``n_images``, None: all, shuffled with seed + k)
    with the cached network: {"available", "mean", "std", "n", "values" (per set: mean over splits),
    "split_std" (per set), "splits", "n_images", "classifier"}."""
    from dpsynth.evaluate.record import mean_std

    fitted, info = cache.get()
    t0 = time.perf_counter()
    per_set, used = [], []
    for k, x in enumerate(image_sets):
        x = x[:n_images] if n_images is not None else x
        order = np.random.default_rng(seed + k).permutation(len(x))  # the authors shuffle before splitting
        per_set.append(inception_score(predict(fitted, x[order], probabilities=True)))
        used.append(len(x))
    return {"available": True, **mean_std([r["mean"] for r in per_set]), "split_std": [r["std"] for r in per_set],
            "splits": SPLITS, "n_images": min(used), "classifier": info, "seconds": round(time.perf_counter() - t0, 2)}
