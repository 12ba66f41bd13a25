"""THE training loop: every method's run goes through :func:`run_training` (issue #30).

The loop is the trainer, the method is the model (Lightning's split): a method builds a
:class:`Stepper` -- one step, its state for an exact resume, its log row, its release -- and
the loop does, in this one order for every method:

1. load the checkpoint (tied to the configuration fingerprint); a finished run whose release
   is intact is ``already_done`` (checked here, once, before any state is loaded);
2. per step: the budget guard first (it refuses, PrivacyError, before a step that would
   exceed the target), then the step;
3. every ``log_every`` steps and at the end: the stepper's deferred checks, one private
   diagnostics row (``TrainLog``), the progress line (epsilon; the loss only for a run
   without central DP);
4. checkpoints on the cadence and on SIGTERM (then ``Preempted``); an early stop on purpose
   (``max_steps_this_run``) checkpoints and returns ``finished: False``;
5. the release: a checkpoint of the trained state, then generator, public log, privacy report,
   then the finished checkpoint that records the generator's hash (a failed release -- a full
   disk -- is redone from the first by the next run, which trains no step).

Every method returns the same :class:`TrainResult`.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from dpsynth.methods.artifacts import TOGETHER_KEY, already_done, release_record, save_generator
from dpsynth.methods.checkpoint import Checkpointer, checkpoint_if_due, config_fingerprint, sigterm_flag
from dpsynth.methods.context import TrainContext
from dpsynth.methods.trainlog import (
    PUBLIC_LOG_FIELDS,
    TrainLog,
    show_progress_fields,
    train_progress,
    write_public_log,
)
from dpsynth.privacy.report import BudgetGuard, PrivacyReport

__all__ = ["LOOP_LOG_FIELDS", "Release", "RunRecord", "Stepper", "TrainResult", "drive", "run_training"]

#: The diagnostics columns the loop adds after the stepper's own.
LOOP_LOG_FIELDS = ("epsilon", "steps_per_s")


@dataclass
class Release:
    """What a finished run releases (besides the public log rows, which the loop keeps)."""

    generator: torch.nn.Module
    arch: dict[str, Any]
    meta: dict[str, Any]
    report: PrivacyReport
    public_fields: tuple[str, ...] = PUBLIC_LOG_FIELDS  # the train_log.csv columns (never private values)
    summary: dict[str, Any] = field(default_factory=dict)  # method-specific lines of the run's summary


class Stepper(Protocol):
    """What a method supplies to the loop."""

    #: Columns of the private diagnostics log besides step, epsilon and steps_per_s.
    log_fields: Sequence[str]
    #: Log (and check) every this many steps.
    log_every: int

    def step(self) -> Any:
        """One training step; returns its stats (device tensors allowed: read at log time only)."""

    def check(self) -> None:
        """Refuse (PrivacyError) what a step deferred; called before every log, checkpoint and release."""

    def log_row(self, stats: Any) -> dict[str, float]:
        """The private diagnostics of the last step (host values; may sync)."""

    def progress(self, stats: Any) -> dict[str, float]:
        """Values shown beside epsilon on the progress line of a run WITHOUT central DP."""

    def state_dict(self) -> dict[str, Any]:
        """Everything an exact resume needs (weights, optimizers, every RNG, the adversary...); every
        method's stepper gets it, and ``load_state_dict``, from ``checkpoint.Resumable``."""

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def release(self, steps: int) -> Release:
        """The generator to release, its architecture and meta, and the privacy report for ``steps``."""

    def close(self) -> None:
        """Undo what the stepper attached (hooks); runs however the loop ends."""


@dataclass
class TrainResult:
    """One result type for every method (the CLI writes it to train_summary.json when finished)."""

    experiment: str
    steps: int
    total_steps: int
    finished: bool
    sigma: float | None = None
    already_done: bool = False
    steps_this_run: int = 0
    steps_per_s_this_run: float | None = None
    resumed_from: int | None = None  # the checkpoint's step this run started from
    epsilon: dict[str, float] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "extra"}
        return {**out, **self.extra}


