"""The central-DP mechanisms: accounted over the dataset by RDP, planned from a run's target and guarded
step by step (``CentralMechanism``): the subsampled Gaussian (DP-Sinkhorn, DP-CGAN), GS-WGAN's per-critic
Gaussian under its sound account, and the single Gaussian release (DP-MERF).

Each plans, recomputes and composes with the same accounting calls the methods made before the registry
(classic RDP conversion; ``privacy.accounting``, ``privacy.gswgan_accounting``), imported when a number is
asked for: this module is loaded with the registry, which the config reads on every params load.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from dpsynth.errors import ConfigError, PrivacyError
from dpsynth.privacy.mechanism_base import (
    ADD_REMOVE,
    REPLACE_ONE,
    DefaultSteps,
    Mechanism,
    Plan,
    Schedule,
    StepsAllowed,
    register,
    report_number,
)

if TYPE_CHECKING:
    from dpsynth.privacy.report import BudgetGuard


def _flat(eps: dict[str, Any]) -> dict[str, float]:
    from dpsynth.privacy.report import flatten_epsilon

    return flatten_epsilon(eps)


def _steps(steps: object, where: str) -> int:
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise PrivacyError(f"{where}: privacy report field 'steps' must be a non-negative integer, got {steps!r}")
    return steps


def _lists_pld(report: dict[str, Any]) -> bool:
    """Whether the report lists a PLD epsilon (then its recomputation runs the PLD accountant too)."""
    return any(k.endswith("pld") for k in report.get("epsilon") or {})


@dataclass(frozen=True)
class TradeOffQuery:
    """One question of ``dpsynth privacy``: ``query`` is steps (the most within sigma and epsilon),
    epsilon (after sigma and steps) or sigma (the least that meets epsilon in steps); the others as given
    (None: not asked for). ``pld`` adds the PLD accountant beside RDP's two conversions."""

    query: str
    delta: float
    batch_size: int
    sigma: float | None = None
    epsilon: float | None = None
    steps: int | None = None
    dataset_size: int | None = None
    shards: int | None = None
    sampling: str = "poisson"
    pld: bool = False

    def conversions(self) -> tuple[tuple[str, str], ...]:
        """(conversion, row key) of each RDP-to-DP conversion asked for."""
        rows = (("classic", "rdp_classic"), ("modern", "rdp_modern"))
        return (*rows, ("pld", "pld")) if self.pld else rows


class CentralMechanism(Mechanism):
    """A mechanism accounted over the dataset by RDP: planned from the run's target, guarded per step."""

    #: The name ``dpsynth privacy --method`` offers it under (None: not offered), the inputs it needs
    #: beyond delta and batch size, and what its table's reader must know (printed under it).
    calculator: ClassVar[str | None] = None
    calculator_needs: ClassVar[tuple[str, ...]] = ()
    calculator_note: ClassVar[str | None] = None

    def trade_off(self, ask: TradeOffQuery) -> dict[str, Any]:
        """``{"q": ..., "results": {row: value}, ...}``: ``ask.query`` under every accountant and
        convention (``dpsynth privacy``), computed by the same accounting calls the runs plan with."""
        raise NotImplementedError

    def _plan(self, plan: Plan, who: str, batch_size: int, default_steps: DefaultSteps, steps_within: StepsAllowed,
              sigma_for: Callable[[int, float, float], float], guard: Callable[[float, float, float], BudgetGuard],
              unaffordable: Callable[[float, float], str]) -> Schedule:
        """The one path from a plan to (sigma, steps, guard): non-private (the scale's step budget, else
        the method's ``default_steps()``, asked for only then); ``derive_steps`` (sigma given, the most
        steps within the target, at least one); ``calibrate_sigma`` (the plan's steps -- a sweep cell's
        share of a scale budget measured with ``steps_within`` -- and the smallest sigma that meets the
        target in them)."""
        if not plan.enabled:
            steps = plan.steps or default_steps()
            if steps is None:
                raise ConfigError(f"{who}: a non-private run needs hparams.max_steps (or a scale step budget)")
            return Schedule(None, int(steps))
        eps, delta = plan.epsilon, plan.delta
        assert eps is not None and delta is not None
        if plan.mode == "derive_steps":
            sigma = float(plan.sigma)  # type: ignore[arg-type]
            steps = steps_within(sigma, batch_size, eps, delta)
            if steps < 1:
                raise ConfigError(unaffordable(sigma, eps))
        elif plan.mode == "calibrate_sigma":
            steps = plan.budget_steps(batch_size, steps_within)
            sigma = sigma_for(steps, delta, eps)
        else:
            raise ConfigError(f"unknown privacy mode {plan.mode!r}")
        return Schedule(sigma, steps, guard(sigma, delta, eps))


