"""A training run's place in the release ledger (``privacy.ledger_store``): checked before any record is read,
reserved before the first step draws any noise, confirmed once the model is released.

What a run releases, and at what cost:

- a central-DP model: its target (epsilon, delta) reserved, then its own RDP curve confirmed;
- a model without a guarantee -- a non-private run, replayable noise (``privacy_noise: reproducible``), or
  Reshetova et al.'s wavelet baseline, only approximately private (its denoiser is tuned on the clean records)
  -- infinite epsilon: refused by any finite total budget, whatever epsilon its report states;
- a model trained on locally privatized records with secret noise: post-processing of the privatize stage's
  release, which the ledger already holds: nothing.

The order, for ``dpsynth train``: the ledger is checked (:meth:`RunLedger.check`, with a read-only budget
check for a run with no checkpoint yet, so a refused wavelet run never reads its clean records); the loop
calls :meth:`RunLedger.reserve` before its first step (adopting the run's own earlier reservation when it
resumes from a checkpoint); the stage confirms after the release, or marks the reservation failed if the job
fails after it. A run found already done whose model the ledger lacks (its job died before confirming) is
recorded then (:meth:`RunLedger.record_found`), not just reported done. ``train-sweep`` reserves every cell it
trains together, at once, before the group's first step (:func:`reserve_cells`); each cell's own
``dpsynth train`` adopts that reservation when it releases the cell.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dpsynth.methods.context import TrainContext
    from dpsynth.privacy.ledger_store import Held, ReleaseLedger, Reservation
    from dpsynth.privacy.releases import Release


class RunLedger:
    """One training run's reservation in the release ledger (module docstring). ``cost`` is the reserved
    (epsilon, delta); None for a run that releases nothing the ledger counts (local DP, secret noise)."""

    def __init__(self, ledger: ReleaseLedger, params: Any, run: Any, experiment: str, private_dir: Path,
                 generator: Path) -> None:
        self.ledger, self.experiment, self.dataset = ledger, experiment, run.experiment.dataset
        self.budgets = dict(params.total_budgets or {})
        self.private_dir, self.generator = private_dir, generator
        self.mechanism = run.experiment.method
        repro = params.privacy_noise == "reproducible"
        approx = run.experiment.spec.approximately_private
        if run.experiment.local is not None:  # the privatize stage spent the budget; training is post-processing
            self.cost = (math.inf, 0.0) if repro or approx else None
        elif run.privacy.mode == "non_private" or repro:
            self.cost = (math.inf, 0.0)
        else:
            self.cost = (float(run.privacy.epsilon), float(run.privacy.delta or 0.0))
        self.note = ("reproducible noise: not private" if repro else "only approximately private" if approx else
                     "non-private: no guarantee" if self.cost is not None and math.isinf(self.cost[0]) else "")
        self.held: list[Held] = []

    @property
    def key(self) -> str:
        """What the run's entries are keyed by: its private run folder (where its checkpoint lives), absolute."""
        return os.path.abspath(self.private_dir)

    def wanted(self) -> Release:
        from dpsynth.privacy.releases import Release

        assert self.cost is not None
        return Release(dataset=self.dataset, stage="train", name=self.experiment, mechanism=self.mechanism,
                       epsilon=self.cost[0], delta=self.cost[1], neighbours="", output=os.path.abspath(self.generator),
                       sha256="", note=self.note, key=self.key)

    def check(self, checkpoint: Path, *apart: tuple[str, str | Path], **where: Any) -> None:
        """Before any record is read: the ledger can record and lies in no workspace, an older layout's ledger
        imported (``ReleaseLedger.check``, ``where``: its ``workspace`` and ``private_roots``), and a run with no
        checkpoint yet -- one that will draw fresh noise -- fits its dataset's total budget (checked again, under
        the lock, when it reserves)."""
        from dpsynth.privacy.releases import check_budget

        self.ledger.check(*apart, **where)
        budget = self.budgets.get(self.dataset)
        if self.cost is None or budget is None or checkpoint.is_file():
            return
        known, damaged = self.ledger.read()
        check_budget(self.dataset, budget, known, damaged, self.cost, f"train {self.experiment}",
                     str(self.ledger.path))

    def reservation(self, state: dict[str, Any] | None) -> Reservation:
        """What this run reserves, given its checkpoint ``state`` (None: none, fresh noise): resuming, it adopts
        its own earlier reservation (that noise was reserved by the job that drew it), or the confirmed release
        of the model its finished checkpoint released."""
        from dpsynth.privacy.ledger_store import Reservation

        released = ((state or {}).get("release") or {}).get("generator_sha256")
        return Reservation(self.wanted(), adopt=state is not None, released=released)

    def reserve(self, state: dict[str, Any] | None) -> None:
        """``TrainContext.before_release``: reserve this run's release before its first step (``state``: its
        checkpoint, see :meth:`reservation`)."""
        if self.cost is None:
            return
        # in place: the stage's ``settled`` block holds this very list, to mark the reservation failed
        self.held[:] = self.ledger.reserve([self.reservation(state)], self.budgets, f"train {self.experiment}")

    def release_entry(self, ctx: TrainContext) -> Release | None:
        """The ledger's entry for the model ``ctx`` released (its privacy report, read back): a central-DP model
        with its RDP curve, one without a guarantee as infinite; None for a local-DP model with secret noise."""
        from dpsynth.io import read_json, sha256_file
        from dpsynth.privacy.randomness import is_reproducible
        from dpsynth.privacy.releases import Release
        from dpsynth.privacy.verify import central_rdp, neighbours

        report = read_json(ctx.privacy_path)
        rdp = central_rdp(report, str(ctx.privacy_path))
        head = report.get("headline")
        eps = float((report.get("epsilon") or {}).get(head, math.inf)) if head else math.inf
        approx = bool((report.get("extra") or {}).get("approximately_private"))
        free = is_reproducible(report) or approx or math.isinf(eps)
        if ctx.experiment.local is not None and not free:
            return None
        note = ("reproducible noise: not private" if is_reproducible(report) else
                "only approximately private" if approx else "no guarantee" if math.isinf(eps) else "")
        return Release(dataset=ctx.experiment.dataset, stage="train", name=ctx.name,
                       mechanism=str(report.get("mechanism")), epsilon=math.inf if free else eps,
                       delta=float(report.get("delta") or 0.0), neighbours=neighbours(report),
                       output=os.path.abspath(ctx.generator_path), sha256=sha256_file(ctx.generator_path),
                       rdp=None if free or rdp is None else [float(v) for v in rdp], note=note, key=self.key)

    def confirm(self, ctx: TrainContext) -> None:
        """After the release: confirm the reservation with the model's own cost and hash."""
        from dpsynth.privacy.releases import CONFIRMED

        entry = self.release_entry(ctx)
        if entry is None:
            return
        if not self.held:  # a run that needed no reservation before (cannot happen: the loop reserves)
            self.ledger.record_found(entry)
            return
        self.ledger.settle(self.held[0].release, CONFIRMED, entry)

    def record_found(self, ctx: TrainContext) -> bool:
        """A run found already done: record its model if the ledger lacks it (its job died after the release,
        before confirming: its pending reservation is confirmed now). Whether anything was recorded."""
        entry = self.release_entry(ctx)
        if entry is None:
            return False
        entry.note = (entry.note + "; " if entry.note else "") + "found done on disk, not yet in the ledger"
        return self.ledger.record_found(entry)


def reserve_cells(ledger: ReleaseLedger, cells: list[RunLedger], resuming: list[bool], sweep: str) -> list[Held]:
    """``train-sweep``: reserve every cell trained together at once, or none, before the group's first step --
    each cell's target composed with the others' against its dataset's budget, a cell resuming from its
    (unfinished) checkpoint adopting its own earlier reservation. Each cell's ``dpsynth train`` adopts these
    when it releases the cell from its finished checkpoint."""
    wanted = [c.reservation({} if r else None) for c, r in zip(cells, resuming) if c.cost is not None]
    if not wanted:
        return []
    return ledger.reserve(wanted, cells[0].budgets, f"train-sweep {sweep}")
