"""The privacy report every generator and synthetic dataset carries, and the budget guard.

The report is plain JSON (written atomically) so a table, a reviewer or a later stage
can read exactly which accountant and convention produced which epsilon. The guard is
what makes "training refuses to run past its target" true, including across resumes.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from importlib import metadata
from typing import Any

from dpsynth.errors import PrivacyError
from dpsynth.io import write_json
from dpsynth.privacy import accounting as acc
from dpsynth.privacy.gswgan_accounting import gswgan_epsilon, gswgan_sound_step

REPORT_VERSION = 1


def library_versions() -> dict[str, str]:
    """Versions of the code that produced a number (dpsynth, dp-accounting, torch)."""
    out: dict[str, str] = {}
    for dist in ("dpsynth", "dp-accounting", "torch"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "unknown"
    return out


@dataclass
class PrivacyReport:
    """A JSON-able record of one privacy guarantee.

    ``epsilon`` maps a convention name (``rdp_classic``, ``rdp_modern``, ``pld``, or
    for GS-WGAN ``as_published.rdp_classic`` ...) to its value; ``headline`` names the
    one a run is held to.
    """

    mechanism: str
    sigma: float | None
    delta: float
    epsilon: dict[str, float]
    headline: str
    steps: int | None = None
    q: float | None = None
    sampling: str | None = None
    dataset_size: int | None = None
    batch_size: int | None = None
    shards: int | None = None
    clip: float | None = None
    target_epsilon: float | None = None
    #: the registered mechanism (``privacy.mechanisms``) when ``mechanism`` is a description, not its name
    mechanism_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    noise: dict[str, Any] = field(default_factory=dict)  # NoiseSource.describe(): secret or reproducible
    versions: dict[str, str] = field(default_factory=library_versions)
    report_version: int = REPORT_VERSION

    def __post_init__(self) -> None:
        if self.headline not in self.epsilon:
            raise PrivacyError(f"headline {self.headline!r} is not one of the reported conventions {sorted(self.epsilon)}")

    @property
    def headline_epsilon(self) -> float:
        return self.epsilon[self.headline]

    @property
    def noised(self) -> bool:
        """False for a non-private run's report (headline ``non_private``): no privacy noise was drawn."""
        return self.headline != "non_private"

    def within_target(self, who: str) -> PrivacyReport:
        """This report, or PrivacyError if its headline epsilon exceeds the run's target (a method whose
        steps are not guarded one by one -- a single release, a schedule fixed in advance -- checks its
        report here before anything is written)."""
        if self.target_epsilon is not None and self.headline_epsilon > self.target_epsilon * (1 + 1e-9):
            raise PrivacyError(f"{who}: {self.steps} step(s) spend epsilon {self.headline_epsilon} "
                               f"> target {self.target_epsilon}")
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PrivacyReport:
        if d.get("report_version") != REPORT_VERSION:
            raise PrivacyError(f"unsupported privacy report version {d.get('report_version')!r}")
        return cls(**d)

    def write(self, path: str | os.PathLike[str]) -> None:
        write_json(path, self.to_dict())


