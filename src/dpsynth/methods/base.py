"""What every method shares: the train context, the generator artifact, exact-resume checkpoints.

A method module (``dpsynth.methods.<method>``) exposes ``train(ctx: TrainContext) -> dict``
and writes into ``ctx.out_dir``:

- ``generator.pt``  the released generator (``save_generator``), loadable without the method;
- ``privacy.json``  its privacy report (``dpsynth.privacy.report``);
- ``train_log.csv`` the RELEASABLE log: step, epsilon spent, speed (``write_public_log``);

and into ``ctx.private_dir`` (never released, never a workflow output):

- ``diagnostics.csv`` one row per logged step with everything the method logs (``TrainLog``):
  losses on real batches, Poisson batch sizes, pre-clip norms -- computed on private data
  without noise, so private;
- ``checkpoint.pt`` the full training state for an exact resume (``Checkpointer``), including
  the secret noise generators' states.

Resuming must give bit-identical weights and the same spent budget as an uninterrupted
run, so a checkpoint holds every RNG the step consumes (torch global, numpy, python,
and each explicit ``torch.Generator``) besides the model/optimizer state and the step.
"""

from __future__ import annotations

import csv
import errno
import hashlib
import json
import os
import pickle
import random
import shutil
import signal
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dpsynth.config import Experiment, ScalePreset
from dpsynth.data.dataset import Dataset
from dpsynth.errors import DpsynthError
from dpsynth.privacy.randomness import NoiseSource
from dpsynth.progress import Progress
from dpsynth.io import atomic_path, sha256_file

GENERATOR_FILE = "generator.pt"
PRIVACY_FILE = "privacy.json"
SUMMARY_FILE = "train_summary.json"  # written by the `train` CLI stage after the method returns
LOG_FILE = "train_log.csv"  # released: PUBLIC_LOG_FIELDS only
DIAGNOSTICS_FILE = "diagnostics.csv"  # private
CHECKPOINT_FILE = "checkpoint.pt"  # private
#: Columns of the released log: functions of the mechanism's parameters and the clock, not the data.
PUBLIC_LOG_FIELDS = ("step", "epsilon", "steps_per_s")


@dataclass
class TrainContext:
    """Everything a method needs; built by the ``train`` CLI stage from params.yaml."""

    name: str
    experiment: Experiment
    preset: ScalePreset
    scale: str
    seed: int
    data: Dataset  # the private training data the method may touch (already subset per scale)
    out_dir: Path
    privacy_plan: dict[str, Any]
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    checkpoint_every: int = 500  # steps
    progress: bool = True
    max_steps_this_run: int | None = None  # for tests: stop early (as if killed) after this many steps
    scale_overrides: dict[str, Any] = field(default_factory=dict)  # hyperparameters the scale changed
    warmstart_dir: Path | None = None  # GS-WGAN: the warm-started critics this run trains from
    noise: NoiseSource = field(default_factory=NoiseSource)  # privacy-relevant randomness (secret by default)
    private_dir: Path | None = None  # checkpoint + diagnostics; default: out_dir / "private"
    # Released files written by the caller after ``train`` returns (the CLI's train_summary.json):
    # a finished run counts as done only when these are present and readable too.
    also_released: tuple[Path, ...] = ()

    @property
    def generator_path(self) -> Path:
        return self.out_dir / GENERATOR_FILE

    @property
    def privacy_path(self) -> Path:
        return self.out_dir / PRIVACY_FILE

    @property
    def private_path(self) -> Path:
        return self.private_dir if self.private_dir is not None else self.out_dir / "private"

    @property
    def log_path(self) -> Path:
        """The private diagnostics log (every logged value)."""
        return self.private_path / DIAGNOSTICS_FILE

    @property
    def public_log_path(self) -> Path:
        return self.out_dir / LOG_FILE

    @property
    def checkpoint_path(self) -> Path:
        return self.private_path / CHECKPOINT_FILE


# --------------------------------------------------------------------------- writing and reading


