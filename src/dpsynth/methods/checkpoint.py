"""Exact resume: a checkpoint holds every RNG a step consumes (torch global, numpy, python and each
explicit ``torch.Generator``) besides the model and optimizer state, tied to the configuration
fingerprint; SIGTERM becomes a flag the loop checks between steps (a checkpoint, then ``Preempted``)."""

from __future__ import annotations

import hashlib
import json
import random
import signal
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dpsynth.errors import DpsynthError
from dpsynth.methods.artifacts import torch_load, torch_save
from dpsynth.methods.context import TrainContext
from dpsynth.methods.trainlog import TrainLog


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


class Resumable:
    """Saving and resuming from what a stepper declares, so no stepper writes them by hand.

    A subclass names ``state_parts()`` -- checkpoint key -> each object with ``state_dict`` /
    ``load_state_dict`` it trains (generators, critics, optimizers) -- and ``random_streams()`` -- its
    named ``torch.Generator`` s, the secret ones (noise, sampling) included; whatever else it keeps
    goes through ``extra_state`` / ``load_extra_state``. The keys are those the steppers always wrote,
    so an older checkpoint resumes. ``steps_done`` is set from the checkpoint's ``step`` (the loop
    writes it): a stepper whose schedule depends on the step count gets it back without a line."""

    steps_done: int = 0

    def state_parts(self) -> dict[str, Any]:  # pragma: no cover - every stepper declares its own
        raise NotImplementedError

    def random_streams(self) -> dict[str, torch.Generator]:  # pragma: no cover - every stepper declares its own
        raise NotImplementedError

    def extra_state(self) -> dict[str, Any]:
        """Checkpointed values that are neither a part nor a random stream (none by default)."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what ``extra_state`` wrote (nothing by default)."""

    def state_dict(self) -> dict[str, Any]:
        return {**{key: part.state_dict() for key, part in self.state_parts().items()},
                "rng": rng_state(self.random_streams()), **self.extra_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, part in self.state_parts().items():
            part.load_state_dict(state[key])
        set_rng_state(state["rng"], self.random_streams())
        self.load_extra_state(state)
        if "step" in state:
            self.steps_done = int(state["step"])


def config_fingerprint(ctx: TrainContext) -> str:
    """Everything a training run's result depends on: the experiment as run at this scale, the
    privacy plan, the preset, the seed, the CPU threads and the training data itself."""
    h = hashlib.sha256()
    h.update(json.dumps({
        "experiment": ctx.experiment.model_dump(mode="json"), "privacy_plan": ctx.privacy_plan.record(),
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


def checkpoint_if_due(ctx: TrainContext, step: int, total_steps: int, flag: dict[str, bool],
                      logs: Sequence[TrainLog], save: Any) -> None:
    """Between steps: the periodic checkpoint, and on SIGTERM a final one then ``Preempted``.

    The logs are flushed first so a resumed run's logs match the checkpoint it resumes from."""
    due = step % ctx.checkpoint_every == 0 and step < total_steps
    if due or flag["stop"]:
        for log in logs:
            log.flush()
        save()
    if flag["stop"]:
        raise Preempted(f"{ctx.name}: SIGTERM at step {step}; checkpoint written, resubmit to resume")
