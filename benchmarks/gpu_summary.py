"""Helpers for `benchmarks/gpu.sh`: the params copies it trains with, the train slice's and the
fidelity probe's JSON and the summary table against the issue's targets.

Kept out of the shell script so the numbers (projection, targets, device) are computed in one
place and the script stays a list of commands. Subcommands:

* ``params`` -- a copy of params.yaml for a run of gpu.sh: ``paper`` (the timed slice) keeps every
  setting of the shipped file (``privacy_noise`` included) but sets ``scale: paper`` and an absolute
  data root;
  ``dry`` is the CPU dry run's: smoke scale, one DP-Sinkhorn experiment (a copy of dps_mnist) on
  the bundled 28x28 digits, no pipeline targets; ``probe`` is the fidelity probe's: one scale's
  settings (``--scale``, quick; the dry run smoke) with its step budget (``train_steps``) set to
  ``--total-steps`` -- sigma is calibrated so the run spends the experiment's own epsilon in those
  steps --, only that experiment in the pipeline, FID weights from the machine (no download).
* ``slice`` -- reads the summary ``dpsynth train --max-steps-this-run`` printed and writes the
  slice's JSON: steps/s of the training loop, the run's total steps, the projected full wall-clock
  and whether each target is met.
* ``fidelity`` -- the probe's JSON from its train summary, privacy report and metrics.json (accuracy,
  FID/KID, the evaluate stage's own seconds, the devices metrics.json names, epsilon) with each
  stage's wall seconds; copies the run's sample grid beside it.
* ``report`` -- prints the step benchmark, the sweep's speed-up (against the same configurations one
  after another, and against one run of the fast step), the slice's projection and the probe's
  headline against the targets, and writes them to one JSON.
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import platform
import shutil
import sys
from pathlib import Path
from typing import Any

from dpsynth.errors import DpsynthError
from dpsynth.io import read_json, write_json

#: The issue's targets (#20): the 3.46 M-step MNIST run under 30 minutes on one H100, which
#: needs about 1,900 steps/s of the training loop; a batched sweep of 8 over 4x the throughput of
#: the same 8 trained one after another. The two train targets are checked separately: at the
#: paper's 3,464,988 steps, 1,900 steps/s is 30.4 minutes.
TARGET_STEPS_PER_S = 1900.0
TARGET_FULL_RUN_MINUTES = 30.0
TARGET_SWEEP_SPEEDUP = 4.0
#: Issue #42: the packed sweep of K = 8 gives >= 5x the config-steps/s of ONE graphed run (the fast step
#: alone), and the whole GPU check (gpu.sh) runs in under 8 minutes.
TARGET_PACKED_OVER_ONE = 5.0
TARGET_CHECK_MINUTES = 8.0
#: Keys the train summary of a run stopped by --max-steps-this-run must carry (dp_sinkhorn).
SLICE_KEYS = ("steps_per_s_this_run", "total_steps")


class SummaryError(Exception):
    """A missing or malformed input: printed as one line, exit code 2."""


def _load_yaml(path: Path) -> dict[str, Any]:
    import yaml

    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict):
        raise SummaryError(f"{path}: not a YAML mapping")
    return data


def make_params(template: Path, mode: str, data_root: Path, out: Path, experiment: str,
                total_steps: int | None, fid_weights: Path | None = None, scale: str = "quick") -> None:
    """Write the params copy (see module docstring); the data root is absolute so the run can
    happen in any working directory without touching the repository's data/."""
    import yaml

    p = _load_yaml(template)
    p.setdefault("data", {})["root"] = str(data_root.resolve())
    if mode in ("paper", "probe") and experiment not in p.get("experiments", {}):
        raise SummaryError(f"{template}: no experiment {experiment!r}")
    if mode == "paper":
        p["scale"] = "paper"
    elif mode == "probe":  # a scale's settings (quick), its step budget PROBE_STEPS (sigma calibrated to it)
        if total_steps is None or total_steps < 1:
            raise SummaryError(f"--mode probe needs --total-steps >= 1, got {total_steps}")
        preset = p.get("scales", {}).get(scale)
        if not isinstance(preset, dict) or "train_steps" not in preset:
            raise SummaryError(f"{template}: scales.{scale} has no train_steps (the step budget) to set")
        p["scale"] = scale
        preset["train_steps"] = total_steps
        p["pipeline"] = {"experiments": [experiment], "sweeps": []}
        ev = p.setdefault("evaluation", {})
        ev["fid_download"] = False  # no network: FID from local weights, else "unavailable" with the reason
        if fid_weights is not None:
            if not fid_weights.is_file():
                raise SummaryError(f"FID_WEIGHTS {fid_weights}: no such file")
            ev["fid_weights"] = str(fid_weights.resolve())
    else:  # dry: the shape of tests/conftest.py digits28_smoke_params
        base = p["experiments"]["dps_mnist"]
        p.update(scale="smoke", datasets=["digits28"], pipeline={"experiments": [], "sweeps": []}, w2_noise={})
        p["evaluation"]["real_datasets"] = []
        exp = copy.deepcopy(base)
        exp["dataset"] = "digits28"
        exp["description"] = "gpu.sh dry run: dps_mnist's settings on the bundled 28x28 digits"
        p["experiments"][experiment] = exp
        if total_steps is not None:
            p["scales"]["smoke"]["train_steps"] = total_steps
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(p, sort_keys=False))


