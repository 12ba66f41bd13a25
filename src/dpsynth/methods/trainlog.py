"""A run's logs: the private diagnostics (every logged value, ``TrainLog``), the released
``train_log.csv`` (public columns only) and the progress line."""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

from dpsynth.io import atomic_path
from dpsynth.methods.artifacts import writing_to
from dpsynth.methods.context import TrainContext
from dpsynth.progress import Progress

#: Columns of the released log: functions of the mechanism's parameters and the clock, not the data.
PUBLIC_LOG_FIELDS = ("step", "epsilon", "steps_per_s")


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
