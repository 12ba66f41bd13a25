"""``Params``: the whole params.yaml as one validated model, its cross-references checked, and the
views the pipeline derives from it (every experiment with the sweep cells, the pipeline's targets,
which of them are privatized first, the warm start each GS-WGAN-like run trains from).

What the pipeline runs is stated once, in ``pipeline: {experiments: [...], sweeps: [...]}``; the
data each target trains on, whether it is privatized first and which warm start it needs follow
from its experiment through the method registry (``config/methods.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from dpsynth.config.base import SCALE_NAMES, KeyedValueError, Name, ScaleName, Strict
from dpsynth.config.experiment import Experiment, Sweep, expand_sweep
from dpsynth.config.methods import METHOD_SPECS
from dpsynth.config.scales import ScalePreset
from dpsynth.config import targets as catalogue  # the target catalogue; it reads this model by its shape only
from dpsynth.config.tables import Table
from dpsynth.errors import ConfigError, did_you_mean


class DataSettings(Strict):
    root: str = "data"
    local_dirs: list[str] = Field(default_factory=list, description="searched for raw files first")
    celeba_dir: str | None = None
    mirrors: dict[str, list[str]] = Field(default_factory=dict, description="per-dataset mirror override")
    public: list[Name] = Field(default_factory=list, description="datasets whose records are public (the benchmarks: "
                               "mnist, fashion_mnist, ...); default none. Only when every dataset in `datasets` is "
                               "listed may `dvc push` send the report's tables and figures, which quote the real-data "
                               "rows and clean test records (a curator's own dataset: never listed); and only a listed "
                               "dataset's run may release a statistic of its training records in metrics.json "
                               "(GS-WGAN's own protocol: its IS and its FID against the training split)")


@dataclass(frozen=True)
class Target:
    """One pipeline target, derived from its experiment: its dataset, the data it trains on
    (``processed/<dataset>``, or ``privatized/<experiment>`` for local-DP experiments) and, for a
    method that trains from warm-started critics (GS-WGAN), the warm start it uses
    (``private/warmstart/<warmstart>``)."""

    dataset: str
    data: str
    warmstart: str | None = None


class Pipeline(Strict):
    """What ``snakemake`` and ``dvc repro`` train, sample and evaluate."""

    experiments: list[Name] = Field(default_factory=list, description="experiments the pipeline runs")
    sweeps: list[Name] = Field(default_factory=list, description="sweeps whose every cell the pipeline runs "
                               "(editing a sweep's lists adds or removes cells in both DAGs)")
    tables: list[Name] = Field(default_factory=list, description="build targets (one per paper table: `dpsynth "
                               "workflow targets`) whose runs and sweeps the pipeline runs too, so that `dvc repro` "
                               "reaches them; Snakemake builds any target by its name without this")

    @field_validator("experiments", "sweeps", "tables")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"duplicates in {v}")
        return v


# The keys `pipeline` replaced (before 2026-11): each repeated what the experiments already say.
OLD_PIPELINE_KEYS = ("targets", "privatize", "gswgan_targets", "warmstarts", "sweep_targets")


def pipeline_migration_message(raw: dict[str, Any]) -> str | None:
    """How to move an old params.yaml's target lists to ``pipeline:``, with its own names; None
    when ``raw`` has none of the old keys."""
    old = [k for k in OLD_PIPELINE_KEYS if k in raw]
    if not old:
        return None
    experiments = [*(raw.get("targets") or {}), *(raw.get("gswgan_targets") or {})]
    sweeps = list(raw.get("sweep_targets") or [])
    return (f"{', '.join(old)}: replaced by one list, `pipeline: {{experiments: [{', '.join(experiments)}], "
            f"sweeps: [{', '.join(sweeps)}]}}`; privatizing and warm starts now follow from each experiment's "
            f"method. Replace {', '.join(old)} with that, then run `dpsynth workflow dvc` to regenerate dvc.yaml")


class W2NoiseSweep(Strict):
    """The W2-vs-noise figure of Reshetova, Chen, Ozgur (arXiv:2306.09547, Fig. 5) as a pipeline stage:
    Gaussian noise N(0, s^2) per coordinate on the clean training records, one generator per
    (loss, s), W2 to clean held-out records. Defaults are the paper's section 4.5 (MLP 2x500,
    latent U[0,1]^2, Sinkhorn L = 200, batch b = 200)."""

    noise_levels: list[Annotated[float, Field(gt=0, allow_inf_nan=False)]]
    losses: list[Literal["entropic", "exact", "sinkhorn_divergence"]] = ["entropic", "exact", "sinkhorn_divergence"]
    steps: int = Field(default=20000, gt=0, description="generator steps per (loss, noise); the scale may cap it")
    batch_size: int = Field(default=200, gt=0)
    lr: float = Field(default=1e-4, gt=0, allow_inf_nan=False)
    sinkhorn_iters: int = Field(default=200, gt=0)
    n_eval: int = Field(default=1000, gt=1, description="records per side of the exact-OT W2")
    check_noise_level: float | None = Field(
        default=None, gt=0, allow_inf_nan=False, description="one of noise_levels: each loss is also trained there "
        "at twice the steps (rows with role step_check), the evidence that `steps` has converged (the report "
        "checks that no W2 moves by more than 5 %)")
    seeds: list[Annotated[int, Field(ge=0)]] | None = Field(
        default=None, description="one training run of every (loss, noise) per seed -- its weights, batches and "
        "privatization noise -- so the report has the spread between runs to decide each claim with (None: "
        "params seeds)")
    workers: int = Field(default=1, ge=1, le=64, description="processes that train the sweep's runs side by side "
                         "(each with params `threads` torch threads; the rows do not depend on it, so it is not "
                         "in the job's fingerprint, and the Snakemake job asks for threads x workers cores)")
    scales: list[ScaleName] | None = Field(default=None, description="scales at which the sweep trains (None: "
                                           "every scale); at any other scale its stage writes an empty result "
                                           "that says so (the MNIST sweep is hours on a CPU)")

    @model_validator(mode="after")
    def _check_level_is_a_level(self) -> "W2NoiseSweep":
        if self.check_noise_level is not None and self.check_noise_level not in self.noise_levels:
            raise KeyedValueError("check_noise_level", f"{self.check_noise_level:g} is not one of noise_levels "
                                  f"{self.noise_levels}")
        return self

    @field_validator("noise_levels", "losses", "scales", "seeds")
    @classmethod
    def _nonempty_unique(cls, v: list[Any] | None) -> list[Any] | None:
        if v is None:
            return v
        if not v or len(set(v)) != len(v):
            raise ValueError(f"must be a non-empty list without duplicates, got {v}")
        return v


class EvaluationSettings(Strict):
    """Downstream protocol settings; the sizes come from the scale preset."""

    classifiers: list[Literal["logreg", "mlp", "cnn"]] = ["logreg", "mlp", "cnn"]
    real_datasets: list[Name] = Field(default_factory=list, description="datasets that get a 'real data' row")
    fid_weights: str | None = Field(default=None, description="local torch-fidelity Inception weights file")
    fid_download: bool = Field(default=True, description="let torch-fidelity fetch the weights if missing")
    fid_download_timeout: float = Field(default=120.0, gt=0)


class TotalBudget(Strict):
    """One dataset's total budget over every release ever made from it (``Params.total_budgets``)."""

    epsilon: float = Field(gt=0, allow_inf_nan=False)
    delta: float | None = Field(default=None, ge=0, lt=1)


