"""params.yaml: pydantic models, scale presets and experiment expansion.

One loader (``load_params``) serves the CLI, the Snakefile, DVC's stage commands and the
tests, so a bad value fails the same way everywhere: before any work starts, with the
key path and the reason (``ConfigError``). Models forbid unknown keys so a typo such as
``epsilom`` is an error, not a silently ignored setting.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from dpsynth.errors import ConfigError

ScaleName = Literal["smoke", "quick", "paper"]
MethodName = Literal["dp_sinkhorn", "gs_wgan", "entropic_wgan"]
OptimizerName = Literal["adam", "sgd", "rmsprop"]

#: Sweepable keys: a sweep list over one of these expands into experiments.
SWEEP_KEYS = ("p", "m", "sigma", "lr", "optimizer", "batch_size", "epsilon", "seed")
SweepKey = Literal["p", "m", "sigma", "lr", "optimizer", "batch_size", "epsilon", "seed"]

_NAME_RE = r"^[A-Za-z][A-Za-z0-9_.\-]*$"
Name = Annotated[str, Field(pattern=_NAME_RE, max_length=120)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------------- scales


class ScalePreset(_Strict):
    """Overrides that make a run smaller without changing what it means."""

    train_steps: int | None = Field(
        default=None,
        gt=0,
        description="Step budget; None keeps the experiment's own (paper) setting. A private run "
        "under a step budget calibrates sigma to meet its (epsilon, delta) target.",
    )
    train_subset: int | None = Field(default=None, gt=0, description="Private training records used.")
    n_synthetic: int = Field(gt=0, description="Labelled images per synthetic dataset.")
    n_synthetic_sets: int = Field(gt=0, description="Synthetic datasets per generator.")
    classifier_max_epochs: int = Field(gt=0)
    classifier_train_subset: int | None = Field(default=None, gt=0)
    fid_samples: int = Field(gt=0, description="generated (or, for a real row, real training) images per FID")
    fid_reference_samples: Annotated[int, Field(gt=0)] | Literal["all"] | None = Field(
        default=None, description="real test images on FID's reference side: a count, 'all' (the whole test "
        "split, the papers' protocol), or None (as many as fid_samples)")
    max_batch_size: int | None = Field(default=None, gt=0, description="cap on batch sizes (a CPU cannot "
                                       "afford the non-private batch of 500); recorded in every output")
    hparams: dict[MethodName, dict[str, Any]] = Field(default_factory=dict, description="per-method "
                                                      "hyperparameter overrides for short runs (validated; "
                                                      "recorded in every output)")
    method_train_steps: dict[MethodName, int] = Field(default_factory=dict, description="per-method step "
                                                      "budget, overriding train_steps")
    warmup_steps: int | None = Field(default=None, gt=0, description="GS-WGAN critic warm start.")
    n_critics: int | None = Field(default=None, gt=0, description="GS-WGAN shard/critic count.")
    w2_noise_steps: int | None = Field(default=None, gt=0, description="generator steps per (loss, noise) "
                                       "of the W2-vs-noise sweep; None keeps the sweep's own")
    w2_noise_train_subset: int | None = Field(default=None, gt=0, description="clean training records the "
                                              "W2-vs-noise sweep privatizes; None: all")


# --------------------------------------------------------------------------- privacy


class PrivacyTarget(_Strict):
    """(epsilon, delta) plus exactly one of: a noise multiplier or a step budget.

    With ``sigma`` the number of steps is derived (the papers' way); with ``steps`` the
    noise multiplier is calibrated (how a small scale stays honest at epsilon 10).
    ``enabled: false`` is a non-private run and must not carry a target.
    """

    enabled: bool = True
    epsilon: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    delta: float | None = Field(default=None, gt=0, lt=1, allow_inf_nan=False)
    sigma: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    steps: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _consistent(self) -> "PrivacyTarget":
        if not self.enabled:
            if any(v is not None for v in (self.epsilon, self.delta, self.sigma)):
                raise ValueError("a non-private run (enabled: false) takes no epsilon, delta or sigma")
            return self
        if self.epsilon is None or self.delta is None:
            raise ValueError("a private run needs both epsilon and delta")
        if (self.sigma is None) == (self.steps is None):
            raise ValueError("give exactly one of sigma (steps derived) or steps (sigma calibrated)")
        return self


# --------------------------------------------------------------------------- hyperparameters


class Hyper(_Strict):
    """Hyperparameters shared by the methods; each method reads the ones it uses."""

    batch_size: int = Field(default=50, gt=0)
    lr: float = Field(default=1e-5, gt=0, allow_inf_nan=False)
    optimizer: OptimizerName = "adam"
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = Field(default=0.0, ge=0)
    generator: str = Field(default="dcgan", description="dpsynth.nets generator name")
    max_steps: int | None = Field(default=None, gt=0, description="steps of a non-private run when the "
                                  "scale sets no step budget")
    sinkhorn_iters: int | None = Field(default=None, gt=0, description="Sinkhorn iterations per solve "
                                       "(None: the method's default)")
    sinkhorn_scaling: float | None = Field(default=0.5, gt=0, lt=1, description="eps-scaling factor of the "
                                           "annealed solver (None: no annealing)")
    # DP-Sinkhorn
    p: float = Field(default=0.2, ge=0, le=1, description="semi-debias mixture fraction")
    m: float = Field(default=0.0, ge=0, description="L1 weight in the ground cost")
    alpha_c: float = Field(default=15.0, ge=0, description="label one-hot scale in the joint space")
    temperature: float = Field(default=0.05, gt=0, description="entropic eps, in the cost's units")
    clip: float = Field(default=0.5, gt=0, description="clipping bound C")
    sanitizer: Literal["image", "param", "none"] = "image"
    adversarial: bool = Field(default=False, description="adversarial feature cost (ICLR Table 2): one "
                              "feature extractor per fixed partition, one partition drawn per step")
    alpha_a: float = Field(default=15.0, ge=0, description="feature weight (not given in the paper; ours)")
    partitions: int | None = Field(default=None, ge=2, description="adversarial variant: number of "
                                   "partitions k (None: N // batch_size, the paper's batches-as-records)")
    feature_lr: float | None = Field(default=None, gt=0, description="feature extractors' Adam lr (None: lr)")
    # GS-WGAN
    critic_steps: int = Field(default=5, gt=0)
    gp_weight: float = Field(default=10.0, ge=0)
    drift: float = Field(default=1e-3, ge=0, description="critic drift penalty on D(real)^2")
    ema_decay: float = Field(default=0.999, ge=0, lt=1, description="released generator = EMA of the generator")
    model_dim: int = Field(default=64, gt=0, description="generator width d: GS-WGAN's generator/critic width; "
                           "DP-Sinkhorn's DCGAN generator has channels (4d, 2d, d), the published 64")
    # entropic WGAN (local privacy)
    loss: Literal["entropic", "exact", "sinkhorn_divergence"] = "entropic"
    cost_p: Literal[1, 2] | None = Field(default=None, description="p of the ||x-y||_p^p cost; None: matched "
                                         "to the local mechanism (laplace -> 1, gaussian -> 2)")
    allow_mismatch: bool = Field(default=False, description="allow a cost_p that does not match the local "
                                 "mechanism (ablation only; otherwise an error)")
    geomloss_scaling: float | None = Field(
        default=None, gt=0, lt=1, description="entropic WGAN: geomloss's eps-scaling, as seed 003 ran its 2-D "
        "experiments (0.99): the blur falls by this ratio per iteration, i.e. the temperature by its p-th power, "
        "from the largest possible cost down to lambda, one update per temperature; the iteration count is that "
        "schedule's length: sinkhorn_iters must not be given with it, and sinkhorn_scaling is not used")

    @model_validator(mode="after")
    def _one_schedule(self) -> "Hyper":
        if self.geomloss_scaling is not None and self.sinkhorn_iters is not None:
            raise ValueError("geomloss_scaling sets the number of Sinkhorn iterations (its schedule's length); "
                             f"drop sinkhorn_iters ({self.sinkhorn_iters})")
        return self

    @field_validator("betas")
    @classmethod
    def _betas(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not all(0 <= b < 1 for b in v):
            raise ValueError(f"betas must lie in [0, 1), got {list(v)}")
        return v


class LocalMechanism(_Strict):
    """Local (per-record) privatization applied before training (seed 003)."""

    mechanism: Literal["laplace", "gaussian"]
    epsilon: float = Field(gt=0, allow_inf_nan=False)
    delta: float | None = Field(default=None, gt=0, lt=0.5)
    radius: float = Field(gt=0, allow_inf_nan=False)
    dct: bool = False
    dct_quantile: float = Field(default=0.8, ge=0, lt=1)
    seed: int = 0

    @model_validator(mode="after")
    def _delta_for_gaussian(self) -> "LocalMechanism":
        if self.mechanism == "gaussian" and self.delta is None:
            raise ValueError("the Gaussian mechanism needs delta in (0, 0.5)")
        if self.mechanism == "laplace" and self.delta is not None:
            raise ValueError("the Laplace mechanism is pure epsilon-DP: remove delta")
        if self.dct and self.mechanism != "laplace":
            raise ValueError("the DCT option belongs to the Laplace mechanism")
        return self


class Experiment(_Strict):
    method: MethodName
    dataset: Name
    privacy: PrivacyTarget = PrivacyTarget(enabled=False)
    hparams: Hyper = Hyper()
    local: LocalMechanism | None = None
    seed: int | None = Field(default=None, ge=0, description="training seed (weights, data order, subset); "
                             "None: the first of params seeds. Privacy noise stays secret either way")
    description: str = ""

    @model_validator(mode="after")
    def _method_rules(self) -> "Experiment":
        if self.method == "dp_sinkhorn" and self.privacy.enabled and self.hparams.sanitizer == "none":
            raise ValueError("a private DP-Sinkhorn run needs a sanitizer (image or param), not 'none'")
        if self.local is not None:
            if self.method != "entropic_wgan":
                raise ValueError("local privatization (local:) is for the entropic_wgan method")
            if self.privacy.enabled:
                raise ValueError("an experiment on locally privatized data spends its budget in "
                                 "local:, so privacy.enabled must be false")
        return self


class Sweep(_Strict):
    """Experiments derived from a base experiment: a full ``grid`` over sweep keys, or an explicit
    list of ``cells`` (the papers' grids are not always full products)."""

    base: Name
    grid: dict[SweepKey, list[Any]] | None = None
    cells: list[dict[SweepKey, Any]] | None = None
    train_together: bool = Field(default=False, description="train the cells in one job with the batched sweep "
                                 "(stacked parameters, one device; each cell keeps its own secret noise, accountant "
                                 "and outputs): pays on a GPU, not on a CPU. DP-Sinkhorn, Adam, image sanitizer")

    @model_validator(mode="after")
    def _shape(self) -> "Sweep":
        if (self.grid is None) == (self.cells is None):
            raise ValueError("give exactly one of grid (a full product) or cells (an explicit list)")
        if self.grid is not None:
            if not self.grid:
                raise ValueError("a sweep grid needs at least one key")
            for key, values in self.grid.items():
                if not values:
                    raise ValueError(f"sweep list {key!r} is empty")
                for v in values:
                    _check_sweep_value(key, v)
                for i, j in _equal_pairs(values):
                    raise _KeyedValueError(
                        f"grid.{key}", f"values {values[i]!r} and {values[j]!r} (items {i} and {j} of {values}) "
                        "are equal, so two cells would be the same experiment; keep one")
        else:
            if not self.cells:
                raise ValueError("a sweep needs at least one cell")
            keys = set(self.cells[0])
            for cell in self.cells:
                if set(cell) != keys:
                    raise ValueError(f"every cell must set the same keys {sorted(keys)}, got {sorted(cell)}")
                for k, v in cell.items():
                    _check_sweep_value(k, v)
            for i, j in _equal_pairs([dict(c) for c in self.cells]):
                raise _KeyedValueError(
                    "cells", f"cells {i} {dict(self.cells[i])} and {j} {dict(self.cells[j])} are equal "
                    "(numerically), so they would be the same experiment; keep one")
        return self

    def cell_list(self) -> list[dict[str, Any]]:
        if self.cells is not None:
            return [dict(c) for c in self.cells]
        assert self.grid is not None
        keys = list(self.grid)
        return [dict(zip(keys, vals)) for vals in itertools.product(*(self.grid[k] for k in keys))]


class _KeyedValueError(ValueError):
    """A validation error about a key *below* the model being validated (e.g. ``grid.m`` of a sweep):
    ``_format_validation`` appends ``subkey`` to pydantic's location, so the message names the full
    path ``sweeps.<name>.grid.m`` instead of stopping at ``sweeps.<name>``."""

    def __init__(self, subkey: str, message: str) -> None:
        super().__init__(message)
        self.subkey = subkey


def _equal_pairs(values: list[Any]) -> list[tuple[int, int]]:
    """Index pairs of equal items. Compared by value, not by ``str()``: YAML's ``1`` and ``1.0`` (or
    ``1.0e-5`` and ``0.00001``) print differently, so they would make two differently named cells that
    are the same experiment (and spend the privacy budget twice for one result)."""
    return [(i, j) for j in range(len(values)) for i in range(j) if values[i] == values[j]]


def _check_sweep_value(key: str, v: Any) -> None:
    """Sweep values must be real YAML numbers (or an optimizer name): cell names are built from
    them with ``str()`` exactly as DVC's matrix interpolation prints them."""
    if key == "optimizer":
        if not isinstance(v, str):
            raise ValueError(f"optimizer sweep values must be names, got {v!r}")
        return
    if key == "seed" and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
        raise ValueError(f"seed sweep values must be whole numbers >= 0, got {v!r}")
    if isinstance(v, bool) or not isinstance(v, int | float):
        hint = " (write 1.0e-5, not 1e-5: YAML 1.1 reads the latter as text)" if isinstance(v, str) else ""
        raise ValueError(f"sweep value for {key!r} must be a number, got {v!r}{hint}")


class TableRow(_Strict):
    """One row of a report table: the paper's row and the run that reproduces it.

    ``experiment`` (a named experiment or sweep cell) or ``real`` (a dataset: its
    ``results/real/{real}/metrics.json``) names our run; a row with neither is the
    paper's "reported only" row. ``paper_row`` is a row id of the table's ``published``
    table in ``dpsynth/report/published.yaml`` (``other_table:row`` picks another one);
    None: the paper has no such row.
    """

    label: str
    experiment: Name | None = None
    real: Name | None = None
    paper_row: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> "TableRow":
        if self.experiment is not None and self.real is not None:
            raise ValueError("a row takes experiment or real, not both")
        if self.experiment is None and self.real is None and self.paper_row is None:
            raise ValueError("a row needs experiment, real or paper_row")
        return self


class Table(_Strict):
    title: str
    paper: str = Field(description="where the published numbers come from (seed and table)")
    experiments: list[Name] = []
    sweeps: list[Name] = []
    kind: Literal["methods", "grid", "w2_noise", "privacy"] = Field(
        default="methods", description="methods: rows below; grid: one row per sweep cell, matched to the "
        "paper's rows by the swept values; w2_noise: results/w2_noise/{dataset}.csv; privacy: every run's "
        "epsilon by accountant and convention")
    published: str | None = Field(default=None, description="table id in dpsynth/report/published.yaml")
    dataset: Name | None = Field(default=None, description="picks the paper's columns for this dataset "
                                 "(e.g. mnist.fid); w2_noise: the sweep CSV's dataset")
    rows: list[TableRow] = []
    notes: list[str] = Field(default_factory=list, description="ours about this table (a deviation from the "
                             "papers, the papers disagreeing with each other); printed under the table")


class DataSettings(_Strict):
    root: str = "data"
    local_dirs: list[str] = Field(default_factory=list, description="searched for raw files first")
    celeba_dir: str | None = None
    mirrors: dict[str, list[str]] = Field(default_factory=dict, description="per-dataset mirror override")


class Target(_Strict):
    """One pipeline target: its dataset and the data it trains on (``processed/<dataset>``, or
    ``privatized/<experiment>`` for local-DP experiments)."""

    dataset: Name
    data: str
    warmstart: Name | None = Field(default=None, description="GS-WGAN: the warm start it trains from "
                                   "(private/warmstart/<name>); checked")


#: Hyperparameters that shape GS-WGAN's warm-started critics: cells of a sweep that leave them
#: alone (a sigma sweep) reuse their base's warm start.
CRITIC_HPARAMS = ("batch_size", "lr", "betas", "critic_steps", "gp_weight", "drift", "model_dim")


class W2NoiseSweep(_Strict):
    """Seed 003 Fig. 5 as a pipeline stage: Gaussian noise N(0, s^2) per coordinate on the clean
    training records, one generator per (loss, s), W2 to clean held-out records. Defaults are
    section 4.5's (MLP 2x500, latent U[0,1]^2, Sinkhorn L = 200, batch b = 200)."""

    noise_levels: list[Annotated[float, Field(gt=0, allow_inf_nan=False)]]
    losses: list[Literal["entropic", "exact", "sinkhorn_divergence"]] = ["entropic", "exact", "sinkhorn_divergence"]
    steps: int = Field(default=20000, gt=0, description="generator steps per (loss, noise); the scale may cap it")
    batch_size: int = Field(default=200, gt=0)
    lr: float = Field(default=1e-4, gt=0, allow_inf_nan=False)
    sinkhorn_iters: int = Field(default=200, gt=0)
    n_eval: int = Field(default=1000, gt=1, description="records per side of the exact-OT W2")
    scales: list[ScaleName] | None = Field(default=None, description="scales at which the sweep trains (None: "
                                           "every scale); at any other scale its stage writes an empty result "
                                           "that says so (the MNIST sweep is hours on a CPU)")

    @field_validator("noise_levels", "losses", "scales")
    @classmethod
    def _nonempty_unique(cls, v: list[Any] | None) -> list[Any] | None:
        if v is None:
            return v
        if not v or len(set(v)) != len(v):
            raise ValueError(f"must be a non-empty list without duplicates, got {v}")
        return v


class EvaluationSettings(_Strict):
    """Downstream protocol settings (DESIGN 7); sizes come from the scale preset."""

    classifiers: list[Literal["logreg", "mlp", "cnn"]] = ["logreg", "mlp", "cnn"]
    real_datasets: list[Name] = Field(default_factory=list, description="datasets that get a 'real data' row")
    fid_weights: str | None = Field(default=None, description="local torch-fidelity Inception weights file")
    fid_download: bool = Field(default=True, description="let torch-fidelity fetch the weights if missing")
    fid_download_timeout: float = Field(default=120.0, gt=0)


class Params(_Strict):
    scale: ScaleName = "quick"
    seeds: list[Annotated[int, Field(ge=0)]] = [0]
    threads: int = Field(default=1, ge=1, le=256, description="CPU threads per job; results depend on it "
                         "(float summation order), so it is part of the configuration")
    privacy_noise: Literal["secret", "reproducible"] = Field(
        default="secret", description="secret: privacy noise and sampling from fresh OS entropy (the only private "
        "mode); reproducible: derived from the seeds, bit-identical reruns, every output labelled not private")
    data: DataSettings = DataSettings()
    evaluation: EvaluationSettings = EvaluationSettings()
    datasets: list[Name]
    scales: dict[ScaleName, ScalePreset]
    experiments: dict[Name, Experiment] = {}
    targets: dict[Name, "Target"] = Field(default_factory=dict, description="what the pipeline trains, samples "
                                          "and evaluates (dataset and data path are repeated so dvc.yaml can "
                                          "name each stage's dependencies; they are checked)")
    privatize: dict[Name, Name] = Field(default_factory=dict, description="local-DP targets -> dataset: "
                                        "privatized once before training (exactly the local targets; checked)")
    gswgan_targets: dict[Name, "Target"] = Field(default_factory=dict, description="GS-WGAN targets: like "
                                                 "targets, plus the warm start they train from")
    warmstarts: dict[Name, Name] = Field(default_factory=dict, description="GS-WGAN warm starts the pipeline "
                                         "makes -> dataset (exactly those the GS-WGAN targets need; checked)")
    sweep_targets: list[Name] = Field(default_factory=list, description="sweeps whose every cell is a pipeline "
                                      "target (dvc.yaml holds a matrix stage group per such sweep)")
    w2_noise: dict[Name, W2NoiseSweep] = Field(default_factory=dict, description="dataset -> the W2-vs-noise "
                                               "sweep the pipeline runs on it (results/w2_noise/<dataset>.csv)")
    sweeps: dict[Name, Sweep] = {}
    tables: dict[Name, Table] = {}

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: list[int]) -> list[int]:
        if not v or len(set(v)) != len(v):
            raise ValueError("seeds must be a non-empty list without duplicates")
        return v

    @model_validator(mode="after")
    def _cross_refs(self) -> "Params":
        # lazy: config is imported by the data layer's CLI
        from dpsynth.data.registry import DATASETS, unknown_dataset_message

        for name in self.datasets:
            if name not in DATASETS:
                raise ValueError(f"datasets: {unknown_dataset_message(name)}")
        missing = [s for s in ("smoke", "quick", "paper") if s not in self.scales]
        if missing:
            raise ValueError(f"scales: missing preset(s) {missing}")
        for ename, exp in self.experiments.items():
            if exp.dataset not in DATASETS:
                raise ValueError(f"experiments.{ename}.dataset: {unknown_dataset_message(exp.dataset)}")
        for t, tgt in self.targets.items():
            if t not in self.experiments:
                raise ValueError(f"targets.{t}: no experiment named {t!r}")
            exp = self.experiments[t]
            if tgt.dataset != exp.dataset:
                raise ValueError(f"targets.{t}.dataset: says {tgt.dataset!r} but the experiment uses {exp.dataset!r}")
            want = f"privatized/{t}" if exp.local is not None else f"processed/{exp.dataset}"
            if tgt.data != want:
                raise ValueError(f"targets.{t}.data: must be {want!r} (got {tgt.data!r})")
            if tgt.dataset not in self.datasets:
                raise ValueError(f"targets.{t}: dataset {tgt.dataset!r} is not in datasets (add it there)")
        local = {t: self.experiments[t].dataset for t in self.targets if self.experiments[t].local is not None}
        if dict(self.privatize) != local:
            raise ValueError(f"privatize: must list exactly the local-DP targets with their datasets, {local}")
        for t in self.targets:
            if self.experiments[t].method == "gs_wgan":
                raise ValueError(f"targets.{t}: a GS-WGAN experiment trains from a warm start; list it under "
                                 "gswgan_targets (with its warmstart) instead")
            if self.targets[t].warmstart is not None:
                raise ValueError(f"targets.{t}.warmstart: only GS-WGAN targets (gswgan_targets) have a warm start")
        for t, tgt in self.gswgan_targets.items():
            where = f"gswgan_targets.{t}"
            if t not in self.experiments or self.experiments[t].method != "gs_wgan":
                raise ValueError(f"{where}: no GS-WGAN experiment named {t!r}")
            if t in self.targets:
                raise ValueError(f"{where}: also listed under targets")
            exp = self.experiments[t]
            if tgt.dataset != exp.dataset or tgt.data != f"processed/{exp.dataset}":
                raise ValueError(f"{where}: must say dataset {exp.dataset!r}, data 'processed/{exp.dataset}'")
            if tgt.dataset not in self.datasets:
                raise ValueError(f"{where}: dataset {tgt.dataset!r} is not in datasets (add it there)")
        for s in self.sweep_targets:
            if s not in self.sweeps:
                raise ValueError(f"sweep_targets: no sweep named {s!r}")
            base = self.experiments[self.sweeps[s].base]
            if base.local is not None:
                raise ValueError(f"sweep_targets: sweep {s!r} is over a local-DP experiment (its privatized data is "
                                 "made per target); list its cells as experiments and targets instead")
            if base.dataset not in self.datasets:
                raise ValueError(f"sweep_targets: sweep {s!r} trains on {base.dataset!r}, which is not in datasets")
        if len(set(self.sweep_targets)) != len(self.sweep_targets):
            raise ValueError(f"sweep_targets: duplicates in {self.sweep_targets}")
        for ds in self.w2_noise:
            if ds not in self.datasets:
                raise ValueError(f"w2_noise.{ds}: dataset {ds!r} is not in datasets (add it there)")
        for d in self.evaluation.real_datasets:
            if d not in self.datasets:
                raise ValueError(f"evaluation.real_datasets: {d!r} is not in datasets")
        for sname, sweep in self.sweeps.items():
            if sweep.base not in self.experiments:
                raise ValueError(f"sweeps.{sname}.base: no experiment named {sweep.base!r}")
        for tname, table in self.tables.items():
            for e in table.experiments:
                if e not in self.experiments:
                    raise ValueError(f"tables.{tname}.experiments: no experiment named {e!r}")
            for s in table.sweeps:
                if s not in self.sweeps:
                    raise ValueError(f"tables.{tname}.sweeps: no sweep named {s!r}")
            for i, row in enumerate(table.rows):
                if row.experiment is not None and row.experiment not in self.experiments and not any(
                        row.experiment.startswith(f"{s}-") for s in table.sweeps):
                    raise ValueError(f"tables.{tname}.rows[{i}].experiment: no experiment named {row.experiment!r} "
                                     f"(a sweep cell needs its sweep in tables.{tname}.sweeps)")
        return self

    # ------------------------------------------------------------------ derived views

    @property
    def preset(self) -> ScalePreset:
        return self.scales[self.scale]

    _cells: dict[str, tuple[str, Experiment]] | None = PrivateAttr(default=None)

    def _sweep_cells(self) -> dict[str, tuple[str, Experiment]]:
        """Every sweep cell -> (its sweep, the experiment), expanded and validated once."""
        if self._cells is None:
            cells: dict[str, tuple[str, Experiment]] = {}
            for sname, sweep in self.sweeps.items():
                for name, exp in expand_sweep(sname, sweep, self.experiments[sweep.base]).items():
                    if name in self.experiments or name in cells:
                        raise ConfigError(f"sweeps.{sname}: expanded experiment {name!r} clashes with an existing name")
                    cells[name] = (sname, exp)
            self._cells = cells
        return self._cells

    def cells_of(self, sweep: str) -> list[str]:
        """The cell names of one sweep, in its order."""
        return [name for name, (sname, _) in self._sweep_cells().items() if sname == sweep]

    def all_experiments(self) -> dict[str, Experiment]:
        """Named experiments plus every sweep cell, validated like hand-written ones."""
        return {**self.experiments, **{name: exp for name, (_, exp) in self._sweep_cells().items()}}

    def warmstart_name(self, name: str) -> str:
        """The GS-WGAN warm start experiment ``name`` trains from: its own, or -- for a sweep cell
        that leaves the critics' settings alone (e.g. a sigma sweep) -- its base's, so the sweep
        reuses one warm start."""
        cell = self._sweep_cells().get(name)
        if cell is None:
            return name
        sname, exp = cell
        base_name = self.sweeps[sname].base
        base = self.experiments[base_name]
        same = base.dataset == exp.dataset and all(
            getattr(base.hparams, k) == getattr(exp.hparams, k) for k in CRITIC_HPARAMS)
        return base_name if same else name

    def pipeline_targets(self) -> dict[str, Target]:
        """Every experiment the pipeline trains, samples and evaluates: ``targets``,
        ``gswgan_targets`` and every cell of the ``sweep_targets``."""
        out: dict[str, Target] = {**self.targets, **self.gswgan_targets}
        for cell, (sname, exp) in self._sweep_cells().items():
            if sname in self.sweep_targets:
                ws = self.warmstart_name(cell) if exp.method == "gs_wgan" else None
                out[cell] = Target(dataset=exp.dataset, data=f"processed/{exp.dataset}", warmstart=ws)
        return out

    def check_pipeline(self) -> None:
        """Cross-checks that need the sweep cells (run by ``parse_params``)."""
        experiments = self.all_experiments()
        for t, tgt in self.gswgan_targets.items():
            want = self.warmstart_name(t)
            if tgt.warmstart != want:
                raise ConfigError(f"gswgan_targets.{t}.warmstart: must be {want!r} (got {tgt.warmstart!r})")
        needed: dict[str, str] = {}
        for name, tgt in self.pipeline_targets().items():
            if tgt.warmstart is not None:
                needed[tgt.warmstart] = experiments[name].dataset
        if dict(self.warmstarts) != needed:
            raise ConfigError(f"warmstarts: must list exactly the warm starts the GS-WGAN targets need, with "
                              f"their datasets: {needed} (got {dict(self.warmstarts)})")

    def sweep_members(self, sweep: str) -> list[str]:
        if sweep not in self.sweeps:
            raise KeyError(sweep)
        return [name for name, (sname, _) in self._sweep_cells().items() if sname == sweep]


def cell_suffix(cell: dict[str, Any]) -> str:
    """``-p0.2-m1`` with keys in the canonical SWEEP_KEYS order and values printed by ``str()``
    (as DVC prints them in ``foreach``/``matrix`` stage commands)."""
    return "".join(f"-{k}{cell[k]}" for k in SWEEP_KEYS if k in cell)


def sweep_cell_name(sweep: str, cell: dict[str, Any]) -> str:
    """Deterministic, file-safe name of one sweep cell, e.g. ``pm_fmnist-p0.2-m1``."""
    return sweep + cell_suffix(cell)


def expand_sweep(sname: str, sweep: Sweep, base: Experiment) -> dict[str, Experiment]:
    out: dict[str, Experiment] = {}
    for cell in sweep.cell_list():
        data = base.model_dump()
        for k, v in cell.items():
            if k == "sigma":
                if not base.privacy.enabled:
                    raise ConfigError(f"sweeps.{sname}: sigma swept but base experiment {sweep.base!r} is non-private")
                data["privacy"]["sigma"], data["privacy"]["steps"] = v, None
            elif k == "epsilon":  # the target; sigma (or the steps) is then derived as for the base
                if not base.privacy.enabled:
                    raise ConfigError(f"sweeps.{sname}: epsilon swept but base experiment {sweep.base!r} is "
                                      "non-private")
                data["privacy"]["epsilon"] = v
            elif k == "seed":
                data["seed"] = v
            else:
                data["hparams"][k] = v
        name = sweep_cell_name(sname, cell)
        try:
            out[name] = Experiment.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(_format_validation(exc, prefix=f"sweeps.{sname} (cell {name})")) from None
    return out


# --------------------------------------------------------------------------- loading


def _format_validation(exc: ValidationError, prefix: str = "") -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith("function-after"))
        sub = getattr(err.get("ctx", {}).get("error"), "subkey", None)
        if sub:
            loc = ".".join(x for x in (loc, sub) if x)
        key = ".".join(x for x in (prefix, loc) if x) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        got = err.get("input")
        if err["type"] not in ("missing",) and not isinstance(got, dict | list):
            msg += f" (got {got!r})"
        lines.append(f"{key}: {msg}")
    return "; ".join(lines)