class RunRecord:
    """One run's checkpoint, accountant and private log, kept the loop's one way -- for a run, or for
    each member of a stepper with several (the packed DP-Sinkhorn step of a batched sweep), so every
    member's checkpoint is the one its own run writes and resumes.

    ``part`` is what the checkpoint saves and resumes (``state_dict`` / ``load_state_dict``:
    ``checkpoint.Resumable``); the checkpoint is read once, here (``state``: None when there is none
    of this configuration); :meth:`resume` loads it into ``part`` and the guard and opens the log
    from its rows; ``marks`` are added to every checkpoint saved (a batched sweep's group)."""

    def __init__(self, ctx: TrainContext, part: Any, *, total_steps: int, guard: BudgetGuard | None,
                 sigma: float | None, log_fields: Sequence[str], marks: Mapping[str, Any] | None = None) -> None:
        self.ctx, self.part, self.total_steps, self.guard, self.sigma = ctx, part, total_steps, guard, sigma
        self.log_fields, self.marks = [*log_fields, *LOOP_LOG_FIELDS], dict(marks or {})
        self.ckpt = Checkpointer(ctx.checkpoint_path, config_fingerprint(ctx))
        self.state = self.ckpt.load()
        self.step = 0 if self.state is None else int(self.state["step"])
        self.log: TrainLog | None = None

    def resume(self) -> None:
        """The checkpoint's state into ``part`` and the guard (every weight, moment, random stream and the
        accountant), and the private log with the checkpoint's rows."""
        st = self.state
        if st is not None:
            self.part.load_state_dict(st)
            if self.guard is not None:
                self.guard = BudgetGuard.from_state_dict(st["guard"])
        self.log = TrainLog(self.ctx.log_path, self.log_fields, resume_step=self.step if st is not None else None,
                            rows=st.get("log_rows") if st is not None else None)
        self.ckpt.log = self.log

    def epsilon_spent(self) -> float:
        return self.guard.epsilon_spent() if self.guard is not None else math.inf

    def save(self, at: int, *, done: bool = False, released: bool = False) -> None:
        """The run's checkpoint at step ``at`` (the caller ran the stepper's deferred checks first)."""
        self.ckpt.save({**self.part.state_dict(), "step": at, "total_steps": self.total_steps, "sigma": self.sigma,
                        "done": done, "release": release_record(self.ctx) if released else None,
                        "guard": self.guard.state_dict() if self.guard is not None else None, **self.marks})


