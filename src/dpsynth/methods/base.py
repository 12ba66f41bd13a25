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
import hashlib
import json
import os
import random
import signal
import sys
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
from dpsynth.io import atomic_path

GENERATOR_FILE = "generator.pt"
PRIVACY_FILE = "privacy.json"
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
    with atomic_path(path, suffix=".pt") as tmp, open(tmp, "wb") as fh:
        # Into a handle, not a path: torch names the zip's folder after the (random) temp file name,
        # which would make identical weights hash differently.
        torch.save({"format": "dpsynth-generator/1", "arch": arch, "meta": meta, "state_dict": state}, fh)


def load_generator(path: Path, device: str | torch.device = "cpu") -> tuple[torch.nn.Module, dict[str, Any]]:
    from dpsynth.nets import build_generator

    if not Path(path).is_file():
        raise DpsynthError(f"{path}: generator not found (run `dpsynth train` first)")
    try:
        blob = torch.load(path, map_location=device, weights_only=True)
    except Exception as exc:  # torch raises several unrelated types for a corrupt file
        raise DpsynthError(f"{path}: unreadable generator file ({exc})") from None
    if not isinstance(blob, dict) or blob.get("format") != "dpsynth-generator/1":
        raise DpsynthError(f"{path}: not a dpsynth generator file")
    module = build_generator(blob["arch"]["name"], **blob["arch"].get("kwargs", {}))
    module.load_state_dict(blob["state_dict"])
    module.to(device).eval()
    return module, blob["meta"]


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
        with atomic_path(self.path, suffix=".pt") as tmp, open(tmp, "wb") as fh:
            torch.save(state, fh)

    def load(self) -> dict[str, Any] | None:
        if not self.path.is_file():
            return None
        try:
            # RNG states (numpy tuples, python's state) need full unpickling; the file is our own.
            state = torch.load(self.path, map_location="cpu", weights_only=False)
        except Exception as exc:
            raise DpsynthError(f"{self.path}: unreadable checkpoint ({exc}); delete it to restart") from None
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
        with atomic_path(self.path, suffix=".csv") as tmp:
            with open(tmp, "w", newline="", encoding="utf-8") as fh:
                w = csv.DictWriter(fh, fieldnames=self.fields)
                w.writeheader()
                w.writerows(self.rows)
        self._fh = open(self.path, "a", newline="", encoding="utf-8")
        self._w = csv.DictWriter(self._fh, fieldnames=self.fields)

    def write(self, step: int, **values: float) -> None:
        row = {"step": step, **{k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in values.items()}}
        self.rows.append(row)
        self._w.writerow(row)

    def snapshot(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.rows]

    def flush(self) -> None:
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()


def write_public_log(rows: list[dict[str, Any]], path: Path, fields: tuple[str, ...] = PUBLIC_LOG_FIELDS) -> None:
    """The released training log: only the columns that are not computed on private data."""
    with atomic_path(Path(path), suffix=".csv") as tmp:
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
