"""What a build target costs at a scale, before it is submitted (``dpsynth workflow budget``).

The jobs are the ones ``snakemake <target>`` runs (the same list: tests/test_table_targets.py holds them to the
dry run), each on the device its rule asks for at that scale (workflow/resources.yaml; ``gpus=False`` as
``--config gpus=false``), with its threads and requested memory. Each job's hours come from the cost book
(``workflow.costs``): a step rate times the steps the run trains -- planned as the method plans them, by the
privacy mechanism's own schedule -- or a time per job. Every figure says where it comes from: measured (a time
measured for that job), extrapolated (a measured rate carried to the run's steps, or a measured value to another
shape by a stated rule) or no measurement (an assumption, stated in the cost book).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dpsynth.config import Params, resolve_run, table_targets
from dpsynth.errors import ConfigError
from dpsynth.workflow.costs import DEFAULT_COSTS, Cost, find_cost, load_costs

RESOURCES = "workflow/resources.yaml"
#: resources.yaml's row for a train job of a cell trained together (its sweep's train_sweep job trained it; the
#: cell's own job only releases the finished checkpoint): no GPU, minutes (workflow/rules/common.smk reads it too)
RELEASE = "release"
RUN_STAGES = ("train", "sample", "evaluate")
#: how a job's hours were obtained, from its cost entry's basis
LABELS = {"measured": "measured", "extrapolated": "extrapolated", "assumption": "no measurement"}


@dataclass(frozen=True)
class JobCost:
    """One job of a target: where it runs, what it asks for, and its hours with their basis."""

    stage: str
    name: str
    device: str  # gpu | cpu
    gpus: int
    threads: int
    mem_mb: int | None  # requested (workflow/resources.yaml); None: the profile's default
    hours: float
    basis: str  # measured | extrapolated | no measurement
    cost: str  # the cost book entry
    how: str  # e.g. "3,464,988 steps at 337.7 steps/s"


@dataclass(frozen=True)
class Budget:
    target: str
    scale: str
    papers: tuple[str, ...]
    jobs: list[JobCost]
    costs: dict[str, Cost]  # the entries the jobs used

    def gpu_hours(self, basis: str | None = None) -> float:
        return sum(j.hours * j.gpus for j in self.jobs if j.device == "gpu" and basis in (None, j.basis))

    def cpu_hours(self, basis: str | None = None) -> float:
        return sum(j.hours * j.threads for j in self.jobs if j.device == "cpu" and basis in (None, j.basis))

    def as_dict(self) -> dict[str, Any]:
        return {"target": self.target, "scale": self.scale, "papers": list(self.papers), "jobs": len(self.jobs),
                "gpu_hours": self.gpu_hours(), "cpu_hours": self.cpu_hours(),
                "gpu_hours_no_measurement": self.gpu_hours("no measurement"),
                "cpu_hours_no_measurement": self.cpu_hours("no measurement"),
                "largest_mem_mb": max((j.mem_mb for j in self.jobs if j.mem_mb), default=None),
                "job_list": [asdict(j) for j in self.jobs],
                "costs": {k: {"basis": c.basis, "source": c.source, "note": c.note, "steps_per_s": c.steps_per_s,
                              "hours": c.hours, "packed_seconds_a_b": c.packed} for k, c in self.costs.items()}}


def target_jobs(params: Params, target: str) -> list[tuple[str, str]]:
    """(stage, name) of every job ``snakemake <target>`` runs in a fresh clone, its own rule as ``report``."""
    t = table_targets(params)[target]
    runs, experiments = t.runs(params), params.all_experiments()
    datasets = dict.fromkeys([*(experiments[r].dataset for r in runs), *t.real, *t.w2_noise])
    jobs = [("prepare_data", d) for d in datasets]
    jobs += [("privatize", r) for r in runs if experiments[r].local is not None]
    jobs += [("warmstart", w) for w in dict.fromkeys(params.warmstart_for(r) for r in runs) if w is not None]
    jobs += [("train_sweep", s) for s in t.train_sweeps(params)]
    jobs += [(stage, r) for r in runs for stage in RUN_STAGES]
    jobs += [("evaluate_real", d) for d in t.real]
    jobs += [("w2_noise", d) for d in t.w2_noise]
    return [*jobs, ("report", target)]


def train_records(params: Params, dataset: str, root: Path) -> int:
    """Training records of ``dataset`` before a scale's subset: the prepared file's count, else the registry's."""
    from dpsynth.data.registry import DATASETS

    meta = root / params.data.root / "processed" / f"{dataset}.json"
    if meta.is_file():
        n = json.loads(meta.read_text(encoding="utf-8")).get("n_train")
        if isinstance(n, int) and n > 0:
            return n
    spec = DATASETS[dataset]
    n = spec.n_train or spec.options.get("n_train")
    if not isinstance(n, int):
        raise ConfigError(f"{dataset}: its training records are known once prepared: run `dpsynth data prepare "
                          f"{dataset}` first")
    return n


