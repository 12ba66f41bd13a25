"""The columns of a ``protocol: gs_wgan`` methods table: GS-WGAN's Table 1 (Chen, Orekondy, Fritz,
NeurIPS 2020, arXiv:2006.08265) -- IS, FID, MLP Acc, CNN Acc, Avg Acc, Calibrated Acc -- ours from each
run's ``protocols.gs_wgan`` record (``dpsynth.evaluate.gswgan_protocol``) beside the paper's, and the
notes that say how ours were computed and where they differ from the authors' scripts.

Accuracies are printed as fractions, as the paper prints them; Calibrated Acc in percent. Calibrated
Acc is the one cell made here: it needs the table's real-data row as well as the run
(``record.calibrated_accuracy``). IS and FID (with KID and FID-infinity) are computed on the real training
split: a run's record holds them only for a dataset declared public (``data.public``), labelled so, and the
notes say it; otherwise its cells read ``KEPT_PRIVATE`` and the notes name where they are kept."""

from __future__ import annotations

from typing import Any

from dpsynth.evaluate.record import GS_WGAN, GSWGAN_CNN, REAL_DATA, calibrated_accuracy
from dpsynth.paths import PUBLIC_TRAINING_SPLIT
from dpsynth.report.runs import (
    NOT_EVALUATED,
    NOT_RUN,
    SMALL_N_METRICS,
    UNAVAILABLE,
    Run,
    fmt_summary,
    small_n_cell,
)

#: The cell of a training-split statistic a run's record does not release (its dataset is not declared public).
KEPT_PRIVATE = "kept private (not declared public)"

#: Column id (published.yaml's) -> label. "fid" is against the real TRAINING split here.
GSWGAN_METRICS = {"is": "IS", "fid": "FID", "mlp": "MLP Acc", "cnn": "CNN Acc", "avg": "Avg Acc",
                  "calibrated": "Calibrated Acc (%)"}


def protocol_record(run: Run | None) -> dict[str, Any] | None:
    """The run's ``protocols.gs_wgan`` record; None when it was evaluated without it."""
    protocols = run.metrics.get("protocols") if run is not None else None
    rec = protocols.get(GS_WGAN) if isinstance(protocols, dict) else None
    return rec if isinstance(rec, dict) else None


def gswgan_cell(run: Run | None, real: Run | None, metric: str) -> str:
    """One of our cells of ``GSWGAN_METRICS``, or the reason there is none (the notes say more)."""
    if run is None:
        return NOT_RUN
    rec = protocol_record(run)
    if rec is None:
        return NOT_EVALUATED
    if metric in SMALL_N_METRICS:  # KID / FID-infinity against the training split, beside its FID
        ft = rec["fid_train"]
        if "private" in ft:
            return KEPT_PRIVATE
        return small_n_cell(ft, metric, f"{run.path}: protocols.gs_wgan.fid_train") if ft.get("available") \
            else UNAVAILABLE
    if metric in ("is", "fid"):
        sub = rec["is" if metric == "is" else "fid_train"]
        if "private" in sub:
            return KEPT_PRIVATE
        return fmt_summary([sub], digits=2) if sub.get("available") else UNAVAILABLE
    if metric == "mlp":
        sub = rec["zoo"]["models"].get(rec["accuracy"].get("mlp") or "mlp")
    elif metric == "cnn":
        sub = (run.metrics.get("classifiers") or {}).get(GSWGAN_CNN)
    elif metric == "avg":
        sub = rec["accuracy"]["avg"]
    else:
        real_rec = protocol_record(real)
        if real_rec is None:
            return UNAVAILABLE
        cal = calibrated_accuracy(rec, real_rec)
        return UNAVAILABLE if not cal["models"] else fmt_summary([cal], scale=100.0, digits=1)
    return NOT_EVALUATED if not isinstance(sub, dict) else fmt_summary([sub], digits=2)


def _group(runs: list[Run | None], key: Any) -> dict[Any, list[str]]:
    """Run names by ``key(run's protocol record)`` (one note per distinct protocol, as the FID notes do)."""
    seen: dict[Any, list[str]] = {}
    for run in runs:
        rec = protocol_record(run)
        if run is not None and rec is not None:
            seen.setdefault(key(run, rec), []).append(run.name)
    return seen


