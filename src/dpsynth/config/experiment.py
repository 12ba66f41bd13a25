"""An experiment (a method on a dataset with a privacy target and its method's hyperparameters) and
the sweeps that derive experiments from one."""

from __future__ import annotations

import itertools
from typing import Any, Literal

from pydantic import (
    Field,
    SerializeAsAny,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from dpsynth.config.base import KeyedValueError, Name, Strict, format_validation
from dpsynth.config.hparams import Hparams
from dpsynth.config.methods import METHOD_SPECS, refuse_foreign_keys
from dpsynth.errors import ConfigError
from dpsynth.privacy import mechanisms

#: Sweepable keys: a sweep list over one of these expands into experiments.
#: ``n`` is the training-set size (the experiment's ``train_size``: its first n training records).
SWEEP_KEYS = ("p", "m", "sigma", "lr", "optimizer", "batch_size", "epsilon", "seed", "n")
SweepKey = Literal["p", "m", "sigma", "lr", "optimizer", "batch_size", "epsilon", "seed", "n"]


class PrivacyTarget(Strict):
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


class LocalMechanism(Strict):
    """Local (per-record) privatization applied before training (Reshetova, Chen, Ozgur, "Training
    generative models from privatized data", ISIT 2024, arXiv:2306.09547)."""

    #: a local mechanism's ``config_name`` in the registry (``privacy.mechanisms.local``): a mechanism added in
    #: ``privacy/local_mechanisms.py`` is a choice here with no edit
    mechanism: str
    epsilon: float = Field(gt=0, allow_inf_nan=False)
    delta: float | None = Field(default=None, gt=0, lt=0.5)
    radius: float = Field(gt=0, allow_inf_nan=False)
    dct: bool = False
    dct_quantile: float = Field(default=0.8, ge=0, lt=1)
    seed: int = 0

    @field_validator("mechanism")
    @classmethod
    def _registered(cls, v: str) -> str:
        from dpsynth.errors import PrivacyError

        try:
            mechanisms.local(v)
        except PrivacyError as exc:  # "unknown local mechanism 'x' (known: laplace, gaussian); did you mean ..."
            raise ValueError(str(exc)) from None
        return v

    @model_validator(mode="after")
    def _consistent_with_mechanism(self) -> "LocalMechanism":
        # delta and the DCT option as the mechanism requires (privacy.mechanisms.LocalNoise.config_problem)
        problem = mechanisms.local(self.mechanism).config_problem(self.delta, self.dct)
        if problem is not None:
            raise ValueError(problem)
        return self


class Experiment(Strict):
    """``hparams`` is validated by the method's own model (``METHOD_SPECS[method].hparams``), so a
    key of another method is refused with its path."""

    method: str = Field(description="a key of dpsynth.config.methods.METHOD_SPECS")
    dataset: Name
    privacy: PrivacyTarget = PrivacyTarget(enabled=False)
    hparams: SerializeAsAny[Hparams] = Hparams()
    local: LocalMechanism | None = None
    seed: int | None = Field(default=None, ge=0, description="training seed (weights, data order, subset); "
                             "None: the first of params seeds. Privacy noise stays secret either way")
    train_size: int | None = Field(default=None, gt=0, description="train (and, for a local run, privatize) "
                                   "only the first n of the run's training records (those the scale's "
                                   "train_subset keeps, else the training split); the sweep key `n`. None: all")
    description: str = ""

    @field_validator("method")
    @classmethod
    def _known_method(cls, v: str) -> str:
        if v not in METHOD_SPECS:
            raise ValueError(f"unknown method (known: {', '.join(METHOD_SPECS)})")
        return v

    @field_validator("hparams", mode="before")
    @classmethod
    def _method_hparams(cls, v: Any, info: ValidationInfo) -> Any:
        method = info.data.get("method")
        if method not in METHOD_SPECS:  # the method's own error says why; nothing to check against
            return Hparams()
        model = METHOD_SPECS[method].hparams
        if isinstance(v, model):
            return v
        if isinstance(v, Hparams):
            v = v.model_dump(exclude_defaults=True)
        refuse_foreign_keys(method, v)
        return model.model_validate(v)

    @model_validator(mode="after")
    def _method_rules(self) -> "Experiment":
        spec = METHOD_SPECS[self.method]
        if self.privacy.enabled and (problem := self.hparams.private_run_problem()):
            raise ValueError(problem)
        if spec.releases_once and self.privacy.enabled and self.privacy.steps not in (None, 1):
            raise ValueError(f"{self.method} releases its private statistic once: privacy.steps must be 1 "
                             f"(sigma then calibrated to the target), got {self.privacy.steps}")
        if self.local is not None:
            if not spec.takes_local_data:
                local = " or ".join(s.name for s in METHOD_SPECS.values() if s.takes_local_data)
                raise ValueError(f"local privatization (local:) is for the {local} method, not {self.method}")
            if self.privacy.enabled:
                raise ValueError("an experiment on locally privatized data spends its budget in "
                                 "local:, so privacy.enabled must be false")
        return self

    @property
    def spec(self):  # -> MethodSpec (not annotated: pydantic would treat the import as a field type)
        """This experiment's method registry entry."""
        return METHOD_SPECS[self.method]


class Sweep(Strict):
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
                    raise KeyedValueError(
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
                raise KeyedValueError(
                    "cells", f"cells {i} {dict(self.cells[i])} and {j} {dict(self.cells[j])} are equal "
                    "(numerically), so they would be the same experiment; keep one")
        return self

    def cell_list(self) -> list[dict[str, Any]]:
        if self.cells is not None:
            return [dict(c) for c in self.cells]
        assert self.grid is not None
        keys = list(self.grid)
        return [dict(zip(keys, vals)) for vals in itertools.product(*(self.grid[k] for k in keys))]


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
    if key == "n" and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
        raise KeyedValueError("n", f"training-set sizes must be whole numbers >= 1 (write 60000, not 6.0e4), got {v!r}")
    if isinstance(v, bool) or not isinstance(v, int | float):
        hint = " (write 1.0e-5, not 1e-5: YAML 1.1 reads the latter as text)" if isinstance(v, str) else ""
        raise ValueError(f"sweep value for {key!r} must be a number, got {v!r}{hint}")


def cell_suffix(cell: dict[str, Any]) -> str:
    """``-p0.2-m1`` with keys in the canonical SWEEP_KEYS order and values printed by ``str()``
    (as DVC prints them in ``foreach``/``matrix`` stage commands)."""
    return "".join(f"-{k}{cell[k]}" for k in SWEEP_KEYS if k in cell)


def sweep_cell_name(sweep: str, cell: dict[str, Any]) -> str:
    """Deterministic, file-safe name of one sweep cell, e.g. ``pm_fmnist-p0.2-m1``."""
    return sweep + cell_suffix(cell)


def expand_sweep(sname: str, sweep: Sweep, base: Experiment) -> dict[str, Experiment]:
    """The sweep's cells as experiments, each validated like a hand-written one (a swept key that
    the base's method does not have is refused with the sweep's path)."""
    out: dict[str, Experiment] = {}
    for cell in sweep.cell_list():
        data = base.model_dump()
        for k, v in cell.items():
            if k == "sigma":
                if not base.privacy.enabled:
                    raise ConfigError(f"sweeps.{sname}: sigma swept but base experiment {sweep.base!r} is non-private")
                data["privacy"]["sigma"], data["privacy"]["steps"] = v, None
            elif k == "epsilon" and base.local is not None:  # the local epsilon: each cell privatizes anew
                if base.privacy.enabled:
                    raise ConfigError(f"sweeps.{sname}: epsilon swept but base experiment {sweep.base!r} has both "
                                      "a local and a central epsilon; sweep one of them in an experiment with only it")
                data["local"]["epsilon"] = v
            elif k == "epsilon":  # the target; sigma (or the steps) is then derived as for the base
                if not base.privacy.enabled:
                    raise ConfigError(f"sweeps.{sname}: epsilon swept but base experiment {sweep.base!r} is "
                                      "non-private")
                data["privacy"]["epsilon"] = v
            elif k == "seed":
                data["seed"] = v
            elif k == "n":
                data["train_size"] = v
            else:
                data["hparams"][k] = v
        name = sweep_cell_name(sname, cell)
        try:
            out[name] = Experiment.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(format_validation(exc, prefix=f"sweeps.{sname} (cell {name})")) from None
    return out