def run_training(ctx: TrainContext, stepper: Stepper, *, total_steps: int, guard: BudgetGuard | None,
                 sigma: float | None, epsilon_spent: Callable[[], float] | None = None,
                 extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Run ``stepper`` to ``total_steps`` under ``guard`` (None: no central DP) and release it.

    ``epsilon_spent`` (default: the guard's, else inf) fills the log's epsilon column; a method
    whose privacy was spent before training (local DP) passes its constant. ``extra`` is added to
    the result (e.g. the schedule a method chose)."""
    extra = dict(extra or {})
    run = RunRecord(ctx, stepper, total_steps=total_steps, guard=guard, sigma=sigma, log_fields=stepper.log_fields)
    state, step = run.state, run.step
    if state is None:
        say_if_retraining_a_release(ctx)
    if state is not None:
        if already_done(ctx, state):  # else a finished run re-releases below: the loop has no steps left
            return TrainResult(ctx.name, step, int(state.get("total_steps") or step), True, sigma,
                               already_done=True, extra=extra).to_dict()
        together = state.get(TOGETHER_KEY)
        if together:
            extra[TOGETHER_KEY] = together
    if ctx.before_release is not None:
        # the release reserved in the release ledger (its total budget checked) before any step or noise; a run
        # resuming from its checkpoint adopts the reservation of the job that drew that noise
        ctx.before_release(state)
    run.resume()
    eps_now = epsilon_spent or run.epsilon_spent
    log = run.log
    assert log is not None

    def save(at: int, done: bool = False) -> None:
        stepper.check()  # a deferred refusal stops everything: never checkpoint or release past it
        run.save(at, done=done, released=done)

    bar = train_progress(ctx, total_steps, step)
    steps_start = step

    def on_log(at: int, stats: Any, eps: Sequence[float], rate: float) -> None:
        show_progress_fields(ctx, bar, eps[0], **stepper.progress(stats))

    try:
        step, rate = drive(ctx, stepper.step, stepper.check, step=step, total_steps=total_steps,
                           log_every=stepper.log_every, logs=[log], rows=lambda st: [stepper.log_row(st)],
                           epsilons=lambda: [eps_now()], guards=[run.guard] if run.guard is not None else [],
                           save=save, on_step=lambda: bar.update(1), on_log=on_log)
    finally:
        bar.close()
        stepper.close()
    stepper.check()  # nothing is released after a refused step (on a GPU the refusal is deferred)
    result = TrainResult(ctx.name, step, total_steps, step >= total_steps, sigma, steps_this_run=step - steps_start,
                         steps_per_s_this_run=round(rate, 3), resumed_from=steps_start if state is not None else None,
                         extra=extra)
    if step < total_steps:  # stopped early on purpose (tests simulate a kill; benchmarks time a slice)
        save(step)
        return result.to_dict()

    # The trained state first, then the release: a release that fails (a full disk while writing
    # generator.pt) leaves this checkpoint, and the rerun re-releases from it without a step. A run
    # that trained nothing (a re-release) keeps the checkpoint it loaded as it is.
    if state is None or step > steps_start:
        save(step)
    rel = stepper.release(step)
    rel.report.noise = ctx.noise.describe(noised=rel.report.noised)
    if rel.report.extra.get("approximately_private"):  # secret noise, but a step read clean records: not private
        from dpsynth.privacy.randomness import APPROXIMATE_LABEL

        rel.report.noise = {**rel.report.noise, "private": False, "label": APPROXIMATE_LABEL}
    save_generator(ctx.generator_path, rel.generator, rel.arch, rel.meta)
    rows, fields = labelled_log(log.snapshot(), rel.public_fields, rel.report.to_dict())
    write_public_log(rows, ctx.public_log_path, fields=fields)
    rel.report.write(ctx.privacy_path)
    save(step, done=True)
    result.epsilon = rel.report.epsilon
    result.extra.update(rel.summary)
    return result.to_dict()


def labelled_log(rows: list[dict[str, Any]], fields: tuple[str, ...],
                 report: dict[str, Any]) -> tuple[list[dict[str, Any]], tuple[str, ...]]:
    """The released log's rows and columns: a run whose report carries a privacy label (``privacy_label``:
    replayable noise, only approximately private) gets an ``epsilon_label`` column beside ``epsilon``, the
    label on every row, so its epsilon is never read there without it."""
    from dpsynth.privacy.randomness import privacy_label

    label = privacy_label(report)
    if label is None or "epsilon" not in fields:
        return rows, fields
    at = fields.index("epsilon") + 1
    return [{**r, "epsilon_label": label} for r in rows], (*fields[:at], "epsilon_label", *fields[at:])


def drive(lead: TrainContext, step_fn: Callable[[], Any], check: Callable[[], None], *, step: int, total_steps: int,
          log_every: int, logs: Sequence[TrainLog], rows: Callable[[Any], Sequence[Mapping[str, float]]],
          epsilons: Callable[[], Sequence[float]], guards: Sequence[BudgetGuard], save: Callable[[int], None],
          on_step: Callable[[], None] = lambda: None,
          on_log: Callable[[int, Any, Sequence[float], float], None] = lambda at, stats, eps, rate: None,
          ) -> tuple[int, float]:
    """The loop proper, for one run or for a packed step's K runs (one log and guard per run, each
    run's checkpoint a :class:`RunRecord`, saved by ``save``): from ``step``
    to ``total_steps`` (or ``lead.max_steps_this_run`` more); returns (the step reached, steps/s).

    Per step: every guard first (PrivacyError before a step past its target), then ``step_fn``.
    Every ``log_every`` steps and at the last: ``check`` (deferred refusals), one row per log
    (``rows(stats)``, with epsilon and steps/s), ``on_log(step, stats, epsilons, rate)``. On the checkpoint cadence and on
    SIGTERM: every log flushed, then ``save(step)``; after a SIGTERM, ``Preempted``. The logs are closed
    however it ends."""
    stop_at = total_steps if lead.max_steps_this_run is None else min(total_steps, step + lead.max_steps_this_run)
    t_start, steps_start = time.perf_counter(), step
    rate = 0.0
    try:
        with sigterm_flag() as flag:
            while step < stop_at:
                for guard in guards:
                    guard.step()  # refuses (PrivacyError) before a step that would exceed the target
                stats = step_fn()
                step += 1
                on_step()
                if step % log_every == 0 or step == total_steps:
                    check()
                    rate = (step - steps_start) / max(time.perf_counter() - t_start, 1e-9)
                    eps = list(epsilons())
                    for log, row, e in zip(logs, rows(stats), eps, strict=True):
                        log.write(step, **row, epsilon=e, steps_per_s=rate)
                    on_log(step, stats, eps, rate)
                at = step
                checkpoint_if_due(lead, step, total_steps, flag, logs, lambda: save(at))
    finally:
        for log in logs:
            log.close()
    return step, (step - steps_start) / max(time.perf_counter() - t_start, 1e-9)


def say_if_retraining_a_release(ctx: TrainContext) -> None:
    """A run with released files but no checkpoint of this configuration trains from step 0: its
    release cannot be verified or re-released without the checkpoint, so it is replaced -- and the
    private data is used again. Say so, once, instead of retraining silently."""
    released = [p for p in (ctx.generator_path, *ctx.also_released) if p.exists() or p.is_symlink()]
    if released:
        print(f"dpsynth: {ctx.name}: {', '.join(map(str, released))} exist(s) but {ctx.checkpoint_path} holds no "
              "checkpoint of this configuration, so the release cannot be verified; training again from step 0 "
              "(the new release replaces it and spends the privacy budget again)", file=sys.stderr)