def gswgan_notes(rows_runs: list[tuple[str, Run | None]], real: Run | None, dataset: str | None) -> list[str]:
    """How our cells were computed (sizes read from the records, not the configuration: a cell states
    what produced it), where the authors' scripts differ, and why a cell is unavailable."""
    runs = [run for _, run in rows_runs]
    kept = [run for run in runs if "private" in ((protocol_record(run) or {}).get("is") or {})]
    shown = [run for run in runs if run not in kept]
    notes = []
    if kept:
        where = ", ".join(str((protocol_record(run) or {})["is"]["private"]) for run in kept if run is not None)
        notes.append(f"IS, FID, KID (×10³) and FID∞ ours of {', '.join(r.name for r in kept if r is not None)}: "
                     f"{KEPT_PRIVATE} -- GS-WGAN's protocol computes them on the real training split (the IS "
                     "network is trained on it, FID compares with it), without noise; data.public does not declare "
                     f"{dataset or 'this dataset'} public, so they are kept under the private root ({where}), "
                     "outside the privacy guarantee, and no released file holds them")
    public_runs = [run.name for run in shown if run is not None and run.metrics.get("method") != REAL_DATA
                   and (protocol_record(run) or {}).get("is", {}).get("privacy") == PUBLIC_TRAINING_SPLIT]
    if public_runs:
        notes.append(f"IS, FID, KID (×10³) and FID∞ ours of {', '.join(public_runs)}: computed on the real "
                     f"training split of {dataset or 'this dataset'} without noise, shown because data.public "
                     "declares it public (a public benchmark, as in GS-WGAN's Table 1): outside the privacy guarantee")
    for (n_is, clf_n, epochs, hold), names in _group(shown, lambda run, rec: (
            rec["is"].get("n_images"), rec["is"].get("classifier", {}).get("n_train"),
            rec["is"].get("classifier", {}).get("max_epochs"),
            rec["is"].get("classifier", {}).get("holdout_accuracy"))).items():
        hold_txt = f", hold-out accuracy {hold:.3f}" if isinstance(hold, float) else ""
        notes.append(f"IS ours ({', '.join(names)}): GS-WGAN's classifier Inception Score -- exp(E KL(p(y|x) || "
                     f"p(y))) over 10 splits of {n_is} shuffled generated images (the Real data row: real test "
                     f"images), counts as in every cell -- with a classifier trained on the real "
                     f"training split: the project's CNN (the Real data row's own fit: {clf_n} images, at most "
                     f"{epochs} epochs{hold_txt}), not the authors' VGG11 (SGD, crops and flips, 50 epochs); "
                     "a confident generator of 10 balanced classes scores 10, one repeated image 1")
    for (n_gen, n_ref), names in _group(shown, lambda run, rec: (
            rec["fid_train"].get("n_generated"), rec["fid_train"].get("n_reference"))).items():
        if n_gen is not None:
            notes.append(f"FID ours ({', '.join(names)}): {n_gen} generated images (the Real data row: real test "
                         f"images) against the first {n_ref} images of the real TRAINING split, as GS-WGAN's "
                         "eval_fid.py compares them (20,000 against the whole training split, 60,000), with the TF "
                         "Inception of every FID here; FID is biased upward at small N. KID (×10³), FID∞, "
                         "precision and recall ours: from the same features against the same training images (no "
                         "paper column: GS-WGAN reports none of them), KID unbiased at any N, FID∞ extrapolating "
                         "the generated side only, precision and recall (Kynkäänniemi et al., NeurIPS 2019, "
                         "arXiv:1904.06991; k = 3) on equal counts, the smaller of the two")
    for (n_models, n_train, n_test, max_iter, left, devs), names in _group(runs, lambda run, rec: (
            len(rec["accuracy"]["models"]), rec["zoo"].get("n_train"), rec["zoo"].get("n_test"),
            rec["zoo"].get("max_iter"), tuple(sorted(rec["accuracy"].get("missing", {}).items())),
            tuple(sorted(rec["zoo"].get("deviations", {}).items())))).items():
        part = [f"Accuracies ours ({', '.join(names)}): trained on {n_train} images of each synthetic set (the "
                f"Real data row: real training images; the paper: 60,000) and scored on "
                f"{f'{n_test} images of ' if n_test else ''}the real test split, printed "
                "as fractions like the paper. MLP Acc: scikit-learn's MLPClassifier with its defaults (the authors' "
                "'MLP'); CNN Acc: the project's CNN (ICLR App. D.2, Adam, early stopping; its own training size "
                "and epochs, as in the other tables), not the authors' LeNet-5 (SGD, 50 epochs); Avg Acc: the mean "
                f"over {n_models} models -- GS-WGAN's 'MLP, CNN and 11 scikit-learn classifiers' (logistic "
                "regression, random forest, Gaussian and Bernoulli naive Bayes, linear SVM, decision tree, LDA, "
                "AdaBoost, bagging, gradient boosting, XGBoost) at the settings of the authors' eval_sklearn.py"]
        if max_iter:
            part.append(f"iterative models stopped at {max_iter} iterations at most (the authors': linear SVM "
                        "10,000, logistic regression 5,000, MLP 200 epochs)")
        part += [f"left out: {m} ({why})" for m, why in left]
        part += [f"{m}: {what}" for m, what in devs]
        notes.append("; ".join(part))
    if protocol_record(real) is None:
        notes.append(f"Calibrated Acc ours unavailable: the Real data row of {dataset or 'this dataset'} "
                     + ("has not been run" if real is None else "was evaluated without GS-WGAN's protocol")
                     + " (it needs the models' accuracies when trained on real data)")
    else:
        notes.append("Calibrated Acc ours: per synthetic set, the mean over the models of (accuracy when trained on "
                     "the synthetic set) / (the same model's accuracy when trained on the same number of real "
                     "training images, the Real data row), in percent; the Real data row reads 100 % by construction. "
                     "Our reading of the paper's 'averaged accuracy normalized by the accuracy when trained on real "
                     "data': the ratio of its printed Avg Acc values cannot give its printed Calibrated Acc (G-PATE, "
                     "MNIST: 0.34 / 0.88 is at most 39.4 % for any unrounded values; printed 40 %)")
    for label, run in rows_runs:
        rec = protocol_record(run)
        if run is not None and rec is not None and not rec["fid_train"].get("available") and run not in kept:
            notes.append(f"FID unavailable for {label} ({run.name}): {rec['fid_train'].get('reason')}")
        elif run is not None and rec is None:
            notes.append(f"{label} ({run.name}): not evaluated with GS-WGAN's protocol (re-run `dpsynth evaluate` "
                         "now that this table lists it)")
    return notes