def planned_steps(params: Params, name: str, root: Path = Path(".")) -> int:
    """The steps run ``name`` trains at this scale, planned as its method plans them (``methods.*``
    ``privacy_schedule``): the privacy mechanism's own schedule on the training records the scale keeps."""
    from dpsynth.privacy import mechanisms

    run = resolve_run(params, name)
    exp, h, plan = run.experiment, run.experiment.hparams, run.privacy
    n = train_records(params, exp.dataset, root)
    n = min(n, run.preset.train_subset or n)
    n = min(n, exp.train_size or n)
    who = f"experiments.{name}.privacy"
    if exp.spec.releases_once:  # one release, then the fit to it (post-processing): the method's own steps
        return int(h.fit_steps(n))
    if not plan.enabled:  # non-private, or trained on privatized records: the scale's budget or the run's own
        steps = plan.steps or h.max_steps or _method_default_steps(exp.spec)
        if steps is None:
            raise ConfigError(f"experiments.{name}.hparams.max_steps: unset, and the {params.scale!r} scale sets "
                              "no step budget: the budget cannot say how long it trains")
        return int(steps)
    if exp.spec.needs_warm_start:  # GS-WGAN: its per-critic Gaussian, one shard per critic
        shards, _ = _critics(run.preset)
        sched = mechanisms.get("gs_wgan", mechanisms.GSWGANGaussian).schedule(
            plan, who=who, batch_size=h.batch_size, shards=shards, default_steps=lambda: h.max_steps)
        return int(sched.steps)
    adversarial = bool(getattr(h, "adversarial", False))
    k = (getattr(h, "partitions", None) or n // h.batch_size) if adversarial else None

    def rate(batch: int) -> float:
        return 1.0 / k if k else batch / n

    sched = mechanisms.get("subsampled_gaussian", mechanisms.SubsampledGaussian).schedule(
        plan, who=who, batch_size=h.batch_size, rate=rate,
        sampling="without_replacement" if adversarial else "poisson", default_steps=lambda: h.max_steps)
    return int(sched.steps)


def _method_default_steps(spec: Any) -> int | None:
    """A non-private run's steps where neither the scale nor the run says: the method's own (GS-WGAN's 20,000
    generator iterations; the trainers' PAPER_STEPS). None for a method without one."""
    import importlib

    module = importlib.import_module(spec.trainer.partition(":")[0])
    return getattr(module, "PAPER_STEPS", None)


def _critics(preset: Any) -> tuple[int, int]:
    """GS-WGAN's (critics, warm-up steps) at a scale: the scale's, else the paper's (``gswgan_critics``)."""
    from dpsynth.methods.gswgan_critics import PAPER_N_CRITICS, PAPER_WARMUP_STEPS

    return int(preset.n_critics or PAPER_N_CRITICS), int(preset.warmup_steps or PAPER_WARMUP_STEPS)


def _traits(params: Params, name: str, together: set[str]) -> tuple[str, dict[str, Any]]:
    """(method, the settings a cost entry's ``when`` matches) of a run at this scale."""
    from dpsynth.data.registry import DATASETS
    from dpsynth.ot.losses import num_extra

    run = resolve_run(params, name)
    exp, h = run.experiment, run.experiment.hparams
    traits = {**h.model_dump(), "dataset": exp.dataset, "trained_together": name in together,
              "data": "points" if DATASETS[exp.dataset].kind == "manifold2d" else "images",
              "protocol": "gs_wgan" if "gs_wgan" in params.evaluation_protocols(experiment=name) else "project",
              # an unconditional generator is scored without classifiers (evaluate.metrics.evaluate_synthetic)
              "classifiers": exp.spec.conditional}
    extra = num_extra(h.batch_size, h.p) if hasattr(h, "p") else 0
    traits["generated_pixels"] = (h.batch_size + extra) * math.prod(DATASETS[exp.dataset].shape)
    return exp.method, traits


class _Pricer:
    """Hours of one job from the cost book; remembers the entries it used."""

    def __init__(self, params: Params, costs: list[Cost]) -> None:
        self.params, self.costs, self.used = params, costs, {}

    def price(self, stage: str, method: str | None, device: str, traits: dict[str, Any], steps: int | None,
              what: str) -> tuple[float, str, str, str]:
        """(hours, basis label, entry id, how) of ``steps`` (None: a per-job cost) of ``what``."""
        cost = find_cost(self.costs, stage, method, device, self.params.scale, traits)
        if cost is None:
            raise ConfigError(f"no entry of the cost book applies to {what} ({stage}, method {method}, {device}, "
                              f"scale {self.params.scale}): add one to {DEFAULT_COSTS}")
        self.used[cost.id] = cost
        factor = 1.0  # the run's work per step over the measured one's (scale_by: generated_pixels)
        if cost.scale_by in cost.reference and cost.scale_by in traits:
            factor = traits[cost.scale_by] / cost.reference[cost.scale_by]
        if cost.steps_per_s is not None:
            if steps is None:
                raise ConfigError(f"{DEFAULT_COSTS}: costs.{cost.id} gives a step rate for {stage}, which has no "
                                  "steps: give hours")
            hours = steps * factor / cost.steps_per_s / 3600
            shown = f"{steps:,} steps at {cost.steps_per_s:g} steps/s" + (f" / {factor:.3g}" if factor != 1 else "")
            basis = "extrapolated" if cost.basis != "assumption" else "no measurement"
        else:
            assert cost.hours is not None
            if cost.scale_by == "steps" and steps is not None:
                factor = steps / cost.reference["steps"]
            hours = cost.hours * factor
            shown = f"{cost.hours:g} h per job" + (f" x {factor:.3g}" if factor != 1 else "")
            basis = LABELS[cost.basis] if factor == 1 else ("no measurement" if cost.basis == "assumption"
                                                            else "extrapolated")
        return hours, basis, cost.id, shown


def _resources(root: Path) -> dict[str, Any]:
    import yaml

    path = root / RESOURCES
    if not path.is_file():
        raise ConfigError(f"{path}: not found (run `dpsynth workflow budget` in the project's root)")
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def target_budget(params: Params, target: str, *, gpus: bool = True, costs: str | Path = DEFAULT_COSTS,
                  root: Path = Path(".")) -> Budget:
    """The budget of ``target`` at ``params.scale`` (module docstring)."""
    targets = table_targets(params)
    if target not in targets:
        from dpsynth.errors import did_you_mean

        raise ConfigError(f"no build target {target!r}{did_you_mean(target, targets)} (`dpsynth workflow targets` "
                          "lists them)")
    from dpsynth.config.run import check_sweep_at_scale

    for sweep in targets[target].sweeps:
        check_sweep_at_scale(params, sweep)
    res, scale = _resources(root), params.scale
    pricer = _Pricer(params, load_costs(costs, root))
    together = {c for s in targets[target].train_sweeps(params) for c in params.cells_of(s)}
    jobs: list[JobCost] = []
    for stage, name in target_jobs(params, target):
        rule = res.get(stage, {}) if stage != "report" else {}
        row = rule.get(scale, {}) if isinstance(rule, dict) else {}
        if stage == "train" and name in together:  # it only releases what its sweep's job trained
            row = res.get(RELEASE, {}).get(scale, {})
        asks = int(row.get("gpu", 0)) if gpus else 0
        if stage == "train_sweep" and not params.sweeps[name].train_together:
            asks = 0
        threads = params.threads if rule.get("threads") == "params" else int(rule.get("threads", 1))
        if stage == "w2_noise":
            threads *= params.w2_noise[name].workers
        device = "gpu" if asks else "cpu"
        hours, basis, cost, how = _job_hours(params, pricer, stage, name, device, together, root)
        jobs.append(JobCost(stage, name, device, asks, threads, row.get("mem_mb"), hours, basis, cost, how))
    return Budget(target, scale, targets[target].papers, jobs, pricer.used)


def _job_hours(params: Params, pricer: _Pricer, stage: str, name: str, device: str, together: set[str],
               root: Path) -> tuple[float, str, str, str]:
    if stage == "train":
        method, traits = _traits(params, name, together)
        steps = None if name in together else planned_steps(params, name, root)
        return pricer.price(stage, method, device, traits, steps, name)
    if stage == "train_sweep":
        packed = _packed_hours(params, pricer, name, device, root)
        if packed is not None:
            return packed
        # no fit of the packed step applies (on CPUs, another generator): the sum of its cells' runs
        parts, steps = [], 0
        for cell in params.cells_of(name):
            method, traits = _traits(params, cell, set())
            cell_steps = planned_steps(params, cell, root)
            parts.append(pricer.price("train", method, device, traits, cell_steps, cell))
            steps += cell_steps
        basis = "no measurement" if any(p[1] == "no measurement" for p in parts) else "extrapolated"
        return (sum(p[0] for p in parts), basis, parts[0][2],
                f"{len(parts)} cells, {steps:,} steps in all, each priced as a run of its own")
    if stage == "warmstart":
        method, traits = _traits(params, name, together)
        critics, warmup = _critics(params.preset)
        hours, basis, cost, how = pricer.price(stage, method, device, traits, critics * warmup, name)
        return hours, basis, cost, f"{critics:,} critics x {warmup:,} steps: {how}"
    if stage in ("sample", "evaluate"):
        method, traits = _traits(params, name, together)
        return pricer.price(stage, method, device, traits, None, name)
    if stage == "w2_noise":
        return _w2_hours(params, pricer, name, device)
    traits: dict[str, Any] = {"dataset": name}
    if stage == "evaluate_real":
        traits["protocol"] = "gs_wgan" if "gs_wgan" in params.evaluation_protocols(real=name) else "project"
    return pricer.price(stage, None, device, traits, None, name)


def _packed_hours(params: Params, pricer: _Pricer, sweep: str, device: str,
                  root: Path) -> tuple[float, str, str, str] | None:
    """A sweep trained together, priced as it trains (``methods.dp_sinkhorn.together``): its cells in groups of
    one shape (batch size and generated batch, i.e. one per ``p``), each group stepping all its members until
    the first has its steps, then the rest as a smaller group; a packed step of K members costs the cost
    entry's fitted T(K) = a + b K seconds. None when no ``packed`` entry applies."""
    from dpsynth.ot.losses import num_extra

    cells = params.cells_of(sweep)
    method, traits = _traits(params, cells[0], set(cells))
    cost = find_cost(pricer.costs, "train_sweep", method, device, params.scale, traits)
    if cost is not None and cost.packed is None and cost.steps_per_s is not None:
        # a rate per member-step (the entropic WGAN's packed MLP: K members cost K member-steps)
        pricer.used[cost.id] = cost
        member_steps = sum(planned_steps(params, cell, root) for cell in cells)
        basis = "no measurement" if cost.basis == "assumption" else "extrapolated"
        return (member_steps / cost.steps_per_s / 3600, basis, cost.id,
                f"{len(cells)} cells packed, {member_steps:,} member-steps at {cost.steps_per_s:g} member-steps/s")
    if cost is None or cost.packed is None:
        return None
    pricer.used[cost.id] = cost
    a, b = cost.packed
    groups: dict[tuple[int, int], list[int]] = {}
    for cell in cells:
        h = resolve_run(params, cell).experiment.hparams
        groups.setdefault((h.batch_size, num_extra(h.batch_size, h.p) if hasattr(h, "p") else 0), []).append(
            planned_steps(params, cell, root))
    seconds, packed_steps = 0.0, 0
    for steps in groups.values():
        done = 0
        for i, s in enumerate(sorted(steps)):  # K = the members still training between two finishes
            seconds += (s - done) * (a + b * (len(steps) - i))
            packed_steps += s - done
            done = s
    basis = "no measurement" if cost.basis == "assumption" else "extrapolated"
    sizes = "+".join(str(len(g)) for g in groups.values())
    return (seconds / 3600, basis, cost.id, f"{len(cells)} cells in {len(groups)} packed group(s) (K = {sizes}), "
            f"{packed_steps:,} packed steps at T(K) = {a * 1e3:.3g} + {b * 1e3:.3g} K ms")


def _w2_hours(params: Params, pricer: _Pricer, dataset: str, device: str) -> tuple[float, str, str, str]:
    """The W2-vs-noise job: every (noise level, loss) run and its step check, per seed, priced per loss."""
    from dpsynth.data.registry import DATASETS
    from dpsynth.evaluate.w2 import sweep_runs

    cfg, preset = params.w2_noise[dataset], params.preset
    if cfg.scales is not None and params.scale not in cfg.scales:
        return 0.0, "not run", "-", f"its stage trains nothing at scale {params.scale!r} (w2_noise.{dataset}.scales)"
    steps = preset.w2_noise_steps or cfg.steps  # the scale's count replaces the sweep's (stages/w2noise.py)
    # the sweep's own training runs (the scale's w2_noise_seeds, else w2_noise.<dataset>.seeds; the top-level seeds
    # only where neither is set), as the stage trains them: every (noise, loss) run and step check once per seed
    seeds = preset.w2_noise_seeds or (cfg.seeds if cfg.seeds is not None else params.seeds)
    pack = preset.w2_noise_pack or 0  # the packed trainer: one process trains, a rate per member-step
    runs = sweep_runs(cfg.noise_levels, cfg.losses, steps, cfg.check_noise_level, seeds)
    data = "points" if DATASETS[dataset].kind == "manifold2d" else "images"
    parts = [pricer.price("w2_noise", "entropic_wgan", device, {"loss": r.loss, "data": data, "generator": "mlp",
                                                                "dataset": dataset, "packed": bool(pack)}, r.steps,
                          f"w2_noise {dataset}") for r in runs]
    basis = "no measurement" if any(p[1] == "no measurement" for p in parts) else "extrapolated"
    hours = sum(p[0] for p in parts) / (1 if pack else cfg.workers)
    total = sum(r.steps for r in runs)
    how = f"packs of up to {pack}, {cfg.workers} scoring worker(s)" if pack else f"{cfg.workers} worker(s)"
    return hours, basis, parts[0][2], f"{len(runs)} runs ({len(seeds)} seed(s)), {total:,} steps, {how}"


def render_budget(budget: Budget, every_job: bool = False) -> str:
    """The budget as text: totals, then one line per (stage, device, cost entry) -- or per job with
    ``every_job`` -- then each cost entry used, with its basis and source."""
    gpu, cpu = budget.gpu_hours(), budget.cpu_hours()
    on_gpu = sum(j.device == "gpu" for j in budget.jobs)
    mem = max(budget.jobs, key=lambda j: j.mem_mb or 0)
    lines = [f"{budget.target} at scale {budget.scale!r} ({'; '.join(budget.papers)})",
             f"  jobs      {len(budget.jobs):10,}   {on_gpu} of them ask for a GPU",
             f"  GPU-hours {gpu:10,.1f}   of which no measurement: {budget.gpu_hours('no measurement'):,.1f}",
             f"  CPU-hours {cpu:10,.1f}   of which no measurement: {budget.cpu_hours('no measurement'):,.1f} "
             "(hours x the job's threads, jobs without a GPU)",
             f"  memory    largest job {mem.mem_mb:,} MB ({mem.stage}), as requested in {RESOURCES}, not measured"
             if mem.mem_mb else "  memory    every job at the profile's default (workflow/resources.yaml sets none)",
             ""]
    rows: list[tuple[str, str, str, str, str, str]] = []
    if every_job:
        rows = [(f"{j.stage} {j.name}", j.device, f"{j.hours:,.2f}", j.basis, j.cost, j.how) for j in budget.jobs]
    else:
        groups: dict[tuple[str, str, str, str], list[JobCost]] = {}
        for j in budget.jobs:
            groups.setdefault((j.stage, j.device, j.cost, j.basis), []).append(j)
        for (stage, device, cost, basis), jobs in groups.items():
            label = f"{stage} {jobs[0].name}" if len(jobs) == 1 else f"{stage} x{len(jobs)}"
            how = jobs[0].how if len(jobs) == 1 else f"e.g. {jobs[0].name}: {jobs[0].how}"
            rows.append((label, device, f"{sum(j.hours for j in jobs):,.2f}", basis, cost, how))
    head = ("job", "device", "hours", "basis", "cost entry", "how")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(5)]
    for r in [head, *rows]:
        lines.append("  " + "  ".join(f"{v:<{w}}" for v, w in zip(r[:5], widths)) + f"  {r[5]}")
    lines += ["", "cost entries (benchmarks/costs.yaml):"]
    for cid, c in budget.costs.items():
        value = (f"{c.steps_per_s:g} steps/s" if c.steps_per_s is not None else f"{c.hours:g} h per job"
                 if c.hours is not None else f"T(K) = {c.packed[0] * 1e3:.3g} + {c.packed[1] * 1e3:.3g} K ms per "
                 "packed step" if c.packed is not None else "?")
        basis = LABELS[c.basis] if c.basis != "measured" else "measured"
        lines.append(f"  {cid}: {value}, {basis} -- {c.source}")
        lines.append(f"      {c.note}")
    lines.append("basis: measured = measured for this job; extrapolated = a measured rate carried to the run's steps "
                 "(or a measured value to another shape, by the rule its entry states); no measurement = an assumption "
                 "(its entry says which)")
    return "\n".join(lines)
