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

#: ``dpsynth.privacy.accounting.SAMPLINGS``, spelt out so that building the parser does not import
#: dp_accounting (a second or more); tests/test_cli_startup.py checks that they agree.
SAMPLINGS: tuple[str, ...] = ("poisson", "without_replacement")


class _Calculators:
    """``--method``'s choices: the registry's calculators (``dpsynth.privacy.mechanisms.calculators()``), read
    when argparse first asks -- a ``--method`` value to check, the help's list -- not when the parser is built
    (the privacy package stays unimported for every other command). A mechanism registered with a calculator
    is a choice here with no edit; an unknown name is argparse's one line naming ``--method``."""

    def _names(self) -> tuple[str, ...]:
        from dpsynth.privacy.mechanisms import calculators

        return tuple(calculators())

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._names())

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __len__(self) -> int:
        return len(self._names())


METHODS = _Calculators()


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
        sp.add_argument("--method", choices=METHODS, default="dp_sgd", metavar="METHOD",
                        help="a mechanism of the registry (%(choices)s; default %(default)s): dp_sgd, one subsampled "
                             "Gaussian per step (DP-Sinkhorn); gs_wgan, see docs/deviations.md row 8")
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


def _answer(args: argparse.Namespace) -> dict[str, Any]:
    """The mechanism behind ``--method`` answers (``privacy.mechanisms.calculators``): one path per
    mechanism for every question, the same accounting calls its runs plan with."""
    from dpsynth.privacy.mechanisms import TradeOffQuery, calculators

    mech = calculators()[args.method]
    for need in mech.calculator_needs:
        if getattr(args, need) is None:
            raise PrivacyError(f"--{need.replace('_', '-')} is required for --method {args.method}")
    ask = TradeOffQuery(query=args.privacy_command, delta=args.delta, batch_size=args.batch_size,
                        sigma=getattr(args, "sigma", None), epsilon=getattr(args, "epsilon", None),
                        steps=getattr(args, "steps", None), dataset_size=args.dataset_size, shards=args.shards,
                        sampling=args.sampling, pld=args.pld)
    return {"method": args.method, **mech.trade_off(ask), "note": mech.calculator_note}


def handle(args: argparse.Namespace) -> int:
    out = _answer(args)
    note = out.pop("note")
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
    if note:
        print(note)
    return 0
