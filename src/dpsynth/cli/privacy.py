"""`dpsynth privacy steps|epsilon|sigma`: every accountant and convention side by side.

Users plan runs with this (how many steps fit in epsilon 10? what sigma do I need?),
and a table that shows the papers' classic number next to the tighter modern one (and,
for GS-WGAN, the as-published next to the sound one) keeps anyone from mixing them up.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from dpsynth.errors import PrivacyError

#: ``dpsynth.privacy.accounting.SAMPLINGS``, spelt out so that building the parser does not
#: import dp_accounting (a second or more); tests/test_cli_startup.py checks that the two agree.
SAMPLINGS: tuple[str, ...] = ("poisson", "without_replacement")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("privacy", help="privacy accounting: steps, epsilon or sigma under every convention")
    sub = p.add_subparsers(dest="privacy_command", metavar="{steps,epsilon,sigma}")
    sub.required = True
    specs = {
        "steps": ("largest number of steps within a target (epsilon, delta)", ("sigma", "epsilon")),
        "epsilon": ("epsilon after a number of steps", ("sigma", "steps")),
        "sigma": ("noise multiplier that reaches a target epsilon within a step budget", ("steps", "epsilon")),
    }
    for name, (help_, needs) in specs.items():
        sp = sub.add_parser(name, help=help_)
        sp.add_argument("--method", choices=("dp_sgd", "gs_wgan"), default="dp_sgd",
                        help="dp_sgd: one subsampled Gaussian per step (DP-Sinkhorn); gs_wgan: see docs/deviations.md row 8")
        if "sigma" in needs:
            sp.add_argument("--sigma", type=float, required=True, help="noise multiplier")
        if "epsilon" in needs:
            sp.add_argument("--epsilon", type=float, required=True, help="target epsilon")
        if "steps" in needs:
            sp.add_argument("--steps", type=int, required=True, help="number of (generator) steps")
        sp.add_argument("--delta", type=float, required=True)
        sp.add_argument("--batch-size", type=int, required=True, help="expected batch size B")
        sp.add_argument("--dataset-size", type=int, help="private training set size N (dp_sgd)")
        sp.add_argument("--shards", type=int, help="number of discriminator shards N_d (gs_wgan)")
        sp.add_argument("--sampling", choices=SAMPLINGS, default="poisson",
                        help="dp_sgd only: poisson (add/remove) or without_replacement (fixed size, replace-one)")
        sp.add_argument("--pld", action="store_true", help="also run the PLD accountant (slower)")
        sp.add_argument("--json", action="store_true", help="machine-readable output")
        sp.set_defaults(func=handle)


def _conversions(pld: bool) -> tuple[str, ...]:
    return ("classic", "modern", "pld") if pld else ("classic", "modern")


def _dp_sgd(args: argparse.Namespace) -> dict[str, Any]:
    from dpsynth.privacy import accounting as acc

    if args.dataset_size is None:
        raise PrivacyError("--dataset-size is required for --method dp_sgd")
    if args.dataset_size < 1 or not 1 <= args.batch_size <= args.dataset_size:
        raise PrivacyError(f"need 1 <= --batch-size ({args.batch_size}) <= --dataset-size ({args.dataset_size})")
    q = args.batch_size / args.dataset_size
    rows: dict[str, Any] = {}
    cmd = args.privacy_command
    for conv in _conversions(args.pld):
        key = "pld" if conv == "pld" else f"rdp_{conv}"
        if cmd == "steps":
            rows[key] = acc.max_steps(args.sigma, q, args.delta, args.epsilon, conversion=conv, sampling=args.sampling)
        elif cmd == "sigma":
            rows[key] = acc.calibrate_sigma(q, args.steps, args.delta, args.epsilon, conversion=conv, sampling=args.sampling)
    if cmd == "epsilon":
        eps = acc.epsilon(args.sigma, q, args.steps, args.delta, sampling=args.sampling, pld=args.pld)
        rows = {k: v for k, v in eps.items() if not k.endswith("_order")}
    return {"method": "dp_sgd", "sampling": args.sampling, "q": q, "results": rows}


def _gs_wgan(args: argparse.Namespace) -> dict[str, Any]:
    from dpsynth.privacy import accounting as acc
    from dpsynth.privacy import gswgan_accounting as gs

    if args.shards is None:
        raise PrivacyError("--shards is required for --method gs_wgan")
    if args.shards < 1 or args.batch_size < 1:
        raise PrivacyError(f"--shards and --batch-size must be >= 1, got {args.shards}, {args.batch_size}")
    b, q, cmd = args.batch_size, 1.0 / args.shards, args.privacy_command
    rows: dict[str, Any] = {}
    if cmd == "epsilon":
        eps = gs.gswgan_epsilon(args.sigma, args.shards, b, args.steps, args.delta, pld=args.pld)
        for way, d in eps.items():
            for k, v in d.items():
                if not k.endswith("_order"):
                    rows[f"{way}.{k}"] = v
    for conv in _conversions(args.pld) if cmd != "epsilon" else ():
        key = "pld" if conv == "pld" else f"rdp_{conv}"
        if cmd == "steps":
            rows[f"as_published.{key}"] = acc.max_steps(
                args.sigma, q, args.delta, args.epsilon, conversion=conv, sampling="without_replacement") // b
            rows[f"sound.{key}"] = gs.gswgan_sound_max_steps(args.sigma, args.shards, b, args.delta, args.epsilon,
                                                              conversion=conv)
        else:
            rows[f"as_published.{key}"] = acc.calibrate_sigma(
                q, args.steps * b, args.delta, args.epsilon, conversion=conv, sampling="without_replacement")
            rows[f"sound.{key}"] = gs.gswgan_sound_sigma(args.shards, b, args.steps, args.delta, args.epsilon,
                                                          conversion=conv)
    return {"method": "gs_wgan", "shards": args.shards, "q": q, "results": rows}


def handle(args: argparse.Namespace) -> int:
    out = _gs_wgan(args) if args.method == "gs_wgan" else _dp_sgd(args)
    inputs = {k: getattr(args, k, None) for k in ("sigma", "epsilon", "steps", "delta", "batch_size", "dataset_size")}
    out = {"query": args.privacy_command, **out, "inputs": {k: v for k, v in inputs.items() if v is not None}}
    if args.json:
        print(json.dumps(out, indent=2, sort_keys=True))
        return 0
    what = {"steps": "max steps", "epsilon": "epsilon", "sigma": "sigma"}[args.privacy_command]
    given = ", ".join(f"{k}={v}" for k, v in out["inputs"].items())
    print(f"{out['method']} ({given}, q={out['q']:.6g})")
    width = max(len(k) for k in out["results"]) + 2
    print(f"{'accountant / convention':<{max(width, 25)}}{what}")
    for k, v in out["results"].items():
        val = f"{v:,}" if isinstance(v, int) else f"{v:.4f}"
        print(f"{k:<{max(width, 25)}}{val}")
    if args.method == "gs_wgan":
        print("as_published: steps*B per-sample releases, sampled w/o replacement (the paper's code); "
              "sound: one release of multiplier sigma/sqrt(B) per step (docs/deviations.md row 8) - the real guarantee")
    return 0