#: errno values that mean "the output did not fit": the CLI reports them without a traceback.
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


@contextmanager
def writing_to(path: Path) -> Iterator[None]:
    """Make a failed write name ``path``: a full disk reaches us as an ``OSError`` without a file
    name (a write into an open handle) or one naming an internal temporary, or -- from
    ``torch.save`` -- as a ``RuntimeError`` ("PytorchStreamWriter failed writing file ...",
    "unexpected pos ...") that carries no errno at all. The CLI can tell the user which output
    did not fit only if the error names it."""
    try:
        yield
    except OSError as exc:
        if exc.errno in DISK_FULL:
            raise OSError(exc.errno, os.strerror(exc.errno), str(path)) from exc
        raise
    except RuntimeError as exc:
        if not _is_torch_write_failure(exc):
            raise
        raise _write_failure(Path(path), exc) from exc


def _is_torch_write_failure(exc: RuntimeError) -> bool:
    text = str(exc)
    return any(s in text for s in ("PytorchStreamWriter failed writing", "unexpected pos", "file write failed"))


def _write_failure(path: Path, exc: RuntimeError) -> Exception:
    """torch dropped the errno: take it from a chained OSError, else from the free space left."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno is not None:
            return OSError(cause.errno, os.strerror(cause.errno), str(path))
        cause = cause.__cause__ or cause.__context__
    try:
        full = shutil.disk_usage(path.parent).free < (1 << 20)
    except OSError:
        full = False
    if full:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return DpsynthError(f"{path}: writing failed ({first}); check the free space, quota and permissions there")


def torch_save(obj: Any, path: Path) -> None:
    """Atomically ``torch.save`` into ``path`` with write failures naming it.

    Into a handle, not a path: torch names the zip's folder after the (random) temp file name,
    which would make identical content hash differently."""
    with writing_to(path), atomic_path(path, suffix=".pt") as tmp, open(tmp, "wb") as fh:
        torch.save(obj, fh)


def _load_failure(exc: BaseException, weights_only: bool) -> str:
    """Why torch could not read a file, in words -- never torch's own text: for a weights-only
    failure that advises ``weights_only=False``, i.e. unpickling an untrusted file."""
    text = str(exc)
    if isinstance(exc, pickle.UnpicklingError):
        return "not a PyTorch file of tensors and plain data" if weights_only else "not a PyTorch file"
    if "zip archive" in text or "central directory" in text or isinstance(exc, EOFError):
        return "truncated or corrupt archive"
    if isinstance(exc, (IsADirectoryError, PermissionError)):
        return exc.strerror or type(exc).__name__
    return type(exc).__name__


def torch_load(path: Path, what: str, remedy: str, *, weights_only: bool = True,
               device: str | torch.device = "cpu") -> Any:
    """``torch.load`` whose failure is a ``DpsynthError`` naming ``path``, saying it is not a
    valid ``what`` and what to do (``remedy``). torch's warnings are silenced: they too suggest
    loosening ``weights_only``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(path, map_location=device, weights_only=weights_only)
    except Exception as exc:  # torch raises several unrelated types for a corrupt file
        raise DpsynthError(f"{path}: not a valid {what} ({_load_failure(exc, weights_only)}); {remedy}") from None


# --------------------------------------------------------------------------- generator artifact


def save_generator(path: Path, module: torch.nn.Module, arch: dict[str, Any], meta: dict[str, Any]) -> None:
    """Write the released generator: enough to rebuild it with ``dpsynth.nets.build_generator``.

    ``arch`` = ``{"name": ..., "kwargs": {...}}``; ``meta`` holds ``num_classes``,
    ``record_shape``, ``output_range`` ("tanh" -> [-1, 1] or "sigmoid" -> [0, 1]) and
    ``sample_batch_size`` (generators with batch statistics sample in fixed batches).
    """
    for key in ("num_classes", "record_shape", "output_range"):
        if key not in meta:
            raise ValueError(f"generator meta needs {key!r}")
    state = {k: v.detach().cpu() for k, v in module.state_dict().items()}
    torch_save({"format": "dpsynth-generator/1", "arch": arch, "meta": meta, "state_dict": state}, path)