def _noise_matched_methods() -> str:
    """The methods whose runs a manifold or train-size figure takes (``MethodSpec.noise_matched_loss``)."""
    return "/".join(n for n, spec in METHOD_SPECS.items() if spec.noise_matched_loss)


class Params(Strict):
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
    pipeline: Pipeline = Pipeline()
    w2_noise: dict[Name, W2NoiseSweep] = Field(default_factory=dict, description="dataset -> the W2-vs-noise "
                                               "sweep the pipeline runs on it (results/w2_noise/<dataset>.csv)")
    sweeps: dict[Name, Sweep] = {}
    tables: dict[Name, Table] = {}
    total_budgets: dict[Name, TotalBudget] | None = Field(
        default=None, description="dataset -> the (epsilon, delta) every release ever made from it may spend "
        "together (privacy.releases: the release ledger, in ledger_dir); a release past it is refused before any "
        "noise is drawn. Unset: no total budget")
    ledger_dir: str | None = Field(
        default=None, description="the release ledger's folder (privacy.ledger_store), shared by every workspace "
        "and clean-up of the data: an absolute path (~ allowed). $DPSYNTH_LEDGER overrides it; unset: "
        "$XDG_DATA_HOME/dpsynth/ledger, i.e. ~/.local/share/dpsynth/ledger")

    @field_validator("ledger_dir")
    @classmethod
    def _absolute_ledger(cls, v: str | None) -> str | None:
        """A relative folder would be one workspace's ledger: a clone or a clean-up would start a fresh one."""
        import os

        if v is not None and not os.path.isabs(os.path.expanduser(v)):
            raise ValueError(f"{v!r}: must be an absolute path (~ allowed), a folder outside every workspace")
        return v

    @field_validator("total_budgets")
    @classmethod
    def _budgeted_datasets(cls, v: dict[str, TotalBudget] | None) -> dict[str, TotalBudget] | None:
        """A misspelt dataset would leave the real one without its budget: refuse it."""
        from dpsynth.data.registry import DATASETS, unknown_dataset_message

        for name in v or {}:
            if name not in DATASETS:
                raise ValueError(f"{name}: {unknown_dataset_message(name)}")
        return v

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: list[int]) -> list[int]:
        if not v or len(set(v)) != len(v):
            raise ValueError("seeds must be a non-empty list without duplicates")
        return v

    @model_validator(mode="after")
    def _cross_refs(self) -> "Params":
        """Names that must refer to something. Each raises a ``KeyedValueError`` with the key it is
        about: a model validator's error has no location of its own (it would read ``(top level)``),
        and a misspelt experiment or sweep name gets the closest configured one."""
        # lazy: config is imported by the data layer's CLI
        from dpsynth.data.registry import DATASETS, unknown_dataset_message

        for name in self.datasets:
            if name not in DATASETS:
                raise KeyedValueError("datasets", unknown_dataset_message(name))
        missing = [s for s in SCALE_NAMES if s not in self.scales]
        if missing:
            raise KeyedValueError("scales", f"missing preset(s) {missing}")
        for ename, exp in self.experiments.items():
            if exp.dataset not in DATASETS:
                raise KeyedValueError(f"experiments.{ename}.dataset", unknown_dataset_message(exp.dataset))
        for e in self.pipeline.experiments:
            if e not in self.experiments:
                raise KeyedValueError("pipeline.experiments", self._unknown_experiment(e))
            if self.experiments[e].dataset not in self.datasets:
                raise KeyedValueError("pipeline.experiments", f"{e!r} trains on {self.experiments[e].dataset!r}, "
                                      "which is not in datasets (add it there)")
        for s in self.pipeline.sweeps:
            if s not in self.sweeps:
                raise KeyedValueError("pipeline.sweeps", self._unknown_sweep(s))
            base = self.experiments.get(self.sweeps[s].base)
            if base is not None and base.dataset not in self.datasets:
                raise KeyedValueError("pipeline.sweeps", f"sweep {s!r} trains on {base.dataset!r}, which is not in "
                                      "datasets")
        for ds in self.w2_noise:
            if ds not in self.datasets:
                raise KeyedValueError(f"w2_noise.{ds}", f"dataset {ds!r} is not in datasets (add it there)")
        for d in self.evaluation.real_datasets:
            if d not in self.datasets:
                raise KeyedValueError("evaluation.real_datasets", f"{d!r} is not in datasets")
        for d in self.data.public:
            if d not in DATASETS:
                raise KeyedValueError("data.public", unknown_dataset_message(d))
        for sname, sweep in self.sweeps.items():
            if sweep.base not in self.experiments:
                raise KeyedValueError(f"sweeps.{sname}.base", self._unknown_experiment(sweep.base))
            method = self.experiments[sweep.base].spec
            if sweep.train_together and not method.trains_together:
                together = ", ".join(s.name for s in METHOD_SPECS.values() if s.trains_together)
                raise KeyedValueError(f"sweeps.{sname}.train_together", f"{method.name} cells cannot be trained "
                                      f"together (only {together}); remove it")
        self._check_tables()
        return self

    def is_public(self, dataset: str) -> bool:
        """Whether ``data.public`` declares ``dataset``'s records public: only then may a released file (a run's
        metrics.json) hold a statistic of its training records, labelled ``paths.PUBLIC_TRAINING_SPLIT``."""
        return dataset in self.data.public

    def _unknown_experiment(self, name: str) -> str:
        """``unknown experiment 'x'; did you mean 'y'?`` (the closest named experiment, if any)."""
        return f"unknown experiment {name!r}{did_you_mean(name, self.experiments)}"

    def _unknown_sweep(self, name: str) -> str:
        """``unknown sweep 'x'; did you mean 'y'?`` (the closest sweep, if any)."""
        return f"unknown sweep {name!r}{did_you_mean(name, self.sweeps)}"

    def _check_tables(self) -> None:
        for tname, table in self.tables.items():
            for e in table.experiments:
                if e not in self.experiments:
                    raise KeyedValueError(f"tables.{tname}.experiments", self._unknown_experiment(e))
            for s in table.sweeps:
                if s not in self.sweeps:
                    raise KeyedValueError(f"tables.{tname}.sweeps", self._unknown_sweep(s))
            if table.kind == "manifold":
                self._check_manifold_table(tname, table)
            if table.kind == "train_size":
                self._check_train_size_table(tname, table)
            for i, row in enumerate(table.rows):
                if row.experiment is not None and row.experiment not in self.experiments and not any(
                        row.experiment.startswith(f"{s}-") for s in table.sweeps):
                    raise KeyedValueError(f"tables.{tname}.rows[{i}].experiment",
                                          f"{self._unknown_experiment(row.experiment)} (a sweep cell needs its "
                                          f"sweep in tables.{tname}.sweeps)")

    def _check_manifold_table(self, tname: str, table: Table) -> None:
        """A ``kind: manifold`` figure: entropic_wgan runs on its dataset, one per (mechanism, loss)."""
        where, seen = f"tables.{tname}.experiments", {}
        if table.dataset is None or not table.experiments:
            raise KeyedValueError(f"tables.{tname}", "a manifold figure needs dataset and experiments")
        for e in table.experiments:
            exp = self.experiments[e]
            if not exp.spec.noise_matched_loss or exp.local is None or exp.dataset != table.dataset:
                raise KeyedValueError(where, f"{e!r} is not an {_noise_matched_methods()} run on locally privatized "
                                      f"{table.dataset} (a panel of this figure must be)")
            loss = getattr(exp.hparams, "loss", None)
            if loss not in ("entropic", "exact"):
                raise KeyedValueError(where, f"{e!r} trains with loss {loss!r}; a panel is entropic or exact")
            cell = (exp.local.mechanism, loss)
            if cell in seen:
                raise KeyedValueError(where, f"{seen[cell]!r} and {e!r} are both the {cell[0]} x {loss} panel")
            seen[cell] = e

    def _check_train_size_table(self, tname: str, table: Table) -> None:
        """A ``kind: train_size`` figure (Reshetova et al. Fig. 11): sweeps over n (and seed) of an entropic_wgan
        run on locally privatized records of its dataset, at least two sizes between them."""
        if table.dataset is None or not table.sweeps or table.experiments:
            raise KeyedValueError(f"tables.{tname}", "a train_size figure needs dataset and sweeps (over n), "
                                  "no experiments")
        sizes: set[int] = set()
        for s in table.sweeps:
            sweep, base = self.sweeps[s], self.experiments[self.sweeps[s].base]
            keys = {k for cell in sweep.cell_list() for k in cell}
            if keys not in ({"n"}, {"n", "seed"}):
                raise KeyedValueError(f"tables.{tname}.sweeps", f"sweep {s!r} sweeps {sorted(keys)}; a train_size "
                                      "figure's sweeps sweep n (the training-set size), alone or with seed (repeated "
                                      "training runs per n)")
            if not base.spec.noise_matched_loss or base.local is None or base.dataset != table.dataset:
                raise KeyedValueError(f"tables.{tname}.sweeps", f"sweep {s!r}'s base {sweep.base!r} is not an "
                                      f"{_noise_matched_methods()} run on locally privatized {table.dataset}")
            sizes |= {cell["n"] for cell in sweep.cell_list()}
        if len(sizes) < 2:
            raise KeyedValueError(f"tables.{tname}.sweeps", f"a rate in n needs at least two sizes, got {sorted(sizes)}")

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
        if sweep not in self.sweeps:
            raise KeyError(sweep)
        return [name for name, (sname, _) in self._sweep_cells().items() if sname == sweep]

    def replicates_of(self, name: str) -> list[str]:
        """The training runs of one table row: ``name`` itself, then every cell of each sweep based on ``name``
        that varies ``seed`` alone (its repeated runs; each is its own release, with its own secret noise)."""
        out = [name]
        for sname, sweep in self.sweeps.items():
            keys = set(sweep.grid) if sweep.grid is not None else set().union(*map(set, sweep.cells or [{}]))
            if sweep.base == name and keys == {"seed"}:
                out += self.cells_of(sname)
        return out

    def sweep_of(self, name: str) -> str | None:
        """The sweep whose cell ``name`` is, or None for a named experiment."""
        cell = self._sweep_cells().get(name)
        return cell[0] if cell is not None else None

    def all_experiments(self) -> dict[str, Experiment]:
        """Named experiments plus every sweep cell, validated like hand-written ones."""
        return {**self.experiments, **{name: exp for name, (_, exp) in self._sweep_cells().items()}}

    def warmstart_name(self, name: str) -> str:
        """The warm start experiment ``name`` trains from: its own, or -- for a sweep cell that leaves
        the critics' settings (its method's ``warm_start_keys``) alone, e.g. a sigma sweep -- its
        base's, so the sweep reuses one warm start."""
        cell = self._sweep_cells().get(name)
        if cell is None:
            return name
        sname, exp = cell
        base_name = self.sweeps[sname].base
        base = self.experiments[base_name]
        same = base.dataset == exp.dataset and all(
            getattr(base.hparams, k) == getattr(exp.hparams, k) for k in exp.spec.warm_start_keys)
        return base_name if same else name

    def warmstart_for(self, name: str) -> str | None:
        """The warm start ``name`` trains from, or None when its method needs none."""
        return self.warmstart_name(name) if self.all_experiments()[name].spec.needs_warm_start else None

    def pipeline_experiments(self) -> list[str]:
        """``pipeline.experiments`` and the runs ``pipeline.tables``' targets name (``config.targets``)."""
        return catalogue.pipeline_experiments(self)

    def pipeline_sweeps(self) -> list[str]:
        """``pipeline.sweeps`` and the sweeps of ``pipeline.tables``' targets (``config.targets``)."""
        return catalogue.pipeline_sweeps(self)

    def pipeline_targets(self) -> dict[str, Target]:
        """Every experiment the pipeline trains, samples and evaluates -- ``pipeline_experiments()``
        and every cell of ``pipeline_sweeps()`` -- with the data it trains on and its warm start."""
        experiments = self.all_experiments()
        names = [*self.pipeline_experiments(), *(c for s in self.pipeline_sweeps() for c in self.cells_of(s))]
        out: dict[str, Target] = {}
        for name in names:
            exp = experiments[name]
            data = f"privatized/{name}" if exp.local is not None else f"processed/{exp.dataset}"
            out[name] = Target(dataset=exp.dataset, data=data, warmstart=self.warmstart_for(name))
        return out

    def evaluation_protocols(self, experiment: str | None = None, real: str | None = None) -> list[str]:
        """The papers' own evaluation protocols (a table's ``protocol:``, e.g. ``gs_wgan``) that the
        evaluate job of ``experiment`` -- or, with ``real``, the real-data row of that dataset -- computes
        beside the project's: those of every table that shows it (a row, a listed experiment or a cell
        of a listed sweep). Only those jobs pay for them, and their fingerprints carry the protocol's
        sizes (``dpsynth.fingerprint``), so adding a run to such a table re-runs that run's evaluation only."""
        out: list[str] = []
        for table in self.tables.values():
            if table.protocol is None or table.protocol in out:
                continue
            if real is not None:
                shown = any(r.real == real for r in table.rows)
            else:
                members = {r.experiment for r in table.rows} | set(table.experiments)
                members |= {c for s in table.sweeps for c in self.cells_of(s)}
                shown = experiment in members
            if shown:
                out.append(table.protocol)
        return out

    def privatized_targets(self) -> dict[str, str]:
        """The local-DP targets, privatized once before training: experiment (or sweep cell: each cell of
        a sweep over a local-DP experiment privatizes its own copy, at its own settings) -> dataset."""
        return {name: t.dataset for name, t in self.pipeline_targets().items() if t.data.startswith("privatized/")}

    def warm_starts(self) -> dict[str, str]:
        """The warm starts the targets need (``private/warmstart/<name>``): name -> dataset. Sweep
        cells that leave the critics' settings alone share their base's."""
        return {t.warmstart: t.dataset for t in self.pipeline_targets().values() if t.warmstart is not None}