@register
class SubsampledGaussian(CentralMechanism):
    """Per step, a Gaussian of multiplier sigma over a sample of the records: Poisson at rate
    ``q = B / N`` (add/remove one), or one of k fixed partitions, ``q = 1 / k``, sampled without
    replacement (replace one). DP-Sinkhorn (both samplings), DP-CGAN's discriminator (Poisson)."""

    name = "subsampled_gaussian"
    relation = ADD_REMOVE
    #: what DP-Sinkhorn's and DP-CGAN's reports recorded before ``mechanism_id`` (``dp_sgd_report`` writes it)
    legacy_descriptions = ("dp_sinkhorn ", "dp_cgan: ")
    calculator = "dp_sgd"
    calculator_needs = ("dataset_size",)

    def trade_off(self, ask: TradeOffQuery) -> dict[str, Any]:
        from dpsynth.privacy import accounting as acc

        n, b = ask.dataset_size, ask.batch_size
        if n is None or n < 1 or not 1 <= b <= n:
            raise PrivacyError(f"need 1 <= --batch-size ({b}) <= --dataset-size ({n})")
        q, rows = b / n, {}
        if ask.query == "epsilon":
            eps = acc.epsilon(ask.sigma, q, ask.steps, ask.delta, sampling=ask.sampling, pld=ask.pld)
            rows = {k: v for k, v in eps.items() if not k.endswith("_order")}
        for conv, key in ask.conversions() if ask.query != "epsilon" else ():
            rows[key] = (acc.max_steps(ask.sigma, q, ask.delta, ask.epsilon, conversion=conv, sampling=ask.sampling)
                         if ask.query == "steps" else
                         acc.calibrate_sigma(q, ask.steps, ask.delta, ask.epsilon, conversion=conv,
                                             sampling=ask.sampling))
        return {"sampling": ask.sampling, "q": q, "results": rows}

    def schedule(self, plan: Plan, *, who: str, batch_size: int, rate: Callable[[int], float], sampling: str,
                 default_steps: DefaultSteps) -> Schedule:
        """``rate(b)``: q at batch size b (``b / N`` under Poisson; the fixed ``1 / k`` for partitions)."""
        from dpsynth.privacy import accounting as acc
        from dpsynth.privacy.report import BudgetGuard

        q = rate(batch_size)

        def steps_within(sigma: float | None, batch: int, eps: float | None, delta: float | None) -> int:
            return acc.max_steps(sigma, rate(batch), delta, eps,  # type: ignore[arg-type]
                                 conversion="classic", sampling=sampling)

        return self._plan(
            plan, who, batch_size, default_steps, steps_within,
            lambda steps, delta, eps: acc.calibrate_sigma(q, steps, delta, eps, conversion="classic",
                                                          sampling=sampling),
            lambda sigma, delta, eps: BudgetGuard(sigma, q, delta, eps, sampling=sampling),
            lambda sigma, eps: (f"{who}: sigma {sigma} cannot afford one step at epsilon {eps} (q = {q:.4g}); "
                                "raise sigma or give steps so sigma is calibrated"))

    def neighbours(self, report: dict[str, Any]) -> str:
        return REPLACE_ONE if report.get("sampling") == "without_replacement" else ADD_REMOVE

    def composition_unit(self, report: dict[str, Any], where: str) -> tuple[float, float, str, int]:
        from dpsynth.privacy.accounting import SAMPLINGS

        sigma, steps = report_number(report, "sigma", where), _steps(report.get("steps"), where)
        q, sampling = report_number(report, "q", where), report.get("sampling")
        if sampling not in SAMPLINGS:
            raise PrivacyError(f"{where}: privacy report field 'sampling' must be one of {SAMPLINGS}, got {sampling!r}")
        return sigma, q, str(sampling), steps

    def recompute(self, report: dict[str, Any], where: str, delta: float) -> dict[str, float]:
        from dpsynth.privacy import accounting as acc

        sigma, q, sampling, steps = self.composition_unit(report, where)
        return _flat(acc.epsilon(sigma, q, steps, delta, sampling=sampling, pld=_lists_pld(report)))


