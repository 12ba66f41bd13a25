"""Where each stage writes what the report reads: one place, so the CLI, the report, the
Snakefile and dvc.yaml cannot drift apart (tests/test_workflow_sync.py checks the workflows).

Released and private outputs are kept apart by root: ``models/``, ``data/synthetic/``,
``data/privatized/`` and ``results/`` may be shared; ``private/`` (checkpoints, diagnostics logs,
warm-start critics) and ``data/raw``, ``data/processed`` (the private data) may not. What may leave
the machine is decided HERE, once (:func:`release_rule`): the DVC generator derives every ``push: false``
and ``cache: false`` from it, so a new output cannot be pushed because someone forgot a flag.

Everything per run lives under ``results/runs/{experiment}/`` and every real-data row under
``results/real/{dataset}/``: DVC's report stage can then depend on those two folders and so
picks up every target and every sweep cell without listing them (dvc.yaml cannot interpolate
a list into ``deps``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["RUNS", "REAL", "W2_NOISE", "PRIVATE", "NOISE_FREE", "OUTSIDE_GUARANTEE", "ReleaseRule", "release_rule",
           "run_dir", "metrics_file", "samples_png", "real_metrics_file", "w2_noise_csv", "w2_noise_samples",
           "w2_noise_runs_dir", "warmstart_dir", "private_run_dir", "w2_train_file", "gswgan_train_file",
           "fid_reference_dir", "is_classifier_dir", "PUBLIC_TRAINING_SPLIT", "privatized_file"]

RUNS = "runs"
REAL = "real"
W2_NOISE = "w2_noise"
WARMSTART = "warmstart"
FID_REFERENCE = "fid_reference"
IS_CLASSIFIER = "is_classifier"
#: The private root's default name (``--private-out``): nothing under it is cached by DVC or pushed.
PRIVATE = "private"
#: The label every statistic of the private records computed without noise carries wherever it is shown.
OUTSIDE_GUARANTEE = "computed on the private records without noise: outside the privacy guarantee"
#: The label a statistic of a dataset's TRAINING records carries in a released file: only a dataset that
#: ``data.public`` declares public (a benchmark whose records anyone can download) may have one there.
PUBLIC_TRAINING_SPLIT = ("computed on the training records without noise, released only because data.public "
                         "declares this dataset public: outside the privacy guarantee")

#: Outputs computed on the real records WITHOUT noise (the prepared records and their label counts and raw
#: hashes, the real-data rows, the W2-vs-noise sweep of seeded, non-private noise): kept on this machine,
#: never pushed, whatever the dataset. (Relative to the project root, as dvc.yaml names them.)
NOISE_FREE = ("data/raw", "data/processed", f"results/{REAL}", f"results/{W2_NOISE}")
#: Locally privatized records (``data/privatized/<run>.npz``): the local mechanism noises each record, but the
#: file keeps the records' labels in clear, a noise-free statistic of the training records (its ``.json``, the
#: privacy report, is released).
CLEAR_LABELS = "data/privatized"
#: The report's folders: they quote the real-data rows, the W2-vs-noise sweep and clean records of the test
#: split (the wavelet figure's clean column). Never pushed, whatever ``data.public`` says: a flag that followed
#: it would be written when dvc.yaml is generated, and `dvc push` sends what the last run made under the flags
#: dvc.yaml holds then -- so un-declaring a dataset and pushing before regenerating and re-running would send
#: tables made while it was public. The report is rebuilt from the pushed runs in seconds (`dpsynth report`).
#: ``results/report.html`` (the one-page report, ``snakemake --report``) embeds those tables and the real-data
#: rows: no DVC output today, but named here so that none that makes it one could push it.
REPORT_OUTPUTS = ("results/tables", "results/figures", "results/report.html")


@dataclass(frozen=True)
class ReleaseRule:
    """What may be done with one output: ``cache`` (DVC may keep a copy in its local cache) and ``push``
    (``dvc push`` may send it to a remote); ``why`` says why not, for dvc.yaml's readers."""

    cache: bool
    push: bool
    why: str = ""


def _under(path: str, root: str) -> bool:
    parts, head = Path(path).parts, Path(root).parts
    return parts[:len(head)] == head


