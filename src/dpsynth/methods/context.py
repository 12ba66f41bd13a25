"""What a training run is given and where it writes (the run's context); the shared pieces of a run
are beside it: ``artifacts`` (writing, the released generator, "already done"), ``checkpoint``
(exact resume, SIGTERM), ``trainlog`` (the private and public logs, progress) and ``loop`` (the one
training loop).

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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dpsynth.config import Experiment, PrivacyPlan, ScalePreset
from dpsynth.data.dataset import Dataset
from dpsynth.errors import ConfigError
from dpsynth.privacy.randomness import NoiseSource

GENERATOR_FILE = "generator.pt"
PRIVACY_FILE = "privacy.json"
SUMMARY_FILE = "train_summary.json"  # written by the `train` CLI stage after the method returns
LOG_FILE = "train_log.csv"  # released: PUBLIC_LOG_FIELDS only
DIAGNOSTICS_FILE = "diagnostics.csv"  # private
CHECKPOINT_FILE = "checkpoint.pt"  # private


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
    privacy_plan: PrivacyPlan
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
    # The CLEAN records' file (data/processed/{dataset}.npz) of a local-DP run, in the same order as the
    # privatized ones. Only a method that reads clean data BY DESIGN opens it -- the wavelet baseline of
    # Reshetova et al. tunes its denoiser on it and labels itself approximately private; no other does.
    processed_path: Path | None = None
    # Called by the loop before the first step of a run that will release (not for one already done), with the
    # checkpoint it resumes from (None: none): the train stage reserves the release in the release ledger
    # (privacy.ledger_store), its dataset's total budget checked, so a release past it is refused before any
    # noise is drawn (a resumed run adopts its own earlier reservation). None: nothing to reserve.
    before_release: Callable[[dict[str, Any] | None], None] | None = None

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


def require_shared(ctxs: Sequence[TrainContext], shared: Sequence[Mapping[str, Any]], what: str) -> None:
    """Refuse (``ConfigError``, naming the settings) cells that cannot train as one group: ``shared[i]`` is what
    cell ``i``'s group step fixes for every member (its shapes, its solve), and every cell must agree with the
    first. ``what`` says what they would share ("one pack", "a batched sweep"). The one check both methods'
    trained-together paths make before anything is built."""
    first = shared[0]
    for ctx, mine in zip(ctxs[1:], shared[1:]):
        diff = sorted(k for k in first if first[k] != mine[k])
        if diff:
            raise ConfigError(f"{ctx.name} and {ctxs[0].name} cannot share {what}: they differ in {', '.join(diff)}")
