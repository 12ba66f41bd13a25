"""GS-WGAN's classifier zoo: the twelve scikit-learn-style models of its Table 1 protocol.

GS-WGAN (Chen, Orekondy, Fritz, NeurIPS 2020, arXiv:2006.08265) scores a generator by training "MLP,
CNN and 11 scikit-learn classifiers" on its samples and testing them on the real test split; "Avg Acc"
is their mean and "Calibrated Acc" the same normalised by real data (``dpsynth.evaluate.record``).
The twelve models and their settings below are those of the authors' ``evaluation/eval_sklearn.py``
(DingfanChen/GS-WGAN): the MLP of the table is scikit-learn's ``MLPClassifier`` with its defaults,
and the eleven others include XGBoost (scikit-learn's API, not its package). The CNN is not here: it
is the project's own (``classifiers``), already trained by every evaluate job.

Where today's libraries no longer offer the authors' setting the model says so in ``ZooModel.deviation``
(printed under the table and in docs/deviations.md): scikit-learn 1.6 removed AdaBoost's SAMME.R
(SAMME remains), and XGBoost 2 made ``hist`` its default tree method. A model whose package is not
installed is left out and named (``available_models``); none is substituted, since a different
model (e.g. HistGradientBoosting for GradientBoosting) would be a different column.

Like ``classifiers``, the test split cannot reach model fitting: ``fit_model`` takes training data
only, and ``zoo_scores`` scores each model once, after it is fitted. Images go in as scikit-learn
sees them in the authors' script: flattened, scaled to [0, 1].
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpsynth.data.dataset import Dataset, subset_indices
from dpsynth.errors import DataError
from dpsynth.evaluate.classifiers import to_unit_float
from dpsynth.progress import Progress


@dataclass(frozen=True)
class ZooModel:
    """One model of the zoo: how to build it (``build(seed, threads, num_classes)``), the authors'
    settings in words, and where ours cannot follow them (None: it does)."""

    name: str
    label: str
    settings: str
    build: Callable[[int, int, int], Any]
    deviation: str | None = None


def _logreg(seed: int, threads: int, k: int) -> Any:
    from sklearn.linear_model import LogisticRegression

    # the authors' multi_class='auto' is lbfgs's multinomial, scikit-learn's only choice since 1.7
    return LogisticRegression(solver="lbfgs", max_iter=5000, random_state=seed)


def _random_forest(seed: int, threads: int, k: int) -> Any:
    from sklearn.ensemble import RandomForestClassifier

    return RandomForestClassifier(n_estimators=100, class_weight="balanced", random_state=seed, n_jobs=threads)


def _gaussian_nb(seed: int, threads: int, k: int) -> Any:
    from sklearn.naive_bayes import GaussianNB

    return GaussianNB()


def _bernoulli_nb(seed: int, threads: int, k: int) -> Any:
    from sklearn.naive_bayes import BernoulliNB

    return BernoulliNB(binarize=0.5)


def _linear_svc(seed: int, threads: int, k: int) -> Any:
    from sklearn.svm import LinearSVC

    # the hinge loss has only the dual solver (the authors' scikit-learn default, dual=True)
    return LinearSVC(max_iter=10000, tol=1e-8, loss="hinge", dual=True, random_state=seed)


def _decision_tree(seed: int, threads: int, k: int) -> Any:
    from sklearn.tree import DecisionTreeClassifier

    return DecisionTreeClassifier(class_weight="balanced", criterion="gini", splitter="best", min_samples_split=2,
                                  min_samples_leaf=1, min_weight_fraction_leaf=0.0, min_impurity_decrease=0.0,
                                  random_state=seed)


def _lda(seed: int, threads: int, k: int) -> Any:
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

    return LinearDiscriminantAnalysis(solver="eigen", n_components=min(9, k - 1), tol=1e-8, shrinkage=0.5)


def _adaboost(seed: int, threads: int, k: int) -> Any:
    from sklearn.ensemble import AdaBoostClassifier

    return AdaBoostClassifier(n_estimators=100, random_state=seed)


def _mlp(seed: int, threads: int, k: int) -> Any:
    from sklearn.neural_network import MLPClassifier

    return MLPClassifier(random_state=seed)


def _bagging(seed: int, threads: int, k: int) -> Any:
    from sklearn.ensemble import BaggingClassifier

    return BaggingClassifier(max_samples=0.1, n_estimators=20, random_state=seed, n_jobs=1)


def _gbm(seed: int, threads: int, k: int) -> Any:
    from sklearn.ensemble import GradientBoostingClassifier

    return GradientBoostingClassifier(subsample=0.1, n_estimators=50, random_state=seed)


def _xgboost(seed: int, threads: int, k: int) -> Any:
    from xgboost import XGBClassifier

    return XGBClassifier(colsample_bytree=0.1, objective="multi:softprob", n_estimators=50, random_state=seed,
                         n_jobs=threads)


#: The authors' twelve, in their script's (sorted) order of names.
ZOO: dict[str, ZooModel] = {m.name: m for m in (
    ZooModel("adaboost", "AdaBoost", "100 estimators, SAMME.R", _adaboost,
             "SAMME, not the authors' SAMME.R (removed in scikit-learn 1.6)"),
    ZooModel("bagging", "Bagging", "20 trees on 10 % samples", _bagging),
    ZooModel("bernoulli_nb", "Bernoulli NB", "binarize 0.5", _bernoulli_nb),
    ZooModel("decision_tree", "Decision tree", "gini, balanced class weights", _decision_tree),
    ZooModel("gaussian_nb", "Gaussian NB", "defaults", _gaussian_nb),
    ZooModel("gbm", "Gradient boosting", "50 estimators, subsample 0.1", _gbm),
    ZooModel("lda", "LDA", "eigen solver, shrinkage 0.5, 9 components", _lda),
    ZooModel("linear_svc", "Linear SVM", "hinge loss, tol 1e-8, max_iter 10,000", _linear_svc),
    ZooModel("logistic_reg", "Logistic regression", "lbfgs, max_iter 5,000", _logreg),
    ZooModel("mlp", "MLP", "scikit-learn MLPClassifier defaults (100 ReLU, Adam, 200 epochs)", _mlp),
    ZooModel("random_forest", "Random forest", "100 trees, balanced class weights", _random_forest),
    ZooModel("xgboost", "XGBoost", "50 rounds, colsample_bytree 0.1, multi:softprob", _xgboost,
             "XGBoost 2's default tree method (hist), not 1.x's (approx/exact)"),
)}

#: The zoo's MLP: the table's "MLP Acc" column.
MLP = "mlp"


def available_models() -> tuple[list[str], dict[str, str]]:
    """(the zoo models that can run here, {left out: why}): only XGBoost is an optional package."""
    try:
        import xgboost  # noqa: F401
    except ImportError as exc:
        return [n for n in ZOO if n != "xgboost"], {"xgboost": f"the xgboost package is not installed ({exc})"}
    return list(ZOO), {}


def _flat(x: np.ndarray) -> np.ndarray:
    return to_unit_float(x).reshape(len(x), -1)


def fit_model(name: str, x_train: np.ndarray, y_train: np.ndarray, *, num_classes: int, seed: int,
              threads: int = 1, max_iter: int | None = None) -> tuple[Any, dict[str, Any]]:
    """Fit one zoo model on training images (uint8 (N, C, H, W)) only; return it and how the fit went
    ({"fit_seconds", "converged"}: False when the library warned that it stopped before converging,
    as the authors' LinearSVC and MLP settings often do). ``max_iter`` bounds the iterations of a model
    that has them (the authors' value when it is lower; the record's "max_iter" says which ran)."""
    from sklearn.exceptions import ConvergenceWarning
    from threadpoolctl import threadpool_limits

    if np.unique(y_train).size < 2:
        raise DataError(f"zoo model {name}: the training labels hold a single class")
    model = ZOO[name].build(seed, threads, num_classes)
    iterations = model.get_params().get("max_iter")
    if max_iter is not None and iterations is not None and max_iter < iterations:
        model.set_params(max_iter=max_iter)
        iterations = max_iter
    t0 = time.perf_counter()
    # BLAS and OpenMP pools follow the configured threads, like torch's: results may depend on them
    with threadpool_limits(limits=threads), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        model.fit(_flat(x_train), np.asarray(y_train).astype(np.int64))
    converged = not any(issubclass(w.category, ConvergenceWarning) for w in caught)
    info = {"fit_seconds": round(time.perf_counter() - t0, 3), "converged": converged}
    return model, info if iterations is None else {**info, "max_iter": int(iterations)}


def score_model(model: Any, x_test: np.ndarray, y_test: np.ndarray, *, threads: int = 1) -> float:
    """Accuracy of a fitted zoo model on the test split: the only place the zoo reads test images."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=threads):
        pred = np.asarray(model.predict(_flat(x_test))).astype(np.int64)
    return float(np.mean(pred == np.asarray(y_test).astype(np.int64)))


def zoo_scores(train_sets: list[tuple[np.ndarray, np.ndarray]], real: Dataset, *, n_train: int | None,
               seed: int = 0, threads: int = 1, models: list[str] | None = None,
               max_iter: int | None = None, show_scores: bool = True) -> dict[str, Any]:
    """Every available zoo model trained on each set (its first ``n_train`` records as
    ``subset_indices`` draws them with seed + k, the draw every classifier of the project makes) and
    scored on the real test split; ``max_iter``: see ``fit_model``. ``show_scores`` False: the progress
    lines name each model but not its accuracy (sets of real records: job logs are not private).

    Returns {"models": {name: {"mean", "std", "n", "values", "runs"}}, "per_set": [{name: accuracy}],
    "n_train", "left_out": {name: why}, "deviations": {name: what}, "seconds"}."""
    from dpsynth.evaluate.record import mean_std

    names, left_out = available_models()
    if models is not None:
        unknown = sorted(set(models) - set(ZOO))
        if unknown:
            raise DataError(f"unknown zoo model(s) {unknown}; known: {', '.join(ZOO)}")
        names = [n for n in names if n in models]
    t0 = time.perf_counter()
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    sizes = []
    with Progress(len(names) * len(train_sets), "classifier zoo", unit="model", bar=False) as bar:
        for k, (x, y) in enumerate(train_sets):
            idx = subset_indices(len(x), n_train, seed + k)
            xs, ys = (x, y) if idx is None else (x[idx], y[idx])
            sizes.append(len(xs))
            for name in names:
                model, info = fit_model(name, xs, ys, num_classes=real.num_classes, seed=seed + k, threads=threads,
                                        max_iter=max_iter)
                acc = score_model(model, real.x_test, real.y_test, threads=threads)
                runs[name].append({"accuracy": acc, "n_train": len(xs), "seed": seed + k, **info})
                bar.update()
                bar.set(model=name, **({"accuracy": acc} if show_scores else {}))
    return {
        "models": {n: {**mean_std([r["accuracy"] for r in runs[n]]), "label": ZOO[n].label,
                       "settings": ZOO[n].settings, "runs": runs[n]} for n in names},
        "per_set": [{n: runs[n][k]["accuracy"] for n in names} for k in range(len(train_sets))],
        "n_train": sizes[0] if sizes else 0, "n_test": int(len(real.x_test)), "max_iter": max_iter,
        "left_out": left_out,
        "deviations": {n: ZOO[n].deviation for n in names if ZOO[n].deviation},
        "seconds": round(time.perf_counter() - t0, 2),
    }
