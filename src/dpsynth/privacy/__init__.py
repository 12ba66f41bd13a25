"""Privacy core: accountants, gradient sanitizers, local mechanisms, reports, audit.

Layering: this package depends only on ``dpsynth.errors`` and ``dpsynth.io``; methods
import it, never the other way round. The torch-based sanitizers and the audit are
not re-exported here (import ``dpsynth.privacy.sanitizers``) so the CLI starts fast.
"""

from dpsynth.privacy.accounting import (
    CLASSIC_ORDERS,
    calibrate_sigma,
    epsilon,
    gaussian_epsilon_exact,
    gswgan_epsilon,
    gswgan_sound_max_steps,
    gswgan_sound_sigma,
    max_steps,
)
from dpsynth.privacy.local import gaussian_mechanism, gaussian_sigma_eq5, laplace_mechanism
from dpsynth.privacy.report import BudgetGuard, PrivacyReport, dp_sgd_report, gswgan_report

__all__ = [
    "CLASSIC_ORDERS",
    "BudgetGuard",
    "PrivacyReport",
    "calibrate_sigma",
    "dp_sgd_report",
    "epsilon",
    "gaussian_epsilon_exact",
    "gaussian_mechanism",
    "gaussian_sigma_eq5",
    "gswgan_epsilon",
    "gswgan_report",
    "gswgan_sound_max_steps",
    "gswgan_sound_sigma",
    "laplace_mechanism",
    "max_steps",
]
