"""What determines each pipeline job's output, as a short hash Snakemake can compare.

Snakemake re-runs a job when its ``params:`` change (rerun trigger ``params``), but the jobs read
their settings from a file, so an edit to params.yaml was invisible to it ("Nothing to be done"
with a stale generator). Each rule therefore carries ``fingerprint(params, stage, name)``: the
resolved settings that job reads, and only those, so an edit re-runs exactly the jobs it
affects -- as DVC does with its per-stage ``params:`` lists. Data versions are not hashed here:
they are the jobs' input files, which Snakemake already compares.

Erring on inclusion is deliberate: a field wrongly included costs a re-run, a field wrongly
left out serves a stale result. Settings equal to their defaults are left out of the hash, so a
new configuration field (with a default) does not re-run a finished pipeline; a changed default
is a code change, which Snakemake does not track (DVC's code deps do).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from dpsynth.config import Params, ScalePreset, method_spec, resolve_run
from dpsynth.config.scales import PROTOCOL_SIZES

#: Preset fields each job kind reads (the rest of the preset belongs to other stages).
_SAMPLE = ("n_synthetic", "n_synthetic_sets")
_EVALUATE = ("n_synthetic_sets", "classifier_max_epochs", "classifier_train_subset", "classifier_test_subset",
             "fid_samples", "fid_reference_samples")
_W2 = ("w2_noise_steps", "w2_noise_train_subset", "w2_noise_seeds", "w2_noise_pack")
#: Read only by the evaluate jobs of a table with that ``protocol:`` (``_protocols``), by no other job.
_PROTOCOLS = tuple(PROTOCOL_SIZES.values())
_NOT_TRAINING = {*_SAMPLE, *_EVALUATE, *_W2, *_PROTOCOLS}

STAGES = ("prepare_data", "privatize", "warmstart", "train_sweep", "train", "sample", "evaluate", "evaluate_real",
          "w2_noise", "report")


def _preset_for_training(preset: ScalePreset, method: str) -> dict[str, Any]:
    """The preset fields training reads, with the per-method maps cut to this method."""
    dumped = preset.model_dump(mode="json", exclude_defaults=True)
    out = {k: v for k, v in dumped.items() if k not in _NOT_TRAINING}
    out["hparams"] = out.get("hparams", {}).get(method, {})
    out["method_train_steps"] = out.get("method_train_steps", {}).get(method)
    # this method's own batch cap only, and only where it has one (the other methods' hashes stay as they were)
    cap = out.pop("method_max_batch_size", {}).get(method)
    if cap is not None:
        out["method_max_batch_size"] = cap
    if method_spec(method).releases_once:  # a scale's step budget and batch cap do not apply to it
        for key in ("train_steps", "max_batch_size", "method_train_steps", "method_max_batch_size"):
            out.pop(key, None)
    return out


def _pick(preset: ScalePreset, keys: tuple[str, ...]) -> dict[str, Any]:
    dumped = preset.model_dump(mode="json", exclude_defaults=True)
    return {k: dumped.get(k) for k in keys}


def _protocols(params: Params, *, experiment: str | None = None, real: str | None = None) -> dict[str, Any]:
    """``{"protocols": {name: its sizes at this scale}}`` for an evaluate job that computes a paper's own
    protocol (``Params.evaluation_protocols``); empty for every other job, whose hash it leaves as it was.
    (``data.public`` is not here: no evaluate job's output depends on it -- the report decides what it shows.)"""
    names = params.evaluation_protocols(experiment=experiment, real=real)
    if not names:
        return {}
    preset = params.preset
    sizes = {n: getattr(preset, PROTOCOL_SIZES[n]).model_dump(mode="json", exclude_defaults=True) for n in names}
    return {"protocols": sizes}


def _experiment(params: Params, name: str) -> dict[str, Any]:
    """The run as params.yaml resolves it at this scale (``config.resolve_run``, the same call the
    train stage makes): the experiment as run, the scale's changes and the privacy plan."""
    if name not in params.all_experiments():
        raise ValueError(f"fingerprint: no experiment named {name!r} in the parameters")
    return resolve_run(params, name).settings()


def stage_settings(params: Params, stage: str, name: str) -> dict[str, Any]:
    """Everything from the configuration that job ``stage``/``name`` reads (``name`` is the
    experiment, the dataset for ``prepare_data``, ``evaluate_real`` and ``w2_noise``, the sweep
    for ``train_sweep``)."""
    common = {"stage": stage, "scale": params.scale}
    run = {"seeds": params.seeds, "threads": params.threads, "privacy_noise": params.privacy_noise}
    evaluation = params.evaluation.model_dump(mode="json", exclude={"real_datasets"}, exclude_defaults=True)
    if stage == "prepare_data":  # the same files at every scale (subsets are taken by the stages that use them)
        # (data.public says where the report may go, not what is prepared)
        data = params.data.model_dump(mode="json", exclude_defaults=True, exclude={"public"})
        return {"stage": stage, "dataset": name, "data": data}
    if stage == "w2_noise":
        # workers only says how many processes train the runs: the rows do not depend on it
        sweep = params.w2_noise[name].model_dump(mode="json", exclude_defaults=True, exclude={"workers"})
        return {**common, **run, "dataset": name, "sweep": sweep, "preset": _pick(params.preset, _W2)}
    if stage == "evaluate_real":
        return {**common, **run, "dataset": name, "evaluation": evaluation,
                "preset": _pick(params.preset, _EVALUATE), **_protocols(params, real=name)}
    if stage == "report":
        return {**common, "params": params.model_dump(mode="json", exclude_defaults=True)}
    if stage == "train_sweep":
        # What the group job shares with every cell: the base experiment's training settings and
        # the mode. The swept values are left out on purpose: a cell added later trains alone in
        # its own job, and the cells already trained are not re-run (in both DAGs).
        sweep = params.sweeps[name]
        return {"stage": stage, "sweep": name, "train_together": sweep.train_together,
                "base": stage_settings(params, "train", sweep.base)}
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; one of {', '.join(STAGES)}")
    exp = _experiment(params, name)
    method = exp["experiment"]["method"]
    if stage in ("privatize", "warmstart", "train"):
        out = {**common, **run, **exp, "preset": _preset_for_training(params.preset, method)}
        if stage == "train" and (warmstart := params.warmstart_for(name)) is not None:
            out["warmstart"] = warmstart
        return out
    if stage == "sample":
        return {**common, **run, **exp, "preset": _pick(params.preset, _SAMPLE)}
    return {**common, **run, **exp, "evaluation": evaluation, "preset": _pick(params.preset, _EVALUATE),
            **_protocols(params, experiment=name)}


def fingerprint(params: Params, stage: str, name: str = "") -> str:
    """A 16-hex-digit hash of ``stage_settings``: equal exactly when the job's settings are."""
    blob = json.dumps(stage_settings(params, stage, name), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
