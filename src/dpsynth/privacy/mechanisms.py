"""The privacy mechanism registry: one object per mechanism, registered by name; everyone outside
``privacy/`` asks it instead of comparing mechanism names.

Why: what differs between mechanisms -- planning (sigma, steps, budget guard) from a run's privacy plan,
recomputing a report's epsilon, the unit the ledger composes, the neighbouring relation, and for the
local mechanisms their config rules, projection and matched cost -- was written once per method (the
planning four times) and compared as name strings across the code. Each mechanism now states it once:

- ``subsampled_gaussian``: a Gaussian step per record sample, Poisson (add/remove one) or one of k fixed
  partitions without replacement (replace one): DP-Sinkhorn, DP-CGAN's DP-SGD;
- ``gs_wgan``: GS-WGAN's per-critic Gaussian under its SOUND account (``privacy.gswgan_accounting``);
- ``gaussian_release``: one Gaussian release over every record (DP-MERF; replace-one neighbours);
- ``local_laplace``, ``local_gaussian``: per-record local DP before training (``privacy.local``).

The methods plan with ``get(name, Kind).schedule(plan, ...)``; ``privacy.verify`` (and through it the
ledger) finds a report's mechanism with ``for_report``; the config, the privatize stage and the entropic
WGAN's loss use ``local(config name)``; ``dpsynth privacy`` answers its questions with ``calculators()``.

Adding a mechanism touches one file plus its tests (tests/test_privacy_mechanisms.py): a ``@register``
subclass in ``central_mechanisms.py`` or ``local_mechanisms.py`` (base classes and the registry itself:
``mechanism_base.py``). Light at import: no numpy and no accountant until a number is asked for, since
the config validates local mechanisms with this registry on every params load.
"""

from __future__ import annotations

from typing import Any, TypeVar, overload

from dpsynth.errors import PrivacyError, did_you_mean
from dpsynth.privacy.central_mechanisms import (
    CentralMechanism,
    GaussianRelease,
    GSWGANGaussian,
    SubsampledGaussian,
    TradeOffQuery,
)
from dpsynth.privacy.local_mechanisms import LocalGaussian, LocalLaplace, LocalNoise
from dpsynth.privacy.mechanism_base import (
    _REGISTRY,
    ADD_REMOVE,
    LOCAL,
    NO_GUARANTEE,
    NON_PRIVATE,
    REPLACE_ONE,
    Mechanism,
    Plan,
    Schedule,
    register,
    report_number,
)

__all__ = [
    "ADD_REMOVE", "LOCAL", "NON_PRIVATE", "NO_GUARANTEE", "REPLACE_ONE", "CentralMechanism", "GSWGANGaussian",
    "GaussianRelease", "LocalGaussian", "LocalLaplace", "LocalNoise", "Mechanism", "Plan", "Schedule",
    "SubsampledGaussian", "TradeOffQuery", "calculators", "for_report", "get", "local", "local_names", "names",
    "register",
    "report_number",
]

M = TypeVar("M", bound=Mechanism)


def names() -> tuple[str, ...]:
    """Every registered mechanism's name, in registration order."""
    return tuple(_REGISTRY)


@overload
def get(name: str) -> Mechanism: ...
@overload
def get(name: str, kind: type[M]) -> M: ...
def get(name: str, kind: type[Mechanism] = Mechanism) -> Mechanism:
    """The mechanism registered as ``name`` (checked to be a ``kind``), or one PrivacyError line."""
    mech = _REGISTRY.get(name)
    if mech is None:
        raise PrivacyError(f"unknown privacy mechanism {name!r} (known: {', '.join(_REGISTRY)})"
                           f"{did_you_mean(name, _REGISTRY)}")
    if not isinstance(mech, kind):
        raise PrivacyError(f"privacy mechanism {name!r} is not a {kind.__name__}")
    return mech


def for_report(report: dict[str, Any], where: str) -> Mechanism | None:
    """The mechanism a privacy report records; None for a non-private run. A report names a registered
    mechanism in ``mechanism``, or -- a DP-SGD-style report, whose ``mechanism`` describes its sanitizer --
    in ``mechanism_id``; a report written before ``mechanism_id`` existed is read by its description
    (``Mechanism.legacy_descriptions``). Anything else is refused in one line: a report of a mechanism the
    registry does not know is never accounted as another one."""
    name = report.get("mechanism")
    if name == NON_PRIVATE:
        return None
    if isinstance(name, str) and name in _REGISTRY:
        return _REGISTRY[name]
    named = report.get("mechanism_id")
    if named is None and isinstance(name, str):
        named = next((m.name for m in _REGISTRY.values() if name.startswith(m.legacy_descriptions)), None)
    if isinstance(named, str) and named in _REGISTRY:
        return _REGISTRY[named]
    said = f"mechanism {name!r}" + (f" (mechanism_id {named!r})" if named is not None else "")
    raise PrivacyError(f"{where}: unknown privacy {said}: no registered mechanism (known: {', '.join(_REGISTRY)}) "
                       "accounts it; refusing it")


def local(config_name: str) -> LocalNoise:
    """The local mechanism a ``local: mechanism:`` value of params.yaml names (its ``config_name``)."""
    known = {m.config_name: m for m in _REGISTRY.values() if isinstance(m, LocalNoise)}
    if config_name not in known:
        raise PrivacyError(f"unknown local mechanism {config_name!r} (known: {', '.join(known)})"
                           f"{did_you_mean(config_name, known)}")
    return known[config_name]


def local_names() -> tuple[str, ...]:
    """Every local mechanism's ``config_name`` (the ``local: mechanism:`` choices), in registration order."""
    return tuple(m.config_name for m in _REGISTRY.values() if isinstance(m, LocalNoise))


def calculators() -> dict[str, CentralMechanism]:
    """The mechanisms ``dpsynth privacy --method NAME`` offers, by that name (``CentralMechanism.calculator``)."""
    return {m.calculator: m for m in _REGISTRY.values() if isinstance(m, CentralMechanism) and m.calculator}