@register
class GSWGANGaussian(CentralMechanism):
    """GS-WGAN: per generator step, ``batch_size`` per-sample Gaussians from ONE critic's shard (picked
    with probability ``1 / shards``). Planned, guarded and composed under the SOUND account -- one
    Gaussian of multiplier ``sigma / sqrt(B)`` per step (docs/deviations.md row 8); reports carry the
    published per-sample count beside it."""

    name = "gs_wgan"
    relation = ADD_REMOVE
    calculator = "gs_wgan"
    calculator_needs = ("shards",)
    calculator_note = ("as_published: steps*B per-sample releases, sampled w/o replacement (the paper's code); "
                       "sound: one release of multiplier sigma/sqrt(B) per step (docs/deviations.md row 8) - "
                       "the real guarantee")

    def trade_off(self, ask: TradeOffQuery) -> dict[str, Any]:
        """The sound account beside the as-published one (``steps * B`` per-sample releases of one
        shard, sampled without replacement at q = 1 / shards), so the two are never mixed up."""
        from dpsynth.privacy import accounting as acc
        from dpsynth.privacy import gswgan_accounting as gs

        shards, b = ask.shards, ask.batch_size
        if shards is None or shards < 1 or b < 1:
            raise PrivacyError(f"--shards and --batch-size must be >= 1, got {shards}, {b}")
        q, rows = 1.0 / shards, {}
        if ask.query == "epsilon":
            for way, d in gs.gswgan_epsilon(ask.sigma, shards, b, ask.steps, ask.delta, pld=ask.pld).items():
                rows.update({f"{way}.{k}": v for k, v in d.items() if not k.endswith("_order")})
        for conv, key in ask.conversions() if ask.query != "epsilon" else ():
            if ask.query == "steps":
                rows[f"as_published.{key}"] = acc.max_steps(ask.sigma, q, ask.delta, ask.epsilon, conversion=conv,
                                                            sampling="without_replacement") // b
                rows[f"sound.{key}"] = gs.gswgan_sound_max_steps(ask.sigma, shards, b, ask.delta, ask.epsilon,
                                                                 conversion=conv)
            else:
                rows[f"as_published.{key}"] = acc.calibrate_sigma(q, ask.steps * b, ask.delta, ask.epsilon,
                                                                  conversion=conv, sampling="without_replacement")
                rows[f"sound.{key}"] = gs.gswgan_sound_sigma(shards, b, ask.steps, ask.delta, ask.epsilon,
                                                             conversion=conv)
        return {"shards": shards, "q": q, "results": rows}

    def schedule(self, plan: Plan, *, who: str, batch_size: int, shards: int, default_steps: DefaultSteps) -> Schedule:
        from dpsynth.privacy import gswgan_accounting as gs
        from dpsynth.privacy.report import BudgetGuard

        def steps_within(sigma: float | None, batch: int, eps: float | None, delta: float | None) -> int:
            return gs.gswgan_sound_max_steps(sigma, shards, batch, delta, eps)  # type: ignore[arg-type]

        return self._plan(
            plan, who, batch_size, default_steps, steps_within,
            lambda steps, delta, eps: gs.gswgan_sound_sigma(shards, batch_size, steps, delta, eps),
            lambda sigma, delta, eps: BudgetGuard.for_gswgan(sigma, shards, batch_size, delta, eps),
            lambda sigma, eps: (
                f"{who}: under the sound GS-WGAN accountant sigma {sigma} cannot afford one step at epsilon {eps} "
                f"(N_d={shards}, B={batch_size}); the published settings (sigma 1.07, N_d 1000, B 32) reach sound "
                "epsilon ~369 after 20,000 steps - state that epsilon, or give a step budget so sigma is calibrated"))

    def _shards_batch(self, report: dict[str, Any], where: str) -> tuple[int, int]:
        shards, batch = report.get("shards"), report.get("batch_size")
        if not isinstance(shards, int) or not isinstance(batch, int):
            raise PrivacyError(f"{where}: a GS-WGAN report needs integer 'shards' and 'batch_size'")
        return shards, batch

    def composition_unit(self, report: dict[str, Any], where: str) -> tuple[float, float, str, int]:
        from dpsynth.privacy.gswgan_accounting import gswgan_sound_step

        sigma, steps = report_number(report, "sigma", where), _steps(report.get("steps"), where)
        shards, batch = self._shards_batch(report, where)
        if not math.isclose(report_number(report, "q", where), 1.0 / shards, rel_tol=1e-12):
            raise PrivacyError(f"{where}: q={report['q']} is not 1/shards (shards={shards})")
        return (*gswgan_sound_step(sigma, shards, batch), "poisson", steps)

    def recompute(self, report: dict[str, Any], where: str, delta: float) -> dict[str, float]:
        from dpsynth.privacy.gswgan_accounting import gswgan_epsilon

        steps = self.composition_unit(report, where)[3]  # checks steps, shards, batch size and q
        shards, batch = self._shards_batch(report, where)
        sigma = report_number(report, "sigma", where)  # the per-sample multiplier (the unit's is sigma / sqrt(B))
        return _flat(gswgan_epsilon(sigma, shards, batch, steps, delta, pld=_lists_pld(report)))


