"""Helpers for `benchmarks/gpu.sh`: the params copy it trains with, the train slice's JSON and
the summary table against the issue's targets.

Kept out of the shell script so the numbers (projection, targets, device) are computed in one
place and the script stays a list of commands. Subcommands:

* ``params`` -- a copy of params.yaml for the timed slice: ``paper`` keeps every setting of the
  shipped file (``privacy_noise`` included) but sets ``scale: paper`` and an absolute data root;
  ``dry`` is the CPU dry run's: smoke scale, one DP-Sinkhorn experiment (a copy of dps_mnist) on
  the bundled 28x28 digits, no pipeline targets.
* ``slice`` -- reads the summary ``dpsynth train --max-steps-this-run`` printed and writes the
  slice's JSON: steps/s of the training loop, the run's total steps, the projected full wall-clock
  and whether each target is met.
* ``report`` -- prints the step benchmark, the sweep's speed-up and the slice's projection
  against the targets, and writes them to one JSON.
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import platform
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
                total_steps: int | None) -> None:
    """Write the params copy (see module docstring); the data root is absolute so the run can
    happen in any working directory without touching the repository's data/."""
    import yaml

    p = _load_yaml(template)
    p.setdefault("data", {})["root"] = str(data_root.resolve())
    if mode == "paper":
        if experiment not in p.get("experiments", {}):
            raise SummaryError(f"{template}: no experiment {experiment!r}")
        p["scale"] = "paper"
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
        # which training step ran, as the trainer reports it (absent from older summaries)
        "train_step_path": ("cuda_graph" if summary.get("cuda_graph") else
                            "fast_step eager" if summary.get("fast_step") else
                            "plain" if "fast_step" in summary else "not reported"),
    }


def cmd_slice(a: argparse.Namespace) -> None:
    src = Path(a.train_stdout)
    if not src.is_file():
        raise SummaryError(f"{src}: `dpsynth train` wrote no output")
    res = slice_result(_last_json_object(src.read_text(), str(src)), str(src), a.steps_requested)
    res = {**res, **device_info(a.device), "scale": a.scale, "dry_run": a.dry_run,
           "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "command": a.command}
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
    t = train["targets"]
    lines += ["", f"train slice ({train['experiment']}, scale {train['scale']}, step {train.get('train_step_path')}): "
              f"{train['steps_this_run']:,} steps at {train['steps_per_s']:.1f} steps/s; "
              f"full run {train['total_steps']:,} steps -> "
              f"{train['projected_full_hours']:.2f} h ({train['projected_full_minutes']:.1f} min)",
              f"  steps/s >= {t['steps_per_s']['target']:g}: {_mark(t['steps_per_s']['met'])}",
              f"  full run < {t['full_run_minutes']['target']:g} min: {_mark(t['full_run_minutes']['met'])}"]
    print("\n".join(lines))
    if a.out:
        write_json(Path(a.out), out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("params", help="write the params copy the slice trains with")
    p.add_argument("--template", type=Path, required=True)
    p.add_argument("--mode", choices=("paper", "dry"), required=True)
    p.add_argument("--data-root", type=Path, required=True)
    p.add_argument("--experiment", required=True)
    p.add_argument("--total-steps", type=int, default=None, help="dry: the smoke scale's train_steps")
    p.add_argument("--out", type=Path, required=True)
    s = sub.add_parser("slice", help="the train slice's JSON from `dpsynth train`'s printed summary")
    s.add_argument("--train-stdout", required=True)
    s.add_argument("--steps-requested", type=int, required=True)
    s.add_argument("--device", required=True)
    s.add_argument("--scale", required=True)
    s.add_argument("--dry-run", action="store_true")
    s.add_argument("--command", default="", help="the train command, recorded as run")
    s.add_argument("--out", required=True)
    r = sub.add_parser("report", help="print the summary table against the targets")
    r.add_argument("--step-sweep", required=True)
    r.add_argument("--train-slice", required=True)
    r.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    try:
        if a.cmd == "params":
            make_params(a.template, a.mode, a.data_root, a.out, a.experiment, a.total_steps)
        elif a.cmd == "slice":
            cmd_slice(a)
        else:
            cmd_report(a)
    except (SummaryError, DpsynthError) as e:  # DpsynthError: read_json's missing or bad file
        print(f"gpu_summary: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
