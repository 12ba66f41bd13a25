"""One experiment as it runs: at a scale, with its privacy plan, seed, data and warm start, resolved
by one call (``resolve_run``) that the train stage and the Snakemake fingerprint both use."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable
from typing import Any, Literal

from pydantic import Field, ValidationError

from dpsynth.config.base import Strict, format_validation
from dpsynth.config.experiment import Experiment
from dpsynth.config.params import Params
from dpsynth.config.scales import ScalePreset
from dpsynth.errors import ConfigError


def apply_preset(exp: Experiment, preset: ScalePreset) -> tuple[Experiment, dict[str, Any]]:
    """The experiment as it runs at a scale, and the hyperparameters the scale changed.

    The scale's ``lr_multiplier`` multiplies the experiment's own lr (it never replaces it), so an
    edited lr, or a sweep over lr, keeps its effect and its ratios at every scale."""
    changes: dict[str, Any] = dict(preset.hparams.get(exp.method, {}))
    if (factor := preset.lr_multiplier.get(exp.method)) is not None and hasattr(exp.hparams, "lr"):
        changes["lr"] = float(f"{exp.hparams.lr * factor:.12g}")  # 1e-5 x 100 is 0.001, not 0.0010000000000000002
    cap = preset.batch_cap(exp.method)
    if (cap is not None and exp.hparams.batch_size > cap
            and not exp.spec.releases_once):  # its batches are generated samples, read at the paper's size
        changes["batch_size"] = cap
    changes = {k: v for k, v in changes.items() if getattr(exp.hparams, k, object()) != v}
    if not changes:
        return exp, {}
    try:
        hp = exp.spec.hparams.model_validate({**exp.hparams.model_dump(), **changes})
    except ValidationError as exc:
        raise ConfigError(format_validation(exc, prefix=f"scales.<{exp.method}> hparams")) from None
    return exp.model_copy(update={"hparams": hp}), {
        k: {"paper": getattr(exp.hparams, k), "this_scale": v} for k, v in changes.items()}


#: (sigma, batch size, epsilon, delta) -> the steps a method's accountant allows (the papers' way)
StepsAllowed = Callable[[float | None, int, float | None, float | None], int]


class BudgetReference(Strict):
    """A sweep's base as it runs at a scale: what a cell's share of the step budget is measured against."""

    epsilon: float
    delta: float
    sigma: float | None = None
    steps: int | None = None
    batch_size: int


class PrivacyPlan(Strict):
    """How a run meets its privacy target at a scale.

    - ``non_private``: no target; ``steps`` is the scale's step budget (None: the method's own).
    - ``derive_steps``: the papers' way -- ``sigma`` given, the steps are as many as the budget allows.
    - ``calibrate_sigma``: ``steps`` fixed (the experiment's, or a scale's budget when ``scale_budget``),
      sigma calibrated so the run spends exactly its (epsilon, delta); ``paper_sigma`` (or ``paper_steps``)
      is what the experiment gave, which that budget replaced.

    ``reference`` (a sweep cell under a step budget whose target or batch size differs from its
    base's): the base as it runs at this scale. The cell then trains ``budget x N(cell) / N(base)``
    steps, N being the steps each one's own target allows at the paper's way (sigma given, steps
    derived) -- so an ICLR Table 5 style ``batch_size x sigma`` sweep keeps its cells apart at a
    small scale the way the paper's are (a larger sigma buys more steps), each cell still spending
    exactly its epsilon. ``budget_steps`` computes it with the method's own accountant.
    """

    mode: Literal["non_private", "derive_steps", "calibrate_sigma"]
    epsilon: float | None = None
    delta: float | None = None
    steps: int | None = Field(default=None, gt=0)
    sigma: float | None = None
    paper_sigma: float | None = None
    paper_steps: int | None = None
    scale_budget: bool = False
    reference: BudgetReference | None = None

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
        if not self.scale_budget:
            return out
        out["paper_sigma"] = self.paper_sigma
        if self.reference is not None:
            out.update(paper_steps=self.paper_steps, reference=self.reference.model_dump(mode="json"))
        return out

    def budget_steps(self, batch_size: int, steps_allowed: StepsAllowed) -> int:
        """The steps this run trains: the plan's, or under a scale budget with a ``reference`` the
        budget scaled by ``N(this run) / N(reference)`` (``steps_allowed``: the method's accountant)."""
        assert self.steps is not None
        if self.reference is None:
            return self.steps
        ref = self.reference
        mine = self.paper_steps or steps_allowed(self.paper_sigma, batch_size, self.epsilon, self.delta)
        theirs = ref.steps or steps_allowed(ref.sigma, ref.batch_size, ref.epsilon, ref.delta)
        return max(1, round(self.steps * mine / max(theirs, 1)))



def resolve_privacy(exp: Experiment, preset: ScalePreset, base: Experiment | None = None) -> PrivacyPlan:
    """The privacy plan an experiment runs with at a scale (``base``: a sweep cell's base experiment).

    A scale with a step budget turns a sigma-specified target into a step-budget one (sigma
    is then calibrated to the same (epsilon, delta)); the target itself never changes. A cell whose
    target or batch size differs from its base's gets the base as its ``reference`` (see PrivacyPlan).
    """
    p = exp.privacy
    # a method that reads its data once spends its budget in that release at every scale
    budget = None if exp.spec.releases_once else preset.method_train_steps.get(exp.method, preset.train_steps)
    if not p.enabled:
        return PrivacyPlan(mode="non_private", steps=budget)
    if budget is not None:
        reference = None
        if base is not None and base.privacy.enabled and (
                base.privacy != p or base.hparams.batch_size != exp.hparams.batch_size):
            b = base.privacy
            reference = BudgetReference(epsilon=b.epsilon, delta=b.delta, sigma=b.sigma, steps=b.steps,
                                        batch_size=apply_preset(base, preset)[0].hparams.batch_size)
        return PrivacyPlan(mode="calibrate_sigma", epsilon=p.epsilon, delta=p.delta, steps=budget,
                           paper_sigma=p.sigma, paper_steps=p.steps, scale_budget=True, reference=reference)
    if p.sigma is not None:
        return PrivacyPlan(mode="derive_steps", epsilon=p.epsilon, delta=p.delta, sigma=p.sigma)
    return PrivacyPlan(mode="calibrate_sigma", epsilon=p.epsilon, delta=p.delta, steps=p.steps)


def check_sweep_at_scale(params: Params, sweep: str) -> None:
    """Refuse a sweep whose cells would train with one value of a swept hyperparameter that the
    user gave as several (a scale's ``max_batch_size`` cap, or a value its ``hparams`` set): the
    cells would re-train one model under different names. lr (a multiplier), sigma and epsilon
    (a budget share, see PrivacyPlan) and seeds always keep their effect."""
    experiments, preset = params.all_experiments(), params.preset
    cells = params.cells_of(sweep)
    declared = params.sweeps[sweep].cell_list()
    # n (the training-set size) is no hyperparameter: a train_subset below it is refused by RunSpec.train_indices
    for key in (k for k in declared[0] if k not in ("sigma", "epsilon", "seed", "n")):
        given: dict[Any, Any] = {}
        for name, values in zip(cells, declared):
            trained = getattr(apply_preset(experiments[name], preset)[0].hparams, key)
            if given.setdefault(trained, values[key]) != values[key]:
                method = experiments[name].method
                cap_key = (f"method_max_batch_size.{method}" if method in preset.method_max_batch_size
                           else "max_batch_size")
                capped = key == "batch_size" and preset.batch_cap(method) == trained
                why = (f"scales.{params.scale}.{cap_key} caps it" if capped
                       else f"scales.{params.scale}.hparams.{method}.{key} sets it")
                raise ConfigError(
                    f"sweeps.{sweep}: at scale {params.scale!r}, {key} {given[trained]!r} and {values[key]!r} would both "
                    f"train with {key} {trained!r} ({why}), so its cells would not differ in {key}; run this sweep at "
                    f"a scale that keeps {key} (e.g. --scale paper) or drop the override from scales.{params.scale}")


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

    def train_indices(self, n_records: int) -> Any:
        """Which of ``n_records`` training records this run trains on (sorted indices; None: all of them):
        THE one choice of a run's training set, read by the train stage, by the privatize stage of a run
        with ``train_size`` and by the evaluation's W2 to the training data. The scale's ``train_subset``
        (``data.dataset.subset_indices``, drawn with the run's seed), then the first ``train_size`` of those
        (the sweep key ``n``), so a sweep's smaller training sets are prefixes of its larger ones.

        Applied to its own output it keeps all of it (a file already holding the run's records: the
        subset of n <= train_subset records is None), so a privatize stage that wrote only these records
        and the train stage that reads them back agree. A ``train_size`` larger than the records there
        are is refused, naming the key."""
        import numpy as np

        from dpsynth.data.dataset import subset_indices

        idx = subset_indices(n_records, self.preset.train_subset, self.seed)
        size = self.experiment.train_size
        if size is None:
            return idx
        have = n_records if idx is None else len(idx)
        if size > have:
            raise ConfigError(f"{self.name}: train_size (sweep key n) {size} exceeds the {have} training records "
                              f"there are at scale {self.scale!r}; lower n or raise scales.{self.scale}.train_subset")
        return np.arange(size) if idx is None else idx[:size]

    def settings(self) -> dict[str, Any]:
        """What the run's fingerprint hashes: the experiment as run (without its description, a label
        for people), the scale's changes and the privacy plan; defaults left out, so a new field
        with a default does not re-run a finished pipeline."""
        dumped = self.experiment.model_dump(mode="json", exclude={"description"}, exclude_defaults=True)
        plan = self.privacy.record()
        if self.privacy.scale_budget and self.privacy.reference is None:
            # The scale's step budget replaced the sigma (or steps) the experiment gives: sigma is calibrated
            # from the target, so that value cannot change the run and an edit of it re-runs none of its jobs
            # (the report, which prints it, still re-runs). A sweep cell measured against a reference run
            # reads that run's sigma for its step share: it is in the cell's plan (``reference``).
            for key in ("sigma", "steps"):
                dumped.get("privacy", {}).pop(key, None)
            plan.pop("paper_sigma", None)
        return {"experiment": dumped, "overrides": self.overrides, "privacy_plan": plan}


def resolve_run(params: Params, name: str, seed: int | None = None) -> RunSpec:
    """The one resolution of a run: ``seed`` (the CLI's ``--seed``) wins over the experiment's, which
    wins over the first of ``seeds``."""
    experiments = params.all_experiments()
    if name not in experiments:
        raise ConfigError(f"no experiment named {name!r}")
    declared = experiments[name]
    exp, overrides = apply_preset(declared, params.preset)
    base = None
    if (sweep := params.sweep_of(name)) is not None:
        check_sweep_at_scale(params, sweep)
        base = params.experiments[params.sweeps[sweep].base]
    root = Path(params.data.root)
    data = root / "privatized" / f"{name}.npz" if exp.local is not None else root / "processed" / f"{exp.dataset}.npz"
    return RunSpec(
        name=name, experiment=exp, overrides=overrides, privacy=resolve_privacy(declared, params.preset, base),
        seed=seed if seed is not None else exp.seed if exp.seed is not None else params.seeds[0],
        scale=params.scale, preset=params.preset, data=data, warmstart=params.warmstart_for(name))
