"""`dpsynth workflow dvc [--check]`: write dvc.yaml from params.yaml, or check it is up to date;
`dpsynth workflow settings`: write each job's settings file (DVC's `settings` stage runs it);
`dpsynth workflow plan [TARGET]`: the stages `dvc repro` will run, before it runs (``dpsynth.workflow.plan``);
`dpsynth workflow targets [TARGET]`: the build targets, one per paper table (``dpsynth.config.targets``);
`dpsynth workflow budget TARGET`: its jobs, GPU- and CPU-hours and memory at a scale (``dpsynth.workflow.budget``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from dpsynth.cli.common import add_params_arg, params_from_args, params_path


def _dvc(args: argparse.Namespace) -> int:
    from dpsynth.errors import DpsynthError
    from dpsynth.io import atomic_open
    from dpsynth.workflow.dvc import render, stale_diff

    params = params_from_args(args)
    assert params is not None
    out = Path(args.output)
    if args.check:
        diff = stale_diff(params, out)
        if diff:
            print("\n".join(diff[:60]) + ("\n..." if len(diff) > 60 else ""))
            raise DpsynthError(f"{out} is stale for {params_path(args)}: run `dpsynth workflow dvc` to regenerate it "
                               f"({sum(1 for d in diff if d[:1] in '+-' and d[:3] not in ('+++', '---'))} lines differ)")
        print(f"{out}: up to date with {params_path(args)}")
        return 0
    text = render(params)
    with atomic_open(out) as f:
        f.write(text)
    print(f"wrote {out} ({len(text.splitlines())} lines) from {params_path(args)}")
    return 0


def _settings(args: argparse.Namespace) -> int:
    from dpsynth.workflow.dvc import refuse_stale_release_flags
    from dpsynth.workflow.settings import SETTINGS_DIR, write_settings

    params = params_from_args(args)
    assert params is not None
    # DVC's first stage: every `dvc repro` after an edit of params.yaml runs it before any other, so a dvc.yaml
    # whose push flags would send what params.yaml now keeps here stops the pipeline before it makes anything
    refuse_stale_release_flags(Path("dvc.yaml"), f"checked for {params_path(args)}")
    written = write_settings(params)
    print(f"{SETTINGS_DIR}: {len(written)} job settings changed" + "".join(f"\n  {w}" for w in written))
    return 0


def _plan(args: argparse.Namespace) -> int:
    import json

    from dpsynth.errors import DpsynthError
    from dpsynth.workflow.dvc import stale_diff
    from dpsynth.workflow.plan import dvc_plan

    params = params_from_args(args)
    assert params is not None
    if args.target is not None:
        from dpsynth.config import table_targets
        from dpsynth.errors import ConfigError, did_you_mean

        known = table_targets(params)
        if args.target not in known:
            raise ConfigError(f"no build target {args.target!r}{did_you_mean(args.target, known)} (`dpsynth "
                              "workflow targets` lists them)")
    if not Path("dvc.yaml").is_file():
        raise DpsynthError("no dvc.yaml in this folder: run `dpsynth workflow plan` in the project's root "
                           "(or write it with `dpsynth workflow dvc`)")
    if stale_diff(params, Path("dvc.yaml")):
        raise DpsynthError(f"dvc.yaml is stale for {params_path(args)} (an experiment or sweep added to or removed "
                           "from `pipeline:`): run `dpsynth workflow dvc` first, then plan")
    from dvc.exceptions import DvcException

    try:
        plan = dvc_plan(params, target=args.target)
    except DvcException as exc:  # DVC's own errors (not a DVC project, a malformed dvc.lock): one line, DVC's words
        raise DpsynthError(f"dvc: {exc}") from exc
    if args.json:
        print(json.dumps({"stages": plan.stages, "changed": plan.changed, "reasons": plan.reasons,
                          "settings_written": plan.settings_written, "repro": plan.repro}))
        return 0
    if plan.settings_written:
        print(f"settings files brought up to date: {len(plan.settings_written)}")
    if args.target is not None:
        out = f"results/targets/{args.target}"
        print(f"{args.target} with DVC: dvc repro {' '.join(plan.repro)}\n  then render it: dpsynth report "
              f"--tables {out}/tables --figures {out}/figures (what `snakemake {args.target}` does last)")
    if not plan.stages:
        print("dvc repro has nothing to run")
        return 0
    width = max(map(len, plan.stages))
    print(f"dvc repro will run {len(plan.stages)} stage(s), {len(plan.changed)} changed and what follows them:")
    for stage in plan.stages:
        print(f"  {stage:<{width}}  {plan.reasons[stage]}")
    return 0


def _by_name(function: str):  # type: ignore[no-untyped-def]
    """The handler ``function`` of ``dpsynth.cli.workflow_targets``, imported by name when its command runs, as
    ``dpsynth.cli`` imports each command's module: this module is also the DVC ``settings`` stage's command, whose
    code dependencies are this module's imports -- the budget's (the trainers' constants, the W2 sweep's runs)
    would make every edit of them re-run that stage."""

    def run(args: argparse.Namespace) -> int:
        import importlib

        return getattr(importlib.import_module("dpsynth.cli.workflow_targets"), function)(args)

    return run


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("workflow", help="the pipeline's build targets and their GPU budget, DVC's declarations "
                       "(dvc.yaml, settings) and what `dvc repro` will run")
    ws = p.add_subparsers(dest="workflow_cmd", metavar="<dvc|settings|plan|targets|budget>")
    ws.required = True
    dvc = ws.add_parser("dvc", help="write dvc.yaml from params.yaml (after adding or removing an experiment "
                        "or sweep under `pipeline:`)")
    add_params_arg(dvc)
    dvc.add_argument("--output", default="dvc.yaml", help="where to write (default: dvc.yaml)")
    dvc.add_argument("--check", action="store_true", help="write nothing; fail when the file differs from what "
                     "params.yaml gives (CI and the tests run this)")
    dvc.set_defaults(func=_dvc)
    settings = ws.add_parser("settings", help="write what each job reads from params.yaml to results/settings/ "
                             "(DVC's stages depend on these files, so DVC re-runs what Snakemake re-runs)")
    add_params_arg(settings)
    settings.set_defaults(func=_settings)
    plan = ws.add_parser("plan", help="list the stages `dvc repro` will run and why, before running anything "
                         "(new sweep cells and a fresh clone included, where `dvc repro --dry` stops); brings the "
                         "settings files up to date first, as DVC's `settings` stage would")
    add_params_arg(plan)
    plan.add_argument("target", nargs="?", default=None, help="a build target (`dpsynth workflow targets`): the "
                      "stages `dvc repro` runs for it and the command that runs them (it needs pipeline.tables to "
                      "list the target, so that dvc.yaml has its stages)")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.set_defaults(func=_plan)
    targets = ws.add_parser("targets", help="the build targets, one per paper table: `snakemake <target>` runs "
                            "exactly its runs and renders it into results/targets/<target>/")
    add_params_arg(targets)
    targets.add_argument("target", nargs="?", default=None, help="one target: its runs, sweeps and real-data rows")
    targets.add_argument("--json", action="store_true", help="print as JSON")
    targets.set_defaults(func=_by_name("targets"))
    budget = ws.add_parser("budget", help="a build target's jobs, GPU- and CPU-hours and memory at a scale, from "
                           "the measured step costs (benchmarks/costs.yaml), each figure labelled measured, "
                           "extrapolated or no measurement")
    add_params_arg(budget)
    budget.add_argument("target", help="a build target (`dpsynth workflow targets`)")
    budget.add_argument("--costs", default="benchmarks/costs.yaml", metavar="FILE",
                        help="the cost book (default: benchmarks/costs.yaml)")
    budget.add_argument("--no-gpus", action="store_true", help="as `--config gpus=false`: no job on a GPU")
    budget.add_argument("--jobs", action="store_true", help="one line per job instead of per kind of job")
    budget.add_argument("--json", action="store_true", help="print as JSON (every job)")
    budget.set_defaults(func=_by_name("budget"))