def parse_params(raw: Any, source: str = "params.yaml", scale: str | None = None) -> Params:
    """Validate an already-loaded mapping; ``scale`` overrides the file's ``scale:``."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got {type(raw).__name__}")
    if scale is not None:
        raw = {**raw, "scale": scale}
    try:
        params = Params.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {_format_validation(exc)}") from None
    try:
        params.all_experiments()  # sweep cells must validate too
        params.check_pipeline()
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return params


class DuplicateKeyError(yaml.YAMLError):
    """A mapping gives the same key twice; ``duplicates`` is [(key, key path, line numbers)]."""

    def __init__(self, duplicates: list[tuple[str, str, list[int]]]) -> None:
        self.duplicates = duplicates
        super().__init__("; ".join(f"duplicate key {key!r} at {where} (lines {_and(lines)})"
                                   for key, where, lines in duplicates))


def _and(items: list[Any]) -> str:
    words = [str(i) for i in items]
    return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else "".join(words)


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping.

    Plain YAML loaders silently keep the last value: a second ``privacy:`` inside one experiment
    turned its epsilon 10 into 1000, and a second ``experiments.<name>:`` replaces the first
    experiment, with no warning. The mappings are checked on the composed node tree, before any
    value is built, because constructing merge keys (``<<: *anchor``) rewrites mapping nodes in
    place; an explicit key overriding a merged one is what ``<<`` is for and stays allowed.
    """

    def construct_document(self, node: yaml.Node) -> Any:
        duplicates: dict[str, tuple[str, list[int]]] = {}
        self._find_duplicates(node, "", set(), duplicates)
        if duplicates:
            raise DuplicateKeyError(sorted(((key, where, lines) for where, (key, lines) in duplicates.items()),
                                           key=lambda d: d[2]))
        return super().construct_document(node)

    def _find_duplicates(self, node: yaml.Node, path: str, seen: set[int],
                         out: dict[str, tuple[str, list[int]]]) -> None:
        if id(node) in seen:  # an alias: checked where its anchor is defined (and no endless recursion)
            return
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self._find_duplicates(item, f"{path}[{i}]", seen, out)
        elif isinstance(node, yaml.MappingNode):
            first: dict[Any, int] = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    self._find_duplicates(value_node, path, seen, out)
                    continue
                key: Any = None
                if isinstance(key_node, yaml.ScalarNode):
                    key = self.construct_object(key_node, deep=True)  # `1` and `1.0`, `a` and 'a' are one key
                label = str(key_node.value) if key is not None else "?"  # as written in the file
                where = f"{path}.{label}" if path else label
                line = key_node.start_mark.line + 1
                try:
                    if key is not None and key in first:
                        out.setdefault(where, (label, [first[key]]))[1].append(line)
                    elif key is not None:
                        first[key] = line
                except TypeError:  # an unhashable key: YAML construction reports it itself
                    pass
                self._find_duplicates(value_node, where, seen, out)


