"""Downstream classifiers: train on (synthetic) images, score once on the real test split.

The evaluation protocol of the DP-Sinkhorn papers (ICLR submission App. D.2): logistic regression (scikit-learn, L-BFGS, max_iter 5000), an MLP (one hidden
layer of 100, ReLU) and a CNN (conv 32 and 64 filters, ReLU, dropout 0.5), the last two
trained with Adam and early-stopped on a 10% hold-out of the TRAINING data.

The real test split must never influence model selection. That is enforced by structure,
not by discipline: ``fit_classifier`` has no parameter through which test data could
arrive and returns a finished ``FittedClassifier``; ``score_classifier`` needs that finished
model as an argument, so it can only run after fitting is over, and it is the only place
that reads the test arrays. ``train_and_score`` merely chains the two (checking only the
test arrays' shape and dtype up front, which reads no element).
"""

from __future__ import annotations

import contextlib
import copy
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from torch import nn

from dpsynth.errors import ConfigError, DataError
from dpsynth.evaluate.checks import check_images_meta, check_labels_meta, check_labels_values

Kind = Literal["logreg", "mlp", "cnn"]
KINDS: tuple[str, ...] = ("logreg", "mlp", "cnn")


#: The protocol's defaults (ICLR App. D.2): 10 % of the training data held out, minibatches of 128.
HOLDOUT = 0.1
BATCH_SIZE = 128


@dataclass
class FittedClassifier:
    """A trained classifier plus how its training went (everything but the test score)."""

    kind: str
    model: Any  # LogisticRegression or a torch nn.Module in eval mode
    image_shape: tuple[int, int, int]
    num_classes: int
    n_train: int
    n_holdout: int
    epochs_run: int | None  # torch: epochs trained; logreg: None (see ``iterations``)
    best_epoch: int | None  # 1-based epoch whose weights were kept
    iterations: int | None  # logreg: L-BFGS iterations; torch: None
    converged: bool
    holdout_loss: float | None
    holdout_accuracy: float | None
    fit_seconds: float
    device: str
    holdout_indices: np.ndarray | None = None  # rows of x_train used for early stopping (audit trail)


def to_unit_float(x: np.ndarray) -> np.ndarray:
    """uint8 0..255 -> float32 0..1 (the classifiers' input scale per the brief)."""
    return np.asarray(x, dtype=np.float32) / np.float32(255.0)


# --------------------------------------------------------------------------- networks