def release_rule(path: str) -> ReleaseRule:
    """The one rule for an output ``path`` (project-relative, as dvc.yaml writes it; ``${...}`` templates fine).

    - under ``private/``: neither cached nor pushed (checkpoints with the secret noise state, critics and
      diagnostics trained or computed on the private data, the W2 to a cell's own clean training records);
    - :data:`NOISE_FREE`, and the privatized records (labels in clear, :data:`CLEAR_LABELS`): cached (an old
      commit's numbers stay readable here) but never pushed;
    - the report's folders (:data:`REPORT_OUTPUTS`): cached, never pushed -- they quote the noise-free rows, and
      no flag that follows ``data.public`` holds in every order of edits, runs and pushes;
    - anything else (models, privacy reports, privatized and synthetic data, the runs' metrics): released."""
    if _under(path, PRIVATE):
        return ReleaseRule(False, False, "private: trained or computed on the private data, or secret noise state")
    if any(_under(path, root) for root in NOISE_FREE):
        return ReleaseRule(True, False, OUTSIDE_GUARANTEE)
    if _under(path, CLEAR_LABELS) and path.endswith(".npz"):
        return ReleaseRule(True, False, "the privatized records' labels are in clear (" + OUTSIDE_GUARANTEE + ")")
    if any(_under(path, root) for root in REPORT_OUTPUTS):
        return ReleaseRule(True, False, "quotes noise-free rows (real data, the W2 sweep); rebuilt from the pushed "
                           "runs by `dpsynth report`")
    return ReleaseRule(True, True)


def run_dir(results: str | Path, experiment: str) -> Path:
    return Path(results) / RUNS / experiment


def metrics_file(results: str | Path, experiment: str) -> Path:
    return run_dir(results, experiment) / "metrics.json"


def samples_png(results: str | Path, experiment: str) -> Path:
    return run_dir(results, experiment) / "samples.png"


def real_metrics_file(results: str | Path, dataset: str) -> Path:
    return Path(results) / REAL / dataset / "metrics.json"


def privatized_file(data_root: str | Path, experiment: str) -> Path:
    """A local-DP run's privatized records, the privatize stage's output (``{data.root}/privatized/<run>.npz``, its
    privacy report beside it as ``.json``): what the run trains on, and what the evaluate stage fits the run's
    trivial private baselines to."""
    return Path(data_root) / "privatized" / f"{experiment}.npz"


def w2_noise_csv(results: str | Path, dataset: str) -> Path:
    return Path(results) / W2_NOISE / f"{dataset}.csv"


def w2_noise_samples(csv_path: str | Path) -> Path:
    """Beside a W2 sweep's CSV: each run's generated records, for the report's sample grids (outside the guarantee
    like the CSV: the sweep trains on the clean training records with seeded noise)."""
    p = Path(csv_path)
    return p.with_name(p.stem + "_samples.npz")


def warmstart_dir(private: str | Path, name: str) -> Path:
    """GS-WGAN's warm-started critics of experiment ``name`` (a static path a workflow can name).

    Under the PRIVATE root: the critics are trained without noise on the private data."""
    return Path(private) / WARMSTART / name


def private_run_dir(private: str | Path, experiment: str) -> Path:
    """A training run's private files: its checkpoint (secret noise state) and diagnostics log."""
    return Path(private) / RUNS / experiment


def w2_train_file(private: str | Path, experiment: str) -> Path:
    """The W2 between a run's synthetic sets and its OWN clean training records (Reshetova et al. Fig. 11's
    "train" curve): a statistic of the private records without noise, so under the PRIVATE root, beside the
    run's checkpoint, and in no released file (``release_rule``)."""
    return private_run_dir(private, experiment) / "w2_train.json"


def gswgan_train_file(private: str | Path, experiment: str) -> Path:
    """GS-WGAN's protocol computed on a run's real TRAINING split (its classifier IS, whose network is trained
    on those records, and the FID, KID and FID-infinity against them) for a dataset ``data.public`` does not
    declare public: statistics of the private records without noise, so under the PRIVATE root, beside the
    run's checkpoint, and in no released file (the run's metrics.json names this path instead)."""
    return private_run_dir(private, experiment) / "gswgan_train.json"


def w2_noise_runs_dir(private: str | Path, dataset: str) -> Path:
    """The W2-vs-noise sweep's finished runs (one row each), so an interrupted sweep resumes: under the
    PRIVATE root, as a training run's checkpoint is (trained on the clean records with seeded noise)."""
    return Path(private) / W2_NOISE / dataset


def fid_reference_dir(private: str | Path) -> Path:
    """Cached Inception statistics of the real test splits (FID's reference), shared by evaluate jobs.

    Under the PRIVATE root: they are computed from the real data (a curator's test split may be private)."""
    return Path(private) / FID_REFERENCE


def is_classifier_dir(private: str | Path) -> Path:
    """Cached classifiers of GS-WGAN's Inception Score (one per dataset and setting), shared by evaluate jobs.

    Under the PRIVATE root: each was trained on a real training split."""
    return Path(private) / IS_CLASSIFIER