def load_yaml(path: str | Path) -> Any:
    """Read a YAML file with ``UniqueKeyLoader``; every failure is a ``ConfigError`` naming the file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such parameters file")
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except DuplicateKeyError as exc:
        raise ConfigError(f"{path}: {exc}: YAML would silently keep only the last value; remove or "
                          "rename the other one") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None


def check_yaml_file(path: str | Path) -> None:
    """Refuse duplicate keys (and invalid YAML) in a file someone else loads: Snakemake reads
    params.yaml itself (``configfile:``) with a loader that keeps the last of two equal keys."""
    load_yaml(path)


def load_params(path: str | Path = "params.yaml", scale: str | None = None) -> Params:
    """Read and validate params.yaml. The one entry point for every consumer."""
    return parse_params(load_yaml(path), source=str(path), scale=scale)


def apply_preset(exp: Experiment, preset: ScalePreset) -> tuple[Experiment, dict[str, Any]]:
    """The experiment as it runs at a scale, and the hyperparameters the scale changed."""
    changes: dict[str, Any] = dict(preset.hparams.get(exp.method, {}))
    if preset.max_batch_size is not None and exp.hparams.batch_size > preset.max_batch_size:
        changes["batch_size"] = preset.max_batch_size
    changes = {k: v for k, v in changes.items() if getattr(exp.hparams, k, object()) != v}
    if not changes:
        return exp, {}
    try:
        hp = Hyper.model_validate({**exp.hparams.model_dump(), **changes})
    except ValidationError as exc:
        raise ConfigError(_format_validation(exc, prefix=f"scales.<{exp.method}> hparams")) from None
    return exp.model_copy(update={"hparams": hp}), {
        k: {"paper": getattr(exp.hparams, k), "this_scale": v} for k, v in changes.items()}


def resolve_privacy(exp: Experiment, preset: ScalePreset) -> dict[str, Any]:
    """The privacy plan an experiment runs with at a scale.

    A scale with a step budget turns a sigma-specified target into a step-budget one (sigma
    is then calibrated to the same (epsilon, delta)); the target itself never changes.
    """
    p = exp.privacy
    budget = preset.method_train_steps.get(exp.method, preset.train_steps)
    if not p.enabled:
        return {"enabled": False, "mode": "non_private", "steps": budget}
    if budget is not None:
        return {"enabled": True, "mode": "calibrate_sigma", "epsilon": p.epsilon, "delta": p.delta,
                "steps": budget, "paper_sigma": p.sigma}
    if p.sigma is not None:
        return {"enabled": True, "mode": "derive_steps", "epsilon": p.epsilon, "delta": p.delta, "sigma": p.sigma}
    return {"enabled": True, "mode": "calibrate_sigma", "epsilon": p.epsilon, "delta": p.delta, "steps": p.steps}

