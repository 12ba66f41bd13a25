"""Privacy core: accountants, the mechanism registry, gradient sanitizers, local mechanisms, reports, audit.

Layering: this package depends only on ``dpsynth.errors`` and ``dpsynth.io``; methods
import it, never the other way round. The names below are loaded on first use (PEP 562), not when
the package is imported: the config validates local mechanisms with ``privacy.mechanisms`` on every
params load and must not pay dp-accounting's seconds of import for it. The torch-based sanitizers
and the audit are not re-exported (import ``dpsynth.privacy.sanitizers``).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

#: name -> the module that defines it
_EXPORTS = {
    "CLASSIC_ORDERS": "accounting",
    "calibrate_sigma": "accounting",
    "epsilon": "accounting",
    "gaussian_epsilon_exact": "accounting",
    "max_steps": "accounting",
    "gswgan_epsilon": "gswgan_accounting",
    "gswgan_sound_max_steps": "gswgan_accounting",
    "gswgan_sound_sigma": "gswgan_accounting",
    "gaussian_mechanism": "local",
    "gaussian_sigma_eq5": "local",
    "laplace_mechanism": "local",
    "BudgetGuard": "report",
    "PrivacyReport": "report",
    "dp_sgd_report": "report",
    "gswgan_report": "report",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