class MLP(nn.Module):
    """One hidden layer of 100 ReLU units (ICLR submission App. D.2)."""

    def __init__(self, in_features: int, num_classes: int, hidden: int = 100) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(), nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class UniformDropout(nn.Module):
    """Dropout as ``nn.Dropout`` defines it (each element kept with probability 1 - p and scaled by 1 / (1 - p)
    in training, the identity in eval), its mask drawn as ``uniform >= p`` instead of by ``bernoulli_``. The same
    distribution, about three times cheaper on a CPU: ``bernoulli_`` took 47 % of a CNN fit's time there
    (measured 2026-12-02, one thread, batches of 128: the mask of a (128, 64, 24, 24) activation 111 ms by
    ``bernoulli_``, 17 ms by ``rand``; forward and backward of the dropout 166 ms against 60 ms). No parameters,
    so a saved classifier's state dict is unchanged."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ConfigError(f"dropout probability must be in [0, 1), got {p!r}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        return x * torch.rand_like(x).ge_(self.p).mul_(1.0 / (1.0 - self.p))

    def extra_repr(self) -> str:
        return f"p={self.p}"


class CNN(nn.Module):
    """ICLR Appendix D.2: "two hidden layers with 32 and 64 filters, ReLU activations, dropout
    (p = 0.5) between all intermediate layers".

    conv3x3(32)-ReLU-dropout0.5-conv3x3(64)-ReLU-dropout0.5-dense(K). The kernel size and the
    absence of pooling are our reading (the appendix is silent); the authors' released classifier
    differs from the appendix (three convolutions with pooling, SGD; docs/deviations.md).
    Valid (unpadded) convolutions, so the input must be at least 6x6.
    """

    def __init__(self, channels: int, height: int, width: int, num_classes: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(channels, 32, 3),
            nn.ReLU(),
            UniformDropout(0.5),
            nn.Conv2d(32, 64, 3),
            nn.ReLU(),
            UniformDropout(0.5),
            nn.Flatten(),
            nn.Linear(64 * (height - 4) * (width - 4), num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


# --------------------------------------------------------------------------- fitting


def _check_common(kind: str, num_classes: int, holdout: float, max_epochs: int, patience: int, batch_size: int) -> None:
    if kind not in KINDS:
        raise ConfigError(f"classifier kind {kind!r} is not one of {KINDS}")
    if not isinstance(num_classes, (int, np.integer)) or num_classes < 2:
        raise ConfigError(f"num_classes must be an integer >= 2, got {num_classes!r}")
    if kind != "logreg":
        if not 0.0 < holdout < 1.0:
            raise ConfigError(f"holdout must be a fraction in (0, 1), got {holdout!r}")
        if max_epochs < 1:
            raise ConfigError(f"max_epochs must be >= 1, got {max_epochs!r}")
        if patience < 1:
            raise ConfigError(f"patience must be >= 1, got {patience!r}")
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size!r}")


def fit_classifier(
    kind: str,
    x_train: np.ndarray,
    y_train: np.ndarray,
    *,
    num_classes: int,
    seed: int,
    max_epochs: int = 100,
    patience: int = 10,
    holdout: float = HOLDOUT,
    batch_size: int = BATCH_SIZE,
    device: str = "cpu",
    logreg_max_iter: int = 5000,
    num_threads: int | None = None,
    on_batch: Callable[[], None] | None = None,
) -> FittedClassifier:
    """Train one classifier on training data only; the test split cannot reach this function.

    ``max_epochs`` caps MLP/CNN training (the ``quick`` scale lowers it); early stopping
    with ``patience`` epochs watches the accuracy (ICLR D.2) on a seeded ``holdout`` fraction of the
    training data and the best-epoch weights are restored. Logistic regression uses all
    training data (it has no epochs to stop; ``holdout`` is ignored, n_holdout=0).
    """
    _check_common(kind, num_classes, holdout, max_epochs, patience, batch_size)
    n, c, h, w = check_images_meta("x_train", x_train)
    check_labels_meta("y_train", y_train, n)
    y = np.asarray(y_train).astype(np.int64)
    check_labels_values("y_train", y, num_classes)
    if kind == "cnn" and (h < 6 or w < 6):
        raise DataError(f"x_train images are {h}x{w}; the CNN needs at least 6x6")
    if num_threads is not None and num_threads < 1:
        raise ConfigError(f"num_threads must be >= 1, got {num_threads!r}")
    x = to_unit_float(x_train)
    start = time.perf_counter()
    with _torch_threads(num_threads):
        fitted = _fit(kind, x, y, num_classes=num_classes, seed=seed, max_epochs=max_epochs, patience=patience,
                      holdout=holdout, batch_size=batch_size, device=device, logreg_max_iter=logreg_max_iter,
                      on_batch=on_batch)
    fitted.fit_seconds = time.perf_counter() - start
    return fitted


@contextlib.contextmanager
def _torch_threads(n: int | None) -> Iterator[None]:
    old = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _fit(
    kind: str, x: np.ndarray, y: np.ndarray, *, num_classes: int, seed: int, max_epochs: int, patience: int,
    holdout: float, batch_size: int, device: str, logreg_max_iter: int, on_batch: Callable[[], None] | None = None,
) -> FittedClassifier:
    if kind == "logreg":
        return _fit_logreg(x, y, num_classes=num_classes, seed=seed, max_iter=logreg_max_iter)
    # fork_rng: seeding must not perturb the caller's global torch RNG stream.
    cuda_devices = [torch.device(device).index or 0] if torch.device(device).type == "cuda" else []
    with torch.random.fork_rng(devices=cuda_devices):
        return _fit_torch(
            kind, x, y, num_classes=num_classes, seed=seed, max_epochs=max_epochs, patience=patience,
            holdout=holdout, batch_size=batch_size, device=device, on_batch=on_batch,
        )


def _fit_logreg(x: np.ndarray, y: np.ndarray, *, num_classes: int, seed: int, max_iter: int) -> FittedClassifier:
    if np.unique(y).size < 2:
        raise DataError("y_train contains a single class; logistic regression needs at least two")
    clf = LogisticRegression(solver="lbfgs", max_iter=max_iter, random_state=seed)  # multinomial by default
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        clf.fit(x.reshape(len(x), -1), y)
    converged = not any(issubclass(wi.category, ConvergenceWarning) for wi in caught)
    return FittedClassifier(
        kind="logreg", model=clf, image_shape=tuple(x.shape[1:]), num_classes=num_classes,  # type: ignore[arg-type]
        n_train=len(x), n_holdout=0, epochs_run=None, best_epoch=None, iterations=int(np.max(clf.n_iter_)),
        converged=converged, holdout_loss=None, holdout_accuracy=None, fit_seconds=0.0, device="cpu",
    )


def build_net(kind: str, shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """A fresh (untrained) MLP or CNN for images of ``shape`` (C, H, W); the one constructor fitting
    and the classifier-IS cache (which reloads a saved state into it) both use."""
    c, h, w = shape
    if kind == "mlp":
        return MLP(c * h * w, num_classes)
    return CNN(c, h, w, num_classes)


def _evaluate(net: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int) -> tuple[float, float]:
    """Mean cross-entropy and accuracy of ``net`` on (x, y), in eval mode, no grad."""
    net.eval()
    loss_sum, correct = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(x), batch_size):
            logits = net(x[i : i + batch_size])
            yb = y[i : i + batch_size]
            loss_sum += float(nn.functional.cross_entropy(logits, yb, reduction="sum"))
            correct += int((logits.argmax(1) == yb).sum())
    return loss_sum / len(x), correct / len(x)


def _n_holdout(n: int, holdout: float) -> int:
    return int(round(holdout * n))


def max_batches(kind: str, n: int, max_epochs: int, *, holdout: float = HOLDOUT,
                batch_size: int = BATCH_SIZE) -> int | None:
    """Minibatches an MLP/CNN fit on ``n`` images runs at most (early stopping may end it sooner);
    None for logistic regression, which has no minibatches (a progress total)."""
    if kind == "logreg":
        return None
    return max_epochs * -(-(n - _n_holdout(n, holdout)) // batch_size)


def _fit_torch(
    kind: str, x: np.ndarray, y: np.ndarray, *, num_classes: int, seed: int, max_epochs: int, patience: int,
    holdout: float, batch_size: int, device: str, on_batch: Callable[[], None] | None = None,
) -> FittedClassifier:
    n = len(x)
    n_hold = _n_holdout(n, holdout)
    if n_hold < 1 or n - n_hold < 1:
        raise DataError(f"x_train has {n} images: too few to hold out {holdout:.0%} for early stopping")
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    hold_idx, fit_idx = perm[:n_hold], perm[n_hold:]
    dev = torch.device(device)
    xt = torch.from_numpy(x).to(dev)
    yt = torch.from_numpy(y).to(dev)
    x_fit, y_fit, x_hold, y_hold = xt[fit_idx], yt[fit_idx], xt[hold_idx], yt[hold_idx]

    torch.manual_seed(seed)  # weight init and dropout masks
    gen = torch.Generator(device="cpu").manual_seed(seed)  # minibatch order
    net = build_net(kind, tuple(x.shape[1:]), num_classes).to(dev)  # type: ignore[arg-type]
    opt = torch.optim.Adam(net.parameters())  # default parameters, as the authors' code

    best_loss, best_acc, best_epoch = float("inf"), 0.0, 0
    best_state = copy.deepcopy(net.state_dict())
    epoch = 0
    for epoch in range(1, max_epochs + 1):
        net.train()
        order = torch.randperm(len(x_fit), generator=gen).to(dev)
        for i in range(0, len(order), batch_size):
            idx = order[i : i + batch_size]
            loss = nn.functional.cross_entropy(net(x_fit[idx]), y_fit[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if on_batch is not None:
                on_batch()
        hold_loss, hold_acc = _evaluate(net, x_hold, y_hold, 1024)
        if not np.isfinite(hold_loss):
            break  # diverged: keep the best finite epoch
        # ICLR D.2: stop when the hold-out ACCURACY has not improved for `patience` epochs
        if best_epoch == 0 or hold_acc > best_acc:
            best_loss, best_acc, best_epoch = hold_loss, hold_acc, epoch
            best_state = copy.deepcopy(net.state_dict())
        elif epoch - best_epoch >= patience:
            break
    net.load_state_dict(best_state)
    net.eval()
    return FittedClassifier(
        kind=kind, model=net, image_shape=tuple(x.shape[1:]), num_classes=num_classes,  # type: ignore[arg-type]
        n_train=len(fit_idx), n_holdout=n_hold, epochs_run=epoch, best_epoch=best_epoch or None, iterations=None,
        converged=epoch - best_epoch >= patience,  # early stopping fired rather than the epoch cap
        holdout_loss=best_loss if best_epoch else None, holdout_accuracy=best_acc if best_epoch else None,
        fit_seconds=0.0, device=str(dev), holdout_indices=np.sort(hold_idx),
    )


# --------------------------------------------------------------------------- scoring


def predict(fitted: FittedClassifier, x: np.ndarray, *, batch_size: int = 1024,
            probabilities: bool = False) -> np.ndarray:
    """Class predictions (int64) for uint8 images of the shape the classifier was trained on; with
    ``probabilities``, the (N, K) softmax instead (what the classifier Inception Score reads)."""
    xf = to_unit_float(x)
    if isinstance(fitted.model, LogisticRegression):
        flat = xf.reshape(len(xf), -1)
        return fitted.model.predict_proba(flat) if probabilities else fitted.model.predict(flat).astype(np.int64)
    net: nn.Module = fitted.model
    net.eval()
    dev = torch.device(fitted.device)
    out = []
    with torch.no_grad():
        for i in range(0, len(xf), batch_size):
            logits = net(torch.from_numpy(xf[i : i + batch_size]).to(dev))
            out.append((logits.double().softmax(1) if probabilities else logits.argmax(1)).cpu().numpy())
    return np.concatenate(out) if probabilities else np.concatenate(out).astype(np.int64)


def score_classifier(fitted: FittedClassifier, x_test: np.ndarray, y_test: np.ndarray) -> float:
    """Accuracy on the test split: the ONLY function that reads the test arrays' contents.

    It takes a finished ``FittedClassifier``, so by construction it runs after model
    selection is over; nothing it computes flows back into training.
    """
    n, c, h, w = check_images_meta("x_test", x_test)
    check_labels_meta("y_test", y_test, n)
    if (c, h, w) != tuple(fitted.image_shape):
        raise DataError(f"x_test images are {(c, h, w)} but the classifier was trained on {tuple(fitted.image_shape)}")
    x = np.asarray(x_test)
    y = np.asarray(y_test).astype(np.int64)
    check_labels_values("y_test", y, fitted.num_classes)
    return float(np.mean(predict(fitted, x) == y))


def train_and_score(
    kind: str,
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    *,
    num_classes: int,
    seed: int,
    max_epochs: int = 100,
    patience: int = 10,
    holdout: float = HOLDOUT,
    batch_size: int = BATCH_SIZE,
    device: str = "cpu",
    logreg_max_iter: int = 5000,
    num_threads: int | None = None,
    on_batch: Callable[[], None] | None = None,
    on_fitted: Callable[[FittedClassifier], None] | None = None,
) -> dict[str, Any]:
    """Fit on the training split, then score once on the test split; return a JSON-able record.
    ``on_batch`` is called after every MLP/CNN minibatch (progress), ``on_fitted`` with the model.

    The test arrays' shape/dtype are checked before training (so a bad file fails in
    seconds, not after an hour of training) but no element is read until scoring.
    """
    n_tr, c, h, w = check_images_meta("x_train", x_train)
    n_te, ct, ht, wt = check_images_meta("x_test", x_test)
    check_labels_meta("y_test", y_test, n_te)
    if (c, h, w) != (ct, ht, wt):
        raise DataError(f"x_train images are {(c, h, w)} but x_test images are {(ct, ht, wt)}")
    start = time.perf_counter()
    fitted = fit_classifier(
        kind, x_train, y_train, num_classes=num_classes, seed=seed, max_epochs=max_epochs, patience=patience,
        holdout=holdout, batch_size=batch_size, device=device, logreg_max_iter=logreg_max_iter,
        num_threads=num_threads, on_batch=on_batch,
    )
    if on_fitted is not None:
        on_fitted(fitted)
    with _torch_threads(num_threads):
        accuracy = score_classifier(fitted, x_test, y_test)
    return {
        "kind": kind,
        "accuracy": accuracy,
        "n_train": fitted.n_train,
        "n_holdout": fitted.n_holdout,
        "n_test": n_te,
        "epochs_run": fitted.epochs_run,
        "best_epoch": fitted.best_epoch,
        "iterations": fitted.iterations,
        "converged": fitted.converged,
        "holdout_loss": fitted.holdout_loss,
        "holdout_accuracy": fitted.holdout_accuracy,
        "fit_seconds": fitted.fit_seconds,
        "wall_seconds": time.perf_counter() - start,
        "seed": seed,
        "max_epochs": max_epochs if kind != "logreg" else None,
        "patience": patience if kind != "logreg" else None,
        "device": fitted.device,
        "num_threads": num_threads if num_threads is not None else torch.get_num_threads(),
    }
