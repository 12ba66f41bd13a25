"""The privatize stage (`dpsynth privatize EXPERIMENT`): local DP, once per record, before training
(Reshetova et al. (arXiv:2306.09547)).

Reads ``{data.root}/processed/{dataset}.npz``, maps the training records to the method's
record space (``entropic_wgan.to_records``: images to [-1, 1], flattened), applies the
experiment's ``local:`` mechanism with noise from fresh OS entropy (``privacy_noise: secret``, the
default; ``reproducible`` uses ``local.seed`` and labels the output not private), and writes

- ``{data.root}/privatized/{experiment}.npz``: ``x_train`` float32 (N, D) privatized records
  (DCT coefficients when ``local.dct``), ``y_train``, an EMPTY test split, ``num_classes``;
- ``{data.root}/privatized/{experiment}.json``: the privacy report (epsilon, delta, radius,
  both sensitivity conventions, noise scale, noise mode, record count, record space) -- never a seed.

Only the privatized records flow on: the train stage reads this file, never the processed
one, for experiments with ``local:``. The test split is dropped here (the evaluation reads
the clean test split from the processed file itself). The stale JSON is removed first and
written last, so a JSON always describes a complete npz. Two secret runs give different noise;
two reproducible runs the same bytes.

Each privatization is a release of every record, recorded in the release ledger (``privacy.ledger_store``,
outside the workspace): reserved before the records are read -- its dataset's total budget checked under the
ledger's lock -- and confirmed once both files are written, or marked failed (still counted) if the job fails
after drawing its noise.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpsynth.errors import ConfigError, DpsynthError, PrivacyError
from dpsynth.stages.common import CLEANED_FOLDERS, DEFAULT_PARAMS, finish, prepare_cpu, get_experiment

if TYPE_CHECKING:
    from dpsynth.config import Params


def privatized_paths(root: Path, experiment: str) -> tuple[Path, Path]:
    return root / "privatized" / f"{experiment}.npz", root / "privatized" / f"{experiment}.json"


def privatize(params: Params, experiment: str, source: str = DEFAULT_PARAMS) -> dict[str, Any]:
    """Privatize one experiment's training records; return the report that was written. ``source`` names the
    parameters file in the error for an unknown experiment.

    The release ledger (``privacy.ledger_store``: ``ledger_dir``, shared by every workspace) is checked
    before any record is read, a copy on disk it lacks is recorded, and this release is reserved in it --
    its total budget checked under the ledger's lock -- before any noise is drawn; confirmed once the files
    are written, marked failed (still counted) if the job fails after its noise."""
    import numpy as np

    from dpsynth import __version__
    from dpsynth.data.dataset import load_processed
    from dpsynth.data.registry import get_spec
    from dpsynth.io import write_json, write_npz
    from dpsynth.config import EntropicWGANHparams
    from dpsynth.methods.entropic_wgan import loss_spec_for, to_records
    from dpsynth.privacy import mechanisms
    from dpsynth.privacy.ledger_store import ReleaseLedger, settled
    from dpsynth.privacy.randomness import NoiseSource

    exp = get_experiment(params, experiment, source)
    local = exp.local
    if local is None:
        raise ConfigError(f"experiments.{experiment}: has no local: section, so there is nothing to privatize")
    record_shape = tuple(get_spec(exp.dataset).shape)
    if isinstance(exp.hparams, EntropicWGANHparams):  # the wavelet baseline has no matched loss to check
        loss_spec_for(exp, record_shape)  # a mechanism/loss mismatch fails here, before any work
    root = Path(params.data.root)
    src = root / "processed" / f"{exp.dataset}.npz"
    npz_path, json_path = privatized_paths(root, experiment)
    ledger = ReleaseLedger.configured(params.ledger_dir)
    ledger.check(("data.root", root), *CLEANED_FOLDERS,  # before the records are read: one that cannot record
                 workspace=Path(source).resolve().parent)
    held = announce_release(params, experiment, exp.dataset, local, npz_path, json_path, ledger)
    drawn = False
    with settled(ledger, held, lambda: drawn):
        data = load_processed(src)
        labels = data.y_train
        kept = None
        if exp.train_size is not None:
            # a run on its first n training records (the sweep key n) privatizes only those: the run's own
            # choice of records (RunSpec.train_indices), which the train stage then reads back whole
            from dpsynth.config import resolve_run

            idx = resolve_run(params, experiment).train_indices(len(data.x_train))
            if idx is not None:
                kept, labels = len(idx), labels[idx]
        records = to_records(data.x_train if kept is None else data.x_train[idx])
        noise = NoiseSource(params.privacy_noise, local.seed if params.privacy_noise == "reproducible" else None)
        rng = noise.numpy_rng(0)
        mechanism = mechanisms.local(local.mechanism)  # delta and DCT as it requires: enforced by config.LocalMechanism
        drawn = True  # from here on the noise may have been drawn: a failure still counts the release
        y, rep = mechanism.privatize(records, radius=local.radius, epsilon=local.epsilon, delta=local.delta, rng=rng,
                                     dct_image_shape=record_shape if local.dct else None,
                                     dct_quantile=local.dct_quantile)
        report = {
            "experiment": experiment,
            "dataset": exp.dataset,
            **rep.to_dict(),
            "sensitivity_paper_convention": rep.radius,
            "noise": noise.describe(),
            "record_shape": list(record_shape),
            "record_space": "images mapped to [-1, 1] and flattened (C*H*W)" if len(record_shape) == 3
                            else "points as generated",
            "domain": "dct" if local.dct else ("pixels" if len(record_shape) == 3 else "points"),
            "projection": mechanism.projection_name,
            # the source's path only: a hash of the private data would let anyone confirm a guessed dataset
            "source": {"path": str(src)},
            **({} if kept is None else {"records_kept": f"the run's {kept} training records (train_size "
                                        f"{exp.train_size}: the first n the scale keeps), not the whole training "
                                        "split"}),
            "note": "epsilon uses the sound sensitivity 2R (diameter of the ball); epsilon_paper_convention "
                    "is what the paper's sensitivity R would claim for the same noise",
            "dpsynth_version": __version__,
        }
        if rep.epsilon > local.epsilon * (1 + 1e-9) or rep.delta > float(local.delta or 0.0) * (1 + 1e-9):
            raise PrivacyError(f"experiments.{experiment}.local: the mechanism reports epsilon {rep.epsilon:.6g}, "
                               f"delta {rep.delta:.3g}, past the configured ({local.epsilon}, {local.delta}) the "
                               "budget was checked for; nothing was written")
        json_path.unlink(missing_ok=True)
        d = y.shape[1]
        write_npz(npz_path, x_train=y.astype(np.float32), y_train=labels.astype(np.int64),
                  x_test=np.zeros((0, d), np.float32), y_test=np.zeros((0,), np.int64),
                  num_classes=np.int64(data.num_classes))
        write_json(json_path, report)
        ledger.settle(held[0].release, "confirmed", _entry(report, npz_path, experiment, exp.dataset))
    return report


def _entry(report: dict[str, Any], npz_path: Path, experiment: str, dataset: str) -> Any:
    """The ledger's entry for a privatization whose report is ``report`` (written to ``npz_path``'s json): at
    its epsilon when its noise was secret, as a release without a guarantee (infinite) when it was not."""
    import math

    from dpsynth.io import sha256_file
    from dpsynth.privacy import releases
    from dpsynth.privacy.mechanism_base import LOCAL

    private = bool((report.get("noise") or {}).get("private", False))
    return releases.Release(dataset=dataset, stage="privatize", name=experiment, mechanism=str(report["mechanism"]),
                            epsilon=float(report["epsilon"]) if private else math.inf,
                            delta=float(report.get("delta") or 0.0), neighbours=LOCAL, output=_key(npz_path),
                            sha256=sha256_file(npz_path), key=_key(npz_path),
                            note="" if private else "reproducible noise: not private")


def _key(npz_path: Path) -> str:
    """What a privatization's ledger entries are keyed by: its output, as an absolute path (the ledger is
    shared by every workspace)."""
    import os

    return os.path.abspath(npz_path)


def announce_release(params: Params, experiment: str, dataset: str, local: Any, npz_path: Path, json_path: Path,
                     ledger: Any) -> list[Any]:
    """Before the records are read and any noise drawn: record a privatized copy on disk that the ledger
    lacks (an earlier version's, or one whose writer died before confirming), say in one line that this
    run is a new release over an earlier one, and reserve it (``local``: the experiment's mechanism and
    target) -- refused if it would pass the dataset's total budget. A privatization with replayable noise
    (``privacy_noise: reproducible``) is reserved and recorded as a release without a guarantee (infinite
    epsilon), whatever epsilon its mechanism states."""
    import math
    import sys

    from dpsynth.io import read_json, sha256_file
    from dpsynth.privacy import releases
    from dpsynth.privacy.ledger_store import Reservation
    from dpsynth.privacy.mechanism_base import LOCAL

    if npz_path.is_file() and json_path.is_file():
        digest = sha256_file(npz_path)
        try:
            entry = _entry(read_json(json_path), npz_path, experiment, dataset)
        except (DpsynthError, KeyError, TypeError, ValueError):
            entry = releases.Release(dataset, "privatize", experiment, "unknown", math.inf, 0.0, "unknown",
                                     _key(npz_path), digest, note=f"found on disk; {json_path} unreadable",
                                     key=_key(npz_path))
        entry.sha256 = digest
        entry.note = (entry.note + "; " if entry.note else "") + "found on disk, not yet in the ledger"
        if ledger.record_found(entry):
            print(f"dpsynth: privatize {experiment}: {npz_path} was not in the release ledger; recorded it in "
                  f"{ledger.path} as a release of {dataset}", file=sys.stderr)
    known, _ = ledger.read()
    earlier = [r for r in known if r.stage == "privatize" and r.name == experiment]
    if earlier:
        last = earlier[-1]
        print(f"dpsynth: privatize {experiment}: {len(earlier)} earlier release(s) of {dataset}'s records by this "
              f"experiment, the last {last.time} ({last.output}, " + (f"sha256 {last.sha256[:12]}" if last.sha256
                                                                       else last.status)
              + f"); this run draws fresh noise -- a NEW release of every record, composed with the earlier one(s) "
              f"in {ledger.path}", file=sys.stderr)
    free = params.privacy_noise == "reproducible"
    wanted = releases.Release(dataset, "privatize", experiment, local.mechanism, math.inf if free else local.epsilon,
                              float(local.delta or 0.0), LOCAL, _key(npz_path), "", key=_key(npz_path),
                              note="reproducible noise: not private" if free else "")
    return ledger.reserve([Reservation(wanted)], params.total_budgets or {}, f"privatize {experiment}")


def run_privatize(params: Params, experiment: str, source: str = DEFAULT_PARAMS, as_json: bool = False) -> int:
    """The stage: privatize ``experiment`` with torch's threads pinned, say what was written where
    (``as_json``: the report's headline as JSON)."""
    prepare_cpu(params)
    report = privatize(params, experiment, source)
    keys = ("experiment", "mechanism", "epsilon", "epsilon_paper_convention", "delta", "radius",
            "noise_scale", "num_records", "dim")
    npz_path, json_path = privatized_paths(Path(params.data.root), experiment)
    finish(f"privatize {experiment}: {report['num_records']} records, {report['mechanism']} epsilon "
           f"{report['epsilon']:.4g} (the paper's convention: {report['epsilon_paper_convention']:.4g}) -> "
           f"{npz_path} (+ {json_path.name}, the local privacy report)", {k: report[k] for k in keys}, as_json)
    return 0