def _last_json_object(text: str, source: str) -> dict[str, Any]:
    """The summary `dpsynth train --json` prints last (indented JSON starting with a line '{')."""
    starts = [i for i, line in enumerate(text.splitlines()) if line.startswith("{")]
    lines = text.splitlines()
    for i in reversed(starts):
        try:
            obj = json.loads("\n".join(lines[i:]))
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            return obj
    raise SummaryError(f"{source}: no JSON summary found in `dpsynth train`'s output")


def device_info(device: str) -> dict[str, Any]:
    """Name the device the numbers come from (a GPU's marketing name, else the CPU's)."""
    import torch

    info: dict[str, Any] = {"device": device, "torch": torch.__version__}
    if device.startswith("cuda") and torch.cuda.is_available():
        info["device_name"] = torch.cuda.get_device_name(torch.device(device))
        info["cuda"] = torch.version.cuda
    else:
        info["device_name"] = platform.processor() or platform.machine()
    return info


def slice_result(summary: dict[str, Any], source: str, requested: int) -> dict[str, Any]:
    """The slice's numbers from the train summary; refuses one without the loop's rate."""
    missing = [k for k in SLICE_KEYS if k not in summary]
    if missing:
        raise SummaryError(
            f"{source}: the train summary lacks {', '.join(missing)} (has: {', '.join(sorted(summary))}); "
            "a run stopped by --max-steps-this-run must report steps_per_s_this_run and total_steps "
            "(dpsynth.methods.dp_sinkhorn.train)")
    rate, total = float(summary["steps_per_s_this_run"]), int(summary["total_steps"])
    steps = int(summary.get("steps_this_run", summary.get("steps", 0)))  # a resumed run: this run's only
    if not rate > 0 or total < 1 or steps < 1:
        raise SummaryError(f"{source}: implausible slice: steps {steps}, steps/s {rate}, total steps {total}")
    seconds = total / rate
    return {
        "experiment": summary.get("experiment"), "steps_this_run": steps, "steps_requested": requested,
        "steps_per_s": rate, "total_steps": total,
        "projected_full_seconds": seconds, "projected_full_minutes": seconds / 60,
        "projected_full_hours": seconds / 3600,
        "wall_seconds_this_run": summary.get("wall_seconds"),
        "projection_note": "total_steps / steps_per_s of this run's training loop (checkpoints every "
                           "checkpoint_every steps included; start-up, data loading and the final release not)",
        "targets": {
            "steps_per_s": {"op": ">=", "target": TARGET_STEPS_PER_S, "value": rate,
                            "met": rate >= TARGET_STEPS_PER_S},
            "full_run_minutes": {"op": "<", "target": TARGET_FULL_RUN_MINUTES, "value": seconds / 60,
                                 "met": seconds / 60 < TARGET_FULL_RUN_MINUTES},
        },
        "finished": bool(summary.get("finished", False)),
        "train_step_path": _step_path(summary),
    }