def load_generator(path: Path, device: str | torch.device = "cpu") -> tuple[torch.nn.Module, dict[str, Any]]:
    """Rebuild a released generator (``weights_only=True``: a released file is untrusted input).

    Any defect is a ``DpsynthError`` naming the file: sampling must never start from a file
    that is not what `dpsynth train` wrote."""
    from dpsynth.nets import build_generator

    path = Path(path)
    remedy = f"re-run `dpsynth train {path.parent.name}` to rebuild it"
    if not path.is_file():
        raise DpsynthError(f"{path}: generator not found (run `dpsynth train {path.parent.name}` first)")
    blob = torch_load(path, "dpsynth generator", remedy, device=device)

    def invalid(why: str) -> DpsynthError:
        return DpsynthError(f"{path}: not a valid dpsynth generator ({why}); {remedy}")

    if not isinstance(blob, dict) or blob.get("format") != "dpsynth-generator/1":
        raise invalid("no dpsynth-generator/1 format tag")
    arch, meta, state = blob.get("arch"), blob.get("meta"), blob.get("state_dict")
    if not (isinstance(arch, dict) and isinstance(arch.get("name"), str) and isinstance(arch.get("kwargs", {}), dict)):
        raise invalid("no architecture record")
    if not isinstance(meta, dict) or any(k not in meta for k in ("num_classes", "record_shape", "output_range")):
        raise invalid("incomplete meta record")
    if not isinstance(state, dict):
        raise invalid("no weights")
    try:
        module = build_generator(arch["name"], **arch.get("kwargs", {}))
        module.load_state_dict(state)
    except Exception as exc:  # unknown architecture, bad kwargs, weights of another shape
        raise invalid(f"its weights do not fit its architecture: {type(exc).__name__}") from None
    module.to(device).eval()
    return module, meta


def release_record(ctx: TrainContext) -> dict[str, str]:
    """What a finished checkpoint remembers of its release: the generator's hash. The checkpoint
    is tied to the configuration fingerprint, so the hash ties the released file to it too --
    without releasing the fingerprint, which hashes the private training data."""
    return {"generator_sha256": sha256_file(ctx.generator_path)}


def release_problem(ctx: TrainContext, state: dict[str, Any]) -> str | None:
    """Why the release of a finished run (``state``: its checkpoint, already matched to this
    configuration) is not intact -- None when it is. A run reports ``already_done`` only when
    this is None; otherwise it re-releases from the checkpoint."""
    gen = ctx.generator_path
    for path in (gen, ctx.privacy_path, ctx.public_log_path, *ctx.also_released):
        if not path.is_file():
            return f"{path} is missing"
    try:
        load_generator(gen)
    except DpsynthError as exc:
        return str(exc)
    recorded = (state.get("release") or {}).get("generator_sha256")
    if recorded is None:
        return f"{ctx.checkpoint_path} records no hash of the released generator"
    if sha256_file(gen) != recorded:
        return f"{gen} is not the generator this configuration released"
    for path in (ctx.privacy_path, *(p for p in ctx.also_released if p.suffix == ".json")):
        try:
            with open(path, encoding="utf-8") as fh:
                ok = isinstance(json.load(fh), dict)
        except (OSError, ValueError):
            ok = False
        if not ok:
            return f"{path} is unreadable"
    return None


#: Marks a cell checkpoint a batched sweep wrote (``methods.dp_sinkhorn.together``): finished, not yet released.
TOGETHER_KEY = "trained_together"