@register
class GaussianRelease(CentralMechanism):
    """ONE Gaussian release over every record (DP-MERF's mean embedding): q = 1, one step, neighbours
    replace one record (the n records are public)."""

    name = "gaussian_release"
    relation = REPLACE_ONE

    def schedule(self, plan: Plan, *, who: str) -> Schedule:
        """sigma calibrated to the target, or the given sigma if one release at it meets the target."""
        from dpsynth.privacy import accounting as acc

        if not plan.enabled:
            return Schedule(None, 1)
        eps, delta = plan.epsilon, plan.delta
        assert eps is not None and delta is not None
        if plan.mode == "calibrate_sigma":
            return Schedule(acc.calibrate_sigma(1.0, 1, delta, eps), 1)
        sigma = float(plan.sigma)  # type: ignore[arg-type]  # derive_steps: sigma given
        spent = acc.epsilon(sigma, 1.0, 1, delta)["rdp_classic"]
        if spent > eps:
            raise ConfigError(f"{who}.sigma: one release at sigma {sigma} spends epsilon {spent:.4g} > the target "
                              f"{eps}; raise sigma or give steps: 1 to calibrate it")
        return Schedule(sigma, 1)

    def composition_unit(self, report: dict[str, Any], where: str) -> tuple[float, float, str, int]:
        sigma, steps = report_number(report, "sigma", where), _steps(report.get("steps"), where)
        if steps != 1 or report_number(report, "q", where) != 1.0:
            raise PrivacyError(f"{where}: a single Gaussian release has steps 1 and q 1, got steps={steps!r}, "
                               f"q={report.get('q')!r}")
        return sigma, 1.0, "poisson", 1

    def recompute(self, report: dict[str, Any], where: str, delta: float) -> dict[str, float]:
        from dpsynth.privacy.accounting import gaussian_release_epsilon

        sigma = self.composition_unit(report, where)[0]
        return _flat(gaussian_release_epsilon(sigma, delta, pld=_lists_pld(report)))