def flatten_epsilon(d: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Nested accountant output -> {"sound.rdp_classic": eps, ...} without the *_order keys (what a report lists)."""
    out: dict[str, float] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten_epsilon(v, key + "."))
        elif not k.endswith("_order"):
            out[key] = float(v)
    return out


def dp_sgd_report(
    *,
    mechanism: str,
    sigma: float,
    batch_size: int,
    dataset_size: int,
    steps: int,
    delta: float,
    sampling: str = "poisson",
    clip: float | None = None,
    target_epsilon: float | None = None,
    pld: bool = False,
    q: float | None = None,
    extra: dict[str, Any] | None = None,
) -> PrivacyReport:
    """Report for a subsampled-Gaussian training run (DP-Sinkhorn and its variants).

    ``q`` defaults to batch_size / dataset_size; a scheme that samples something else per step
    (one of k fixed partitions: q = 1/k) passes its own rate."""
    if dataset_size < 1 or not 1 <= batch_size <= dataset_size:
        raise PrivacyError(f"need 1 <= batch_size ({batch_size}) <= dataset_size ({dataset_size})")
    q = batch_size / dataset_size if q is None else q
    eps = acc.epsilon(sigma, q, steps, delta, sampling=sampling, pld=pld)
    return PrivacyReport(
        mechanism=mechanism, sigma=sigma, delta=delta, epsilon=flatten_epsilon(eps), headline="rdp_classic",
        steps=steps, q=q, sampling=sampling, dataset_size=dataset_size, batch_size=batch_size,
        clip=clip, target_epsilon=target_epsilon, mechanism_id="subsampled_gaussian", extra=dict(extra or {}),
    )


def gswgan_report(
    *,
    sigma: float,
    shards: int,
    batch_size: int,
    steps: int,
    delta: float,
    dataset_size: int | None = None,
    clip: float | None = None,
    target_epsilon: float | None = None,
) -> PrivacyReport:
    """GS-WGAN report: both accountings; the headline (what a target is held to) is the sound one."""
    eps = gswgan_epsilon(sigma, shards, batch_size, steps, delta)
    return PrivacyReport(
        mechanism="gs_wgan", sigma=sigma, delta=delta, epsilon=flatten_epsilon(eps), headline="sound.rdp_classic",
        steps=steps, q=1.0 / shards, sampling="one shard per step", dataset_size=dataset_size,
        batch_size=batch_size, shards=shards, clip=clip, target_epsilon=target_epsilon,
    )


def gaussian_release_report(
    *,
    sigma: float,
    dataset_size: int,
    delta: float,
    bound: float,
    target_epsilon: float | None = None,
    extra: dict[str, Any] | None = None,
) -> PrivacyReport:
    """Report for ONE Gaussian release over every record (DP-MERF's mean embedding): one step, q = 1;
    ``bound`` is the per-record norm bound (the L2 sensitivity of the mean is 2 bound / n)."""
    eps = acc.gaussian_release_epsilon(sigma, delta)
    return PrivacyReport(
        mechanism="gaussian_release", sigma=sigma, delta=delta, epsilon=flatten_epsilon(eps),
        headline="rdp_classic", steps=1, q=1.0, sampling=None, dataset_size=dataset_size,
        batch_size=dataset_size, clip=bound, target_epsilon=target_epsilon, extra=dict(extra or {}),
    )


class BudgetGuard:
    """Stops training BEFORE the step that would push epsilon past the target.

    Built from (sigma, q, delta, target) it computes the exact step budget once; on a
    resume, pass ``steps_spent`` from the checkpoint so earlier steps are counted.
    Call :meth:`step` once per private step, before applying it.
    """

    def __init__(
        self,
        sigma: float,
        q: float,
        delta: float,
        target_eps: float,
        *,
        steps_spent: int = 0,
        conversion: str = "classic",
        sampling: str = "poisson",
    ) -> None:
        self.sigma, self.q, self.delta = acc.check_sigma(sigma), acc.check_q(q), acc.check_delta(delta)
        self.target_eps = acc.check_epsilon(target_eps, "target epsilon")
        self.conversion, self.sampling = acc.check_conversion(conversion), acc.check_sampling(sampling)
        self.spent = acc.check_steps(steps_spent, "steps_spent")
        self.budget = acc.max_steps(sigma, q, delta, target_eps, conversion=conversion, sampling=sampling)
        if self.spent > self.budget:
            raise PrivacyError(
                f"resumed run already spent {self.spent} steps, more than the {self.budget} allowed "
                f"for epsilon {self.target_eps} (sigma={sigma}, q={q}, delta={delta})"
            )

    @classmethod
    def for_gswgan(
        cls, sigma: float, shards: int, batch_size: int, delta: float, target_eps: float, *, steps_spent: int = 0
    ) -> BudgetGuard:
        """Guard on the SOUND GS-WGAN accounting (docs/deviations.md row 8: a target uses the sound one)."""
        return cls(*gswgan_sound_step(sigma, shards, batch_size), delta, target_eps, steps_spent=steps_spent)

    @property
    def remaining(self) -> int:
        return self.budget - self.spent

    def step(self) -> None:
        """Account one step; raise PrivacyError (and count nothing) if it would exceed the target."""
        if self.spent + 1 > self.budget:
            raise PrivacyError(
                f"privacy budget exhausted: step {self.spent + 1} would exceed epsilon {self.target_eps} "
                f"at delta {self.delta} ({self.conversion} conversion allows {self.budget} steps)"
            )
        self.spent += 1

    def epsilon_spent(self) -> float:
        return acc._epsilon_for(self.conversion, self.sigma, self.q, self.spent, self.delta, self.sampling)

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint stores so a resume counts the steps already spent."""
        return {"steps_spent": self.spent, "budget": self.budget, **{k: getattr(self, k) for k in
                ("sigma", "q", "delta", "target_eps", "conversion", "sampling")}}

    @classmethod
    def from_state_dict(cls, d: dict[str, Any]) -> BudgetGuard:
        return cls(d["sigma"], d["q"], d["delta"], d["target_eps"], steps_spent=d["steps_spent"],
                   conversion=d["conversion"], sampling=d["sampling"])
