"""What every privacy mechanism is (``Mechanism``), what a run's plan offers it (``Plan``), what it plans
(``Schedule``) and the registry the mechanisms register into.

Why a file of its own: the mechanisms come in families (``central_mechanisms``, ``local_mechanisms``) that
register here, and ``privacy.mechanisms`` -- the registry's front door -- imports them; a base both sides
import keeps that free of import cycles. Light at import (no numpy, no accountant): the config reads the
registry on every params load.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from dpsynth.errors import PrivacyError

if TYPE_CHECKING:
    from dpsynth.privacy.report import BudgetGuard

#: The ``mechanism`` of a non-private run's report (no mechanism, no guarantee).
NON_PRIVATE = "none (non-private)"
#: The neighbouring relations a report's guarantee can be stated for (the ledger lists them per run;
#: not "none": the tables' never-an-empty-cell rule reads "none" as an empty cell).
ADD_REMOVE, REPLACE_ONE, LOCAL, NO_GUARANTEE = ("add/remove one", "replace one", "each record (local)",
                                                 "no guarantee (non-private run)")
#: (sigma, batch size, epsilon, delta) -> steps allowed: ``config.run.StepsAllowed``.
StepsAllowed = Callable[[float | None, int, float | None, float | None], int]
#: A method's own step count for a non-private run without a scale step budget (None: it has none).
DefaultSteps = Callable[[], int | None]


class Plan(Protocol):
    """What a mechanism reads of ``config.run.PrivacyPlan`` (privacy/ imports no config)."""

    @property
    def mode(self) -> str: ...
    @property
    def enabled(self) -> bool: ...
    @property
    def epsilon(self) -> float | None: ...
    @property
    def delta(self) -> float | None: ...
    @property
    def sigma(self) -> float | None: ...
    @property
    def steps(self) -> int | None: ...
    def budget_steps(self, batch_size: int, steps_allowed: StepsAllowed) -> int: ...


@dataclass(frozen=True)
class Schedule:
    """What a run trains with: noise multiplier (None: non-private), private steps, budget guard."""

    sigma: float | None
    steps: int
    guard: BudgetGuard | None = None


def report_number(report: dict[str, Any], key: str, where: str) -> float:
    """A finite number from a report (or its ``extra.local``), or PrivacyError naming ``where`` and the key."""
    v = report.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
        raise PrivacyError(f"{where}: privacy report field {key!r} must be a finite number, got {v!r}")
    return float(v)


class Mechanism:
    """A registered mechanism: how its reports are recomputed, composed and stated."""

    name: ClassVar[str]
    #: The neighbouring relation its epsilon is stated for (a mechanism may refine it per report).
    relation: ClassVar[str]
    #: Free-text ``mechanism`` descriptions (prefixes) its reports carried before reports named their
    #: registered mechanism (``mechanism_id``): read as this mechanism, a frozen list -- a new report names
    #: its mechanism, and an unregistered name is refused (``mechanisms.for_report``).
    legacy_descriptions: ClassVar[tuple[str, ...]] = ()

    def neighbours(self, report: dict[str, Any]) -> str:
        return self.relation

    def recompute(self, report: dict[str, Any], where: str, delta: float) -> dict[str, float]:
        """Every epsilon a report of this mechanism should list, from its recorded parameters."""
        raise NotImplementedError

    def composition_unit(self, report: dict[str, Any], where: str) -> tuple[float, float, str, int] | None:
        """``(noise multiplier, q, sampling, steps)``: the report's guarantee as ``steps`` subsampled
        Gaussians -- what verify recomputes and the ledger adds up; None: not central DP."""
        return None


#: name -> the one registered instance (filled by ``@register`` as the family modules load)
_REGISTRY: dict[str, Mechanism] = {}
C = TypeVar("C", bound=type[Mechanism])


def register(cls: C) -> C:
    """Class decorator: register one instance under ``cls.name`` (a name is registered once)."""
    if cls.name in _REGISTRY:
        raise PrivacyError(f"privacy mechanism {cls.name!r} is registered twice")
    _REGISTRY[cls.name] = cls()
    return cls