def _step_path(summary: dict[str, Any]) -> str:
    """Which training step ran, as the trainer reports it (absent from older summaries)."""
    return ("cuda_graph" if summary.get("cuda_graph") else "fast_step eager" if summary.get("fast_step") else
            "plain" if "fast_step" in summary else "not reported")


def cmd_slice(a: argparse.Namespace) -> None:
    src = Path(a.train_stdout)
    if not src.is_file():
        raise SummaryError(f"{src}: `dpsynth train` wrote no output")
    res = slice_result(_last_json_object(src.read_text(), str(src)), str(src), a.steps_requested)
    res = {**res, **device_info(a.device), "scale": a.scale, "dry_run": a.dry_run,
           "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "command": a.command}
    write_json(Path(a.out), res)


def _json_object(path: Path, what: str) -> dict[str, Any]:
    """A JSON object the probe's stages wrote; a missing file says which stage did not write it."""
    if not path.is_file():
        raise SummaryError(f"{path}: not found ({what} wrote no such file)")
    obj = read_json(path)
    if not isinstance(obj, dict):
        raise SummaryError(f"{path}: not a JSON object ({what})")
    return obj


def _mean(rec: Any) -> float | None:
    """The mean of an available metrics.json summary ({"available", "mean", ...}), else None."""
    if isinstance(rec, dict) and rec.get("available", True) and isinstance(rec.get("mean"), int | float):
        return float(rec["mean"])
    return None


def fidelity_result(train: dict[str, Any], privacy: dict[str, Any], metrics: dict[str, Any],
                    seconds: dict[str, float], requested: int, sources: dict[str, str]) -> dict[str, Any]:
    """The probe's numbers: the train summary (`dpsynth train --json`), the run's privacy report
    (models/<experiment>/privacy.json) and its metrics.json (`dpsynth evaluate`); refuses inputs
    that lack what the JSON reports or that disagree on the run (another experiment, other steps)."""
    for name, obj, keys in (("train", train, ("experiment", "steps", "steps_per_s_this_run", "finished")),
                            ("privacy", privacy, ("epsilon", "headline", "target_epsilon", "delta", "sigma", "steps")),
                            ("metrics", metrics, ("experiment", "scale", "classifiers", "fid", "seconds"))):
        missing = [k for k in keys if k not in obj]
        if missing:
            raise SummaryError(f"{sources[name]}: lacks {', '.join(missing)}")
    exp, steps = train["experiment"], int(train["steps"])
    if metrics["experiment"] != exp:
        raise SummaryError(f"{sources['metrics']}: scores {metrics['experiment']!r}, the probe trained {exp!r}")
    if not train["finished"] or steps != requested or int(privacy["steps"]) != steps:
        raise SummaryError(f"{sources['train']}: the probe trained {steps} steps (finished: {train['finished']}; "
                           f"privacy report: {privacy['steps']}), PROBE_STEPS asked {requested}")
    clf, fid, ev_s = metrics["classifiers"], metrics["fid"], metrics["seconds"]
    if not isinstance(clf, dict) or not isinstance(fid, dict) or not isinstance(ev_s, dict):
        raise SummaryError(f"{sources['metrics']}: classifiers, fid and seconds must be JSON objects")
    accuracy = {k: _mean(v) for k, v in clf.items()}
    if any(v is None for v in accuracy.values()):
        raise SummaryError(f"{sources['metrics']}: a classifier without a mean accuracy: {accuracy}")
    eps = privacy["epsilon"].get(privacy["headline"]) if isinstance(privacy["epsilon"], dict) else None
    if not isinstance(eps, int | float):
        raise SummaryError(f"{sources['privacy']}: no epsilon under its headline {privacy['headline']!r}")
    rate = float(train["steps_per_s_this_run"])
    return {
        "experiment": exp, "scale": metrics["scale"], "steps": steps, "steps_requested": requested,
        "wall_seconds": {**seconds, "total": round(sum(seconds.values()), 3)},
        "train_steps_per_s": rate, "train_steps_per_s_wall": steps / seconds["train"],
        "train_step_path": _step_path(train),
        "accuracy": accuracy, "fid": _mean(fid), "kid": _mean(fid.get("kid")), "fid_inf": _mean(fid.get("fid_inf")),
        "fid_unavailable_reason": None if fid.get("available") else fid.get("reason", "not recorded"),
        "n_synthetic": metrics.get("n_synthetic"), "evaluate_seconds": ev_s,
        "metrics_device": {"classifiers": {k: sorted({str(r.get("device")) for r in v.get("runs", [])})
                                           for k, v in clf.items()},
                           "fid": fid.get("device")},
        "epsilon": eps, "epsilon_convention": privacy["headline"], "target_epsilon": privacy["target_epsilon"],
        "delta": privacy["delta"], "sigma": privacy["sigma"],
    }


def cmd_fidelity(a: argparse.Namespace) -> None:
    src = Path(a.train_stdout)
    if not src.is_file():
        raise SummaryError(f"{src}: `dpsynth train` wrote no output")
    seconds = {"train": a.train_seconds, "sample": a.sample_seconds, "evaluate": a.evaluate_seconds}
    if not all(v > 0 for v in seconds.values()):
        raise SummaryError(f"stage wall seconds must be > 0, got {seconds}")
    train = _last_json_object(src.read_text(), str(src))
    privacy = _json_object(Path(a.privacy), "`dpsynth train`")
    metrics = _json_object(Path(a.metrics), "`dpsynth evaluate`")
    png = Path(a.samples_png)
    if not png.is_file() or png.stat().st_size == 0:
        raise SummaryError(f"{png}: no sample grid (`dpsynth sample` writes it)")
    res = fidelity_result(train, privacy, metrics, seconds, a.steps_requested,
                          {"train": str(src), "privacy": a.privacy, "metrics": a.metrics})
    res = {**res, **device_info(a.device), "dry_run": a.dry_run, "samples_png": Path(a.samples_out).name,
           "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "command": a.command}
    shutil.copyfile(png, a.samples_out)
    write_json(Path(a.out), res)


def _mark(met: bool) -> str:
    return "MET" if met else "not met"


def cmd_report(a: argparse.Namespace) -> None:
    bench, train = read_json(a.step_sweep), read_json(a.train_slice)
    lines = [f"GPU benchmark on {bench.get('device_name')} ({bench.get('device')}), torch {bench.get('torch')}"
             + ("  [DRY RUN: plumbing only, not a measurement]" if train.get("dry_run") else ""), "",
             "step benchmark (MNIST settings, median steps/s):"]
    paths = bench.get("paths", {})
    for name, v in bench["steps"].items():
        lines.append(f"  {name:<16} {v['steps_per_s']:>10.1f}  ({paths.get(name, '?')})")
    lines.append(f"  fast / reference = {bench['ratio_fast_over_reference']:.2f}x")
    if "ratio_cuda_graph_over_eager" in bench:
        lines.append(f"  CUDA graph / eager fast step = {bench['ratio_cuda_graph_over_eager']:.2f}x")
    out: dict[str, Any] = {"device_name": bench.get("device_name"), "torch": bench.get("torch"),
                           "date": train.get("date"),
                           "step_benchmark": {k: v["steps_per_s"] for k, v in bench["steps"].items()},
                           "paths": paths, "train_slice": train["targets"], "dry_run": train.get("dry_run")}
    sw = bench.get("sweep")
    if sw is not None:
        ratio = sw["ratio_batched_over_sequential"]
        met = ratio > TARGET_SWEEP_SPEEDUP
        path = sw.get("paths", {}).get("batched", "?")
        lines += ["", f"sweep of {sw['configs']} ({sw['forward_mode']}, batched {path}):"
                  f" batched {sw['config_steps_per_s']['batched']:.1f} vs one after another "
                  f"{sw['config_steps_per_s']['sequential']:.1f} config-steps/s = {ratio:.2f}x "
                  f"(target > {TARGET_SWEEP_SPEEDUP:g}x: {_mark(met)})"]
        out["sweep"] = {"configs": sw["configs"], "op": ">", "target": TARGET_SWEEP_SPEEDUP, "value": ratio,
                        "met": met}
        batched, one = sw["config_steps_per_s"]["batched"], bench["steps"]["fast"]["steps_per_s"]
        packed = batched / one
        met = packed >= TARGET_PACKED_OVER_ONE
        lines.append(f"  packed sweep vs ONE run of the fast step ({paths.get('fast', '?')}): {batched:.1f} "
                     f"config-steps/s vs {one:.1f} steps/s = {packed:.2f}x (target >= {TARGET_PACKED_OVER_ONE:g}x: "
                     f"{_mark(met)})")
        out["packed_over_one_graphed"] = {"configs": sw["configs"], "op": ">=", "target": TARGET_PACKED_OVER_ONE,
                                          "value": packed, "met": met, "batched_config_steps_per_s": batched,
                                          "one_run_steps_per_s": one, "one_run_path": paths.get("fast")}
    t = train["targets"]
    lines += ["", f"train slice ({train['experiment']}, scale {train['scale']}, step {train.get('train_step_path')}): "
              f"{train['steps_this_run']:,} steps at {train['steps_per_s']:.1f} steps/s; "
              f"full run {train['total_steps']:,} steps -> "
              f"{train['projected_full_hours']:.2f} h ({train['projected_full_minutes']:.1f} min)",
              f"  steps/s >= {t['steps_per_s']['target']:g}: {_mark(t['steps_per_s']['met'])}",
              f"  full run < {t['full_run_minutes']['target']:g} min: {_mark(t['full_run_minutes']['met'])}"]
    if a.fidelity:
        fi = read_json(a.fidelity)
        w, ev = fi["wall_seconds"], fi["evaluate_seconds"]
        fid = f"FID {fi['fid']:.2f}, KID {fi['kid']:.4g}" if fi["fid"] is not None and fi["kid"] is not None else \
            f"FID {fi['fid']:.2f}" if fi["fid"] is not None else f"FID unavailable ({fi['fid_unavailable_reason']})"
        lines += ["", f"fidelity probe ({fi['experiment']}, scale {fi['scale']}, {fi['steps']:,} steps on "
                      f"{fi['device']}, epsilon {fi['epsilon']:.3f}): train {w['train']:.1f} s "
                      f"({fi['train_steps_per_s']:.1f} steps/s), sample {w['sample']:.1f} s, "
                      f"evaluate {w['evaluate']:.1f} s (" + ", ".join(f"{k} {v:g}" for k, v in ev.items()) + ")",
                  "  accuracy " + ", ".join(f"{k} {v:.4f}" for k, v in fi["accuracy"].items()) + f"; {fid}"]
        out["fidelity"] = {k: fi[k] for k in ("experiment", "scale", "steps", "accuracy", "fid", "kid",
                                              "evaluate_seconds", "wall_seconds", "train_steps_per_s", "epsilon")}
    if a.elapsed_seconds is not None:
        met = a.elapsed_seconds / 60 < TARGET_CHECK_MINUTES
        lines += ["", f"whole check (gpu.sh up to this table): {a.elapsed_seconds:.0f} s = "
                      f"{a.elapsed_seconds / 60:.1f} min (target < {TARGET_CHECK_MINUTES:g} min: {_mark(met)})"]
        out["check_minutes"] = {"op": "<", "target": TARGET_CHECK_MINUTES, "value": a.elapsed_seconds / 60,
                                "met": met}
    print("\n".join(lines))
    if a.out:
        write_json(Path(a.out), out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("params", help="write the params copy the slice or the probe trains with")
    p.add_argument("--template", type=Path, required=True)
    p.add_argument("--mode", choices=("paper", "dry", "probe"), required=True)
    p.add_argument("--data-root", type=Path, required=True)
    p.add_argument("--experiment", required=True)
    p.add_argument("--total-steps", type=int, default=None,
                   help="dry: the smoke scale's train_steps; probe: the quick scale's (required)")
    p.add_argument("--fid-weights", type=Path, default=None, help="probe: evaluation.fid_weights (a local file)")
    p.add_argument("--scale", choices=("smoke", "quick"), default="quick",
                   help="probe: the scale whose settings it trains and evaluates with (the dry run: smoke)")
    p.add_argument("--out", type=Path, required=True)
    s = sub.add_parser("slice", help="the train slice's JSON from `dpsynth train`'s printed summary")
    s.add_argument("--train-stdout", required=True)
    s.add_argument("--steps-requested", type=int, required=True)
    s.add_argument("--device", required=True)
    s.add_argument("--scale", required=True)
    s.add_argument("--dry-run", action="store_true")
    s.add_argument("--command", default="", help="the train command, recorded as run")
    s.add_argument("--out", required=True)
    f = sub.add_parser("fidelity", help="the fidelity probe's JSON (and its sample grid copied beside it)")
    f.add_argument("--train-stdout", required=True)
    f.add_argument("--privacy", required=True, help="models/<experiment>/privacy.json of the probe's run")
    f.add_argument("--metrics", required=True, help="results/runs/<experiment>/metrics.json of the probe's run")
    f.add_argument("--samples-png", required=True, help="results/runs/<experiment>/samples.png of the probe's run")
    f.add_argument("--samples-out", required=True, help="where the sample grid is copied")
    for stage in ("train", "sample", "evaluate"):
        f.add_argument(f"--{stage}-seconds", type=float, required=True, help=f"wall seconds of `dpsynth {stage}`")
    f.add_argument("--steps-requested", type=int, required=True)
    f.add_argument("--device", required=True)
    f.add_argument("--dry-run", action="store_true")
    f.add_argument("--command", default="", help="the probe's commands, recorded as run")
    f.add_argument("--out", required=True)
    r = sub.add_parser("report", help="print the summary table against the targets")
    r.add_argument("--step-sweep", required=True)
    r.add_argument("--train-slice", required=True)
    r.add_argument("--fidelity", default=None, help="the fidelity probe's JSON (its headline joins the table)")
    r.add_argument("--elapsed-seconds", type=float, default=None, help="gpu.sh's wall-clock so far")
    r.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    try:
        if a.cmd == "params":
            make_params(a.template, a.mode, a.data_root, a.out, a.experiment, a.total_steps, a.fid_weights, a.scale)
        elif a.cmd == "slice":
            cmd_slice(a)
        elif a.cmd == "fidelity":
            cmd_fidelity(a)
        else:
            cmd_report(a)
    except (SummaryError, DpsynthError) as e:  # DpsynthError: read_json's missing or bad file
        print(f"gpu_summary: {e}", file=sys.stderr)
        return 2
    except KeyError as e:  # report: a JSON of another version (or edited)
        print(f"gpu_summary: {a.cmd}: an input JSON lacks the key {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
