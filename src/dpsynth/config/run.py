"""One experiment as it runs: at a scale, with its privacy plan, seed, data and warm start, resolved
by one call (``resolve_run``) that the train stage and the Snakemake fingerprint both use."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from dpsynth.config.base import Strict, format_validation
from dpsynth.config.experiment import Experiment
from dpsynth.config.params import Params
from dpsynth.config.scales import ScalePreset
from dpsynth.errors import ConfigError


def apply_preset(exp: Experiment, preset: ScalePreset) -> tuple[Experiment, dict[str, Any]]:
    """The experiment as it runs at a scale, and the hyperparameters the scale changed."""
    changes: dict[str, Any] = dict(preset.hparams.get(exp.method, {}))
    if preset.max_batch_size is not None and exp.hparams.batch_size > preset.max_batch_size:
        changes["batch_size"] = preset.max_batch_size
    changes = {k: v for k, v in changes.items() if getattr(exp.hparams, k, object()) != v}
    if not changes:
        return exp, {}
    try:
        hp = exp.spec.hparams.model_validate({**exp.hparams.model_dump(), **changes})
    except ValidationError as exc:
        raise ConfigError(format_validation(exc, prefix=f"scales.<{exp.method}> hparams")) from None
    return exp.model_copy(update={"hparams": hp}), {
        k: {"paper": getattr(exp.hparams, k), "this_scale": v} for k, v in changes.items()}


class PrivacyPlan(Strict):
    """How a run meets its privacy target at a scale.

    - ``non_private``: no target; ``steps`` is the scale's step budget (None: the method's own).
    - ``derive_steps``: the papers' way -- ``sigma`` given, the steps are as many as the budget allows.
    - ``calibrate_sigma``: ``steps`` fixed (the experiment's, or a scale's budget when ``scale_budget``),
      sigma calibrated so the run spends exactly its (epsilon, delta); ``paper_sigma`` is the sigma the
      experiment gave, which that budget replaced.
    """

    mode: Literal["non_private", "derive_steps", "calibrate_sigma"]
    epsilon: float | None = None
    delta: float | None = None
    steps: int | None = Field(default=None, gt=0)
    sigma: float | None = None
    paper_sigma: float | None = None
    scale_budget: bool = False

    @property
    def enabled(self) -> bool:
        return self.mode != "non_private"

    def record(self) -> dict[str, Any]:
        """The plan as written into outputs, checkpoints and fingerprints (only the keys its mode has)."""
        if self.mode == "non_private":
            return {"enabled": False, "mode": self.mode, "steps": self.steps}
        out: dict[str, Any] = {"enabled": True, "mode": self.mode, "epsilon": self.epsilon, "delta": self.delta}
        if self.mode == "derive_steps":
            return {**out, "sigma": self.sigma}
        out["steps"] = self.steps
        return {**out, "paper_sigma": self.paper_sigma} if self.scale_budget else out


def resolve_privacy(exp: Experiment, preset: ScalePreset) -> PrivacyPlan:
    """The privacy plan an experiment runs with at a scale.

    A scale with a step budget turns a sigma-specified target into a step-budget one (sigma
    is then calibrated to the same (epsilon, delta)); the target itself never changes.
    """
    p = exp.privacy
    budget = preset.method_train_steps.get(exp.method, preset.train_steps)
    if not p.enabled:
        return PrivacyPlan(mode="non_private", steps=budget)
    if budget is not None:
        return PrivacyPlan(mode="calibrate_sigma", epsilon=p.epsilon, delta=p.delta, steps=budget,
                           paper_sigma=p.sigma, scale_budget=True)
    if p.sigma is not None:
        return PrivacyPlan(mode="derive_steps", epsilon=p.epsilon, delta=p.delta, sigma=p.sigma)
    return PrivacyPlan(mode="calibrate_sigma", epsilon=p.epsilon, delta=p.delta, steps=p.steps)


@dataclass(frozen=True)
class RunSpec:
    """Everything params.yaml decides about one training run (a named experiment or a sweep cell)."""

    name: str
    experiment: Experiment  # as it runs at this scale
    overrides: dict[str, Any]  # hyperparameter -> {"paper": ..., "this_scale": ...}
    privacy: PrivacyPlan
    seed: int
    scale: str
    preset: ScalePreset
    data: Path  # the private records it trains on (privatized ones for a local-DP experiment)
    warmstart: str | None  # the warm start it trains from, if its method needs one

    def settings(self) -> dict[str, Any]:
        """What the run's fingerprint hashes: the experiment as run (without its description, a label
        for people), the scale's changes and the privacy plan; defaults left out, so a new field
        with a default does not re-run a finished pipeline."""
        dumped = self.experiment.model_dump(mode="json", exclude={"description"}, exclude_defaults=True)
        return {"experiment": dumped, "overrides": self.overrides, "privacy_plan": self.privacy.record()}


def resolve_run(params: Params, name: str, seed: int | None = None) -> RunSpec:
    """The one resolution of a run: ``seed`` (the CLI's ``--seed``) wins over the experiment's, which
    wins over the first of ``seeds``."""
    experiments = params.all_experiments()
    if name not in experiments:
        raise ConfigError(f"no experiment named {name!r}")
    declared = experiments[name]
    exp, overrides = apply_preset(declared, params.preset)
    root = Path(params.data.root)
    data = root / "privatized" / f"{name}.npz" if exp.local is not None else root / "processed" / f"{exp.dataset}.npz"
    return RunSpec(
        name=name, experiment=exp, overrides=overrides, privacy=resolve_privacy(declared, params.preset),
        seed=seed if seed is not None else exp.seed if exp.seed is not None else params.seeds[0],
        scale=params.scale, preset=params.preset, data=data, warmstart=params.warmstart_for(name))
