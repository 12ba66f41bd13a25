"""GS-WGAN's own evaluation protocol (Chen, Orekondy, Fritz, NeurIPS 2020, arXiv:2006.08265, Table 1),
computed beside the project's for the runs and real-data rows of a ``protocol: gs_wgan`` table.

Its columns and where each is computed:

- **IS**: the classifier Inception Score (``classifier_is``): a CNN trained on the real training split,
  10 splits, on the generated images (a real row: the real test split).
- **FID**: against the real TRAINING split (the authors' ``eval_fid.py``: 20,000 generated images
  against the whole training split), from the Inception features the project's test-split FID
  already computed (``metrics.fid_scores(train_fid=...)``): no second Inception pass over a set.
- **MLP Acc**: the zoo's scikit-learn MLP; **CNN Acc**: the project's CNN (``classifiers``).
- **Avg Acc**: the mean over the zoo's twelve models and the CNN (``zoo``; ``record.average_accuracy``).
- **Calibrated Acc**: needs the real-data row, so the report computes it from both records
  (``record.calibrated_accuracy``).

The record goes into ``metrics.json`` under ``protocols.gs_wgan`` (``record.MetricsRecord``). IS and FID are
statistics of the real TRAINING records without noise (the IS network is fitted on them, FID compares with
them), so a run's metrics.json never holds them: they stay under the private root (``release_training_split``),
and the report shows them, labelled ``paths.PUBLIC_TRAINING_SPLIT``, only where ``data.public`` declares the
dataset public when the report is built (``publish_training_split``). Deciding it there, not when the run is
evaluated, means no order of declaring, evaluating, un-declaring and pushing puts them in a pushed file.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from dpsynth.data.dataset import Dataset, subset_indices
from dpsynth.evaluate.classifier_is import ISClassifierCache, classifier_is
from dpsynth.evaluate.record import GSWGAN_CNN, average_accuracy
from dpsynth.evaluate.zoo import MLP, zoo_scores
from dpsynth.paths import OUTSIDE_GUARANTEE

#: The parts of the record computed on the real TRAINING split: the classifier IS (its network is trained on
#: those records; its record carries that network's hold-out accuracy on them) and FID, KID and FID-infinity
#: against them. Everything else is computed on synthetic data and scored on the held-out test split.
TRAINING_SPLIT_KEYS = ("is", "fid_train")

SOURCE = ("GS-WGAN (Chen, Orekondy, Fritz, NeurIPS 2020, arXiv:2006.08265) Table 1, as the authors' "
          "evaluation/ scripts compute it (DingfanChen/GS-WGAN)")


@dataclass(frozen=True)
class GsWganSettings:
    """One evaluate job's GS-WGAN protocol: the scale's sizes (``config.scales.GsWganEvalSizes``), the IS
    network's cache, the CPU threads. ``fid_train_reference`` None: the whole training split. The zoo is
    scored on the test images the project's classifiers are scored on (``test_subset``, the preset's
    ``classifier_test_subset``: the same draw), so every column of Avg Acc reads the same images."""

    zoo_train_subset: int | None
    is_samples: int | None
    fid_generated: int
    fid_train_reference: int | None
    is_cache: ISClassifierCache
    threads: int = 1
    zoo_max_iter: int | None = None
    test_subset: int | None = None

    @classmethod
    def from_preset(cls, sizes: Any, real: Dataset, *, cache_dir: str | Path | None, classifier_max_epochs: int,
                    classifier_train_subset: int | None, threads: int,
                    classifier_test_subset: int | None = None, device: str = "cpu") -> GsWganSettings:
        """From the scale preset: its ``gs_wgan_eval`` sizes, and the classifier settings the IS network
        shares with the real-data row's CNN (so that row's fit is the network: ``ISClassifierCache``); the
        IS network on ``device`` (the zoo is scikit-learn's, on the CPU)."""
        cache = ISClassifierCache(real, cache_dir, max_epochs=classifier_max_epochs,
                                  train_subset=classifier_train_subset, device=device)
        ref = sizes.fid_train_reference
        return cls(sizes.zoo_train_subset, sizes.is_samples, sizes.fid_generated,
                   None if ref == "all" else int(ref), cache, threads, sizes.zoo_max_iter, classifier_test_subset)

    @property
    def train_fid(self) -> tuple[int, int | None]:
        """(generated images, real training images) of the training-split FID (``metrics.fid_scores``)."""
        return self.fid_generated, self.fid_train_reference

    def sizes(self) -> dict[str, Any]:
        return {"zoo_train_subset": self.zoo_train_subset, "is_samples": self.is_samples,
                "fid_generated": self.fid_generated, "fid_train_reference": self.fid_train_reference or "all",
                "zoo_max_iter": self.zoo_max_iter, "zoo_test_subset": self.test_subset}


def gswgan_scores(train_sets: list[tuple[np.ndarray, np.ndarray]], is_sets: list[np.ndarray], real: Dataset,
                  settings: GsWganSettings, *, cnn: dict[str, Any] | None, fid_train: dict[str, Any] | None,
                  seed: int = 0, show_scores: bool = True) -> dict[str, Any]:
    """The ``protocols.gs_wgan`` record of one run (or real row): the zoo trained on ``train_sets``, the
    IS of ``is_sets``, the training-split FID computed by ``fid_scores`` (``fid_train``; None: not
    available), and the per-set accuracies of every model with the CNN's (``cnn``: the project's
    ``classifiers["cnn"]`` record) and their average. ``show_scores`` False: the zoo's progress lines leave
    its accuracies out (a real-data row's, which no released file holds: job logs are not private)."""
    t0 = time.perf_counter()
    idx = subset_indices(len(real.x_test), settings.test_subset, seed)  # classifier_scores' draw
    scored_on = real if idx is None else replace(real, x_test=real.x_test[idx], y_test=real.y_test[idx])
    zoo = zoo_scores(train_sets, scored_on, n_train=settings.zoo_train_subset, seed=seed, threads=settings.threads,
                     max_iter=settings.zoo_max_iter, show_scores=show_scores)
    t1 = time.perf_counter()
    inception = classifier_is(is_sets, settings.is_cache, n_images=settings.is_samples, seed=seed)
    t2 = time.perf_counter()
    per_set = [dict(accs) for accs in zoo["per_set"]]
    if cnn is not None:
        for k, acc in enumerate(cnn["values"]):
            per_set[k][GSWGAN_CNN] = float(acc)
    models = list(per_set[0]) if per_set else []
    return {
        "source": SOURCE, "sizes": settings.sizes(),
        "is": inception,
        "fid_train": fid_train if fid_train is not None else
        {"available": False, "reason": "no Inception weights (see the fid record's reason)"},
        "zoo": zoo,
        "accuracy": {"models": models, "mlp": MLP, "cnn": GSWGAN_CNN if cnn is not None else None,
                     "per_set": per_set, "avg": average_accuracy(per_set),
                     "missing": {**zoo["left_out"], **({} if cnn is not None else
                                                       {GSWGAN_CNN: "cnn is not in evaluation.classifiers"})}},
        "seconds": {"zoo": round(t1 - t0, 2), "is": round(t2 - t1, 2),
                    "is_classifier": inception["classifier"]["seconds"]},
    }


def release_training_split(record: dict[str, Any], *, dataset: str,
                           private_path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a run's ``protocols.gs_wgan`` record into what its released metrics.json may hold and what stays
    under the private root, whatever ``data.public`` says: the training-split parts (``TRAINING_SPLIT_KEYS``)
    are replaced by "not available" records naming ``private_path``, where the stage writes them (labelled
    outside the guarantee). The report puts them back for a dataset declared public when it is built
    (``report.runs.RunStore.load_all``, labelled ``paths.PUBLIC_TRAINING_SPLIT``); no released file holds them."""
    what = {"is": "the classifier IS (its network is trained on the real training split)",
            "fid_train": "FID, KID and FID-infinity against the real training split"}
    released = {k: {"available": False, "private": private_path,
                    "reason": f"{what[k]}: computed on {dataset}'s training records without noise, so kept under "
                              f"the private root ({private_path}) and in no released file; the report shows it "
                              f"where data.public declares {dataset} public"} for k in TRAINING_SPLIT_KEYS}
    kept = {"dataset": dataset, "privacy": OUTSIDE_GUARANTEE, **{k: record[k] for k in TRAINING_SPLIT_KEYS}}
    return {**record, **released}, kept
