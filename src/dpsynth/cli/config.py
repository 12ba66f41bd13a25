"""`dpsynth config show|check`: the resolved configuration, and validation of a file."""

from __future__ import annotations

import argparse
import json

from dpsynth.cli.common import add_params_arg, params_from_args


def _show(args: argparse.Namespace) -> int:
    import yaml

    from dpsynth.config import resolve_run
    from dpsynth.errors import ConfigError

    params = params_from_args(args)
    assert params is not None

    def as_run(name: str) -> dict:
        try:
            run = resolve_run(params, name)
        except ConfigError as exc:  # a sweep outside pipeline.sweeps that this scale cannot honour
            return {"refused_at_this_scale": str(exc)}
        return {"lr": getattr(run.experiment.hparams, "lr", None), "privacy_plan": run.privacy.record()}

    resolved = params.model_dump(mode="json")
    resolved["resolved"] = {
        "scale": params.scale,
        "preset": params.preset.model_dump(mode="json"),
        "experiments": {name: {"method": e.method, "dataset": e.dataset, **as_run(name)}
                        for name, e in params.all_experiments().items()},
    }
    if args.format == "json":
        print(json.dumps(resolved, indent=2, sort_keys=True))
    else:
        print(yaml.safe_dump(resolved, sort_keys=False), end="")
    return 0


def _check(args: argparse.Namespace) -> int:
    from dpsynth.config import load_params

    params = load_params(args.file)
    n = len(params.all_experiments())
    print(f"{args.file}: OK (scale {params.scale}, {len(params.datasets)} datasets, {n} experiments "
          f"including sweep cells, {len(params.tables)} tables)")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("config", help="show or check the configuration")
    cs = p.add_subparsers(dest="config_cmd", metavar="<show|check>")
    cs.required = True
    show = cs.add_parser("show", help="print the resolved configuration")
    add_params_arg(show)
    show.add_argument("--format", choices=("yaml", "json"), default="yaml")
    show.set_defaults(func=_show)
    check = cs.add_parser("check", help="validate a parameters file")
    check.add_argument("file")
    check.set_defaults(func=_check)
