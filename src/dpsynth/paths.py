"""Where each stage writes what the report reads: one place, so the CLI, the report, the
Snakefile and dvc.yaml cannot drift apart (tests/test_workflow_sync.py checks the workflows).

Released and private outputs are kept apart by root: ``models/``, ``data/synthetic/``,
``data/privatized/`` and ``results/`` may be shared; ``private/`` (checkpoints, diagnostics logs,
warm-start critics) and ``data/raw``, ``data/processed`` (the private data) may not.

Everything per run lives under ``results/runs/{experiment}/`` and every real-data row under
``results/real/{dataset}/``: DVC's report stage can then depend on those two folders and so
picks up every target and every sweep cell without listing them (dvc.yaml cannot interpolate
a list into ``deps``).
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["RUNS", "REAL", "W2_NOISE", "run_dir", "metrics_file", "samples_png", "real_metrics_file",
           "w2_noise_csv", "warmstart_dir", "private_run_dir",
           "fid_reference_dir", "is_classifier_dir"]

RUNS = "runs"
REAL = "real"
W2_NOISE = "w2_noise"
WARMSTART = "warmstart"
FID_REFERENCE = "fid_reference"
IS_CLASSIFIER = "is_classifier"


def run_dir(results: str | Path, experiment: str) -> Path:
    return Path(results) / RUNS / experiment


def metrics_file(results: str | Path, experiment: str) -> Path:
    return run_dir(results, experiment) / "metrics.json"


def samples_png(results: str | Path, experiment: str) -> Path:
    return run_dir(results, experiment) / "samples.png"


def real_metrics_file(results: str | Path, dataset: str) -> Path:
    return Path(results) / REAL / dataset / "metrics.json"


def w2_noise_csv(results: str | Path, dataset: str) -> Path:
    return Path(results) / W2_NOISE / f"{dataset}.csv"


def warmstart_dir(private: str | Path, name: str) -> Path:
    """GS-WGAN's warm-started critics of experiment ``name`` (a static path a workflow can name).

    Under the PRIVATE root: the critics are trained without noise on the private data."""
    return Path(private) / WARMSTART / name


def private_run_dir(private: str | Path, experiment: str) -> Path:
    """A training run's private files: its checkpoint (secret noise state) and diagnostics log."""
    return Path(private) / RUNS / experiment


def fid_reference_dir(private: str | Path) -> Path:
    """Cached Inception statistics of the real test splits (FID's reference), shared by evaluate jobs.

    Under the PRIVATE root: they are computed from the real data (a curator's test split may be private)."""
    return Path(private) / FID_REFERENCE


def is_classifier_dir(private: str | Path) -> Path:
    """Cached classifiers of GS-WGAN's Inception Score (one per dataset and setting), shared by evaluate jobs.

    Under the PRIVATE root: each was trained on a real training split."""
    return Path(private) / IS_CLASSIFIER