def already_done(ctx: TrainContext, state: dict[str, Any] | None) -> bool:
    """True when ``state`` is a finished checkpoint whose release is intact. A finished one whose
    release is not is re-released from the checkpoint (same weights, no new training): say so."""
    if state is None or not state.get("done"):
        return False
    if state.get(TOGETHER_KEY) and state.get("release") is None:
        print(f"dpsynth: {ctx.name} was trained by the batched sweep {state[TOGETHER_KEY]!r}; releasing it from "
              f"its finished checkpoint {ctx.checkpoint_path}", file=sys.stderr)
        return False
    problem = release_problem(ctx, state)
    if problem is None:
        return True
    print(f"dpsynth: {problem}; re-releasing from the finished checkpoint {ctx.checkpoint_path}", file=sys.stderr)
    return False


# --------------------------------------------------------------------------- checkpoints


def rng_state(generators: dict[str, torch.Generator]) -> dict[str, Any]:
    return {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
        "generators": {k: g.get_state() for k, g in generators.items()},
    }


def set_rng_state(state: dict[str, Any], generators: dict[str, torch.Generator]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    for k, g in generators.items():
        g.set_state(state["generators"][k])


def config_fingerprint(ctx: TrainContext) -> str:
    """Everything a training run's result depends on: the experiment as run at this scale, the
    privacy plan, the preset, the seed, the CPU threads and the training data itself."""
    h = hashlib.sha256()
    h.update(json.dumps({
        "experiment": ctx.experiment.model_dump(mode="json"), "privacy_plan": ctx.privacy_plan,
        "preset": ctx.preset.model_dump(mode="json"), "seed": ctx.seed, "threads": torch.get_num_threads(),
        "noise": ctx.noise.mode,
        "x": [list(ctx.data.x_train.shape), str(ctx.data.x_train.dtype)],
    }, sort_keys=True, default=str).encode())
    h.update(np.ascontiguousarray(ctx.data.x_train).tobytes())
    h.update(np.ascontiguousarray(ctx.data.y_train).tobytes())
    return h.hexdigest()


class Checkpointer:
    """Atomic checkpoints: a kill during the write leaves the previous checkpoint intact.

    A checkpoint is tied to a configuration ``fingerprint``: one written under another
    configuration (a changed hyperparameter, scale, seed or dataset) is discarded with a note,
    never resumed -- resuming it would release stale weights under new labels. When ``log`` is
    set, its rows travel in the checkpoint, so a resume rebuilds the CSV log even if a workflow
    manager deleted the file after the failure."""

    def __init__(self, path: Path, fingerprint: str | None = None) -> None:
        self.path = Path(path)
        self.fingerprint = fingerprint
        self.log: TrainLog | None = None

    def save(self, state: dict[str, Any]) -> None:
        state = {**state, "fingerprint": self.fingerprint,
                 "log_rows": self.log.snapshot() if self.log is not None else None}
        torch_save(state, self.path)

    def load(self) -> dict[str, Any] | None:
        if not self.path.is_file():
            return None
        # RNG states (numpy tuples, python's state) need full unpickling; the file is our own.
        state = torch_load(self.path, "dpsynth checkpoint", "delete it to restart training", weights_only=False)
        if not isinstance(state, dict):
            raise DpsynthError(f"{self.path}: not a valid dpsynth checkpoint; delete it to restart training")
        if self.fingerprint is not None and state.get("fingerprint") != self.fingerprint:
            print(f"dpsynth: {self.path} was written under a different configuration; starting over",
                  file=sys.stderr)
            self.remove()
            return None
        return state

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


# --------------------------------------------------------------------------- training log


class TrainLog:
    """CSV log, one row per logged step. On resume the rows up to the checkpoint are restored
    (from the checkpoint itself when it carries them, else from the file), so the log of a resumed
    run equals that of an uninterrupted one."""

    def __init__(self, path: Path, fields: list[str], resume_step: int | None,
                 rows: list[dict[str, str]] | None = None) -> None:
        self.path, self.fields = Path(path), ["step", *fields]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.rows: list[dict[str, Any]] = []
        if resume_step is not None:
            if rows is None and self.path.is_file():
                with open(self.path, newline="", encoding="utf-8") as fh:
                    rows = list(csv.DictReader(fh))
            self.rows = [r for r in (rows or []) if int(r["step"]) <= resume_step]
        with writing_to(self.path), atomic_path(self.path, suffix=".csv") as tmp:
            with open(tmp, "w", newline="", encoding="utf-8") as fh:
                w = csv.DictWriter(fh, fieldnames=self.fields)
                w.writeheader()
                w.writerows(self.rows)
        self._fh = open(self.path, "a", newline="", encoding="utf-8")
        self._w = csv.DictWriter(self._fh, fieldnames=self.fields)

    def write(self, step: int, **values: float) -> None:
        row = {"step": step, **{k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in values.items()}}
        self.rows.append(row)
        with writing_to(self.path):
            self._w.writerow(row)

    def snapshot(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.rows]

    def flush(self) -> None:
        with writing_to(self.path):
            self._fh.flush()
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        with writing_to(self.path):
            self._fh.close()


def train_progress(ctx: TrainContext, total: int, initial: int) -> Progress:
    """Training progress: a bar on a terminal; with ``--no-progress`` or in a job's log, a line
    every few seconds (step/total, steps/s, ETA, epsilon spent/target)."""
    return Progress(total, f"train {ctx.name}", initial=initial, bar=None if ctx.progress else False)


def show_progress_fields(ctx: TrainContext, bar: Progress, eps_spent: float, **private: float) -> None:
    """Epsilon spent against the target; loss-like values only for a run without central DP.

    A DP run's loss (or critic estimate) is computed on the private records without noise, so,
    like the released train_log.csv, its progress lines leave it out (job logs are not private).
    """
    if ctx.experiment.privacy.enabled:
        bar.set(eps=f"{eps_spent:.3g}/{ctx.experiment.privacy.epsilon:g}")
    else:
        bar.set(**private)


def write_public_log(rows: list[dict[str, Any]], path: Path, fields: tuple[str, ...] = PUBLIC_LOG_FIELDS) -> None:
    """The released training log: only the columns that are not computed on private data."""
    with writing_to(Path(path)), atomic_path(Path(path), suffix=".csv") as tmp:
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=list(fields), extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)


