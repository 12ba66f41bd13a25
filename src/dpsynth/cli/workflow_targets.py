"""`dpsynth workflow targets [TARGET]` and `dpsynth workflow budget TARGET`: the build targets, one per paper table
(``dpsynth.config.targets``), and what one costs at a scale (``dpsynth.workflow.budget``). Loaded by name when one
of them runs (``dpsynth.cli.workflow``)."""

from __future__ import annotations

import argparse
import json

from dpsynth.cli.common import params_from_args


def _target_or_refuse(params, name: str):  # type: ignore[no-untyped-def]  # (Params, str) -> TableTarget
    """The build target ``name``, or one line listing where the names are."""
    from dpsynth.config import table_targets
    from dpsynth.errors import ConfigError, did_you_mean

    targets = table_targets(params)
    if name not in targets:
        raise ConfigError(f"no build target {name!r}{did_you_mean(name, targets)} (`dpsynth workflow targets` "
                          "lists them)")
    return targets[name]


def targets(args: argparse.Namespace) -> int:
    from dpsynth.config import table_targets
    from dpsynth.config.targets import build_command

    params = params_from_args(args)
    assert params is not None
    targets = table_targets(params)
    if args.target is not None:
        t = _target_or_refuse(params, args.target)
        record = {"target": t.name, "tables": list(t.tables), "papers": list(t.papers), "runs": t.runs(params),
                  "sweeps": list(t.sweeps), "train_sweeps": t.train_sweeps(params), "real": list(t.real),
                  "w2_noise": list(t.w2_noise), "left_out": [list(x) for x in t.left_out]}
        if args.json:
            print(json.dumps(record, indent=1))
            return 0
        print(f"{t.name}: {'; '.join(t.papers)} (params.yaml tables: {', '.join(t.tables)})")
        for key in ("runs", "sweeps", "real", "w2_noise"):
            print(f"  {key}: {', '.join(record[key]) or '-'}")
        for sweep, other in t.left_out:
            print(f"  left out: sweep {sweep} (every cell of it is a cell of {other})")
        print(f"  build: {build_command(t.name, 'paper')}   (results/targets/{t.name}/; on a SLURM cluster add "
              "--profile slurm)")
        return 0
    rows = [{"target": n, "papers": list(t.papers), "tables": list(t.tables), "runs": len(t.runs(params)),
             "real": list(t.real), "w2_noise": list(t.w2_noise)} for n, t in targets.items()]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    width = max(len(r["target"]) for r in rows)
    print(f"{'TARGET':<{width}}  RUNS  PAPER TABLE (params.yaml tables)")
    for r in rows:
        extra = [f"{len(r['real'])} real-data row(s)"] if r["real"] else []
        extra += [f"W2 sweep on {', '.join(r['w2_noise'])}"] if r["w2_noise"] else []
        print(f"{r['target']:<{width}}  {r['runs']:>4}  {'; '.join(r['papers'])} ({', '.join(r['tables'])})"
              + (f"; {', '.join(extra)}" if extra else ""))
    print(f"build one: {build_command('<target>', '<scale>')}   (`dpsynth workflow targets <target>`: its runs)")
    return 0


def budget(args: argparse.Namespace) -> int:
    from dpsynth.workflow.budget import render_budget, target_budget

    params = params_from_args(args)
    assert params is not None
    budget = target_budget(params, args.target, gpus=not args.no_gpus, costs=args.costs)
    print(json.dumps(budget.as_dict(), indent=1) if args.json else render_budget(budget, every_job=args.jobs))
    return 0