# --------------------------------------------------------------------------- preemption


class Preempted(DpsynthError):
    """SIGTERM arrived (SLURM preemption / time limit): a checkpoint was written, exit to resubmit."""


@contextmanager
def sigterm_flag() -> Iterator[dict[str, bool]]:
    """Turn SIGTERM into a flag the loop checks between steps (never mid-step, never mid-write)."""
    flag = {"stop": False}

    def handler(signum: int, frame: Any) -> None:
        flag["stop"] = True

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not in the main thread (e.g. some test runners): no handler
        yield flag
        return
    try:
        yield flag
    finally:
        signal.signal(signal.SIGTERM, previous)


def checkpoint_if_due(ctx: TrainContext, step: int, total_steps: int, flag: dict[str, bool], log: TrainLog,
                      save: Any) -> None:
    """Between steps: the periodic checkpoint, and on SIGTERM a final one then ``Preempted``.

    The log is flushed first so a resumed run's log matches the checkpoint it resumes from."""
    due = step % ctx.checkpoint_every == 0 and step < total_steps
    if due or flag["stop"]:
        log.flush()
        save()
    if flag["stop"]:
        raise Preempted(f"{ctx.name}: SIGTERM at step {step}; checkpoint written, resubmit to resume")


def subset_indices(n: int, subset: int | None, seed: int) -> np.ndarray | None:
    """Deterministic stratification-free subset of the private data for a scale (None = all)."""
    if subset is None or subset >= n:
        return None
    return np.sort(np.random.default_rng(seed).choice(n, size=subset, replace=False))


def images_to_float(x: np.ndarray, output_range: str) -> torch.Tensor:
    """uint8 (N, C, H, W) -> float32 in [-1, 1] ("tanh") or [0, 1] ("sigmoid")."""
    t = torch.from_numpy(x).float() / 255.0
    return t * 2.0 - 1.0 if output_range == "tanh" else t
