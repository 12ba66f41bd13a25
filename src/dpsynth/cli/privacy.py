"""`dpsynth privacy steps|epsilon|sigma`: every accountant and convention side by side; `dpsynth privacy ledger`:
the release ledger's reservations no job confirmed, and settling one by hand.

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
    p = subparsers.add_parser("privacy", help="privacy accounting: steps, epsilon or sigma under every convention; "
                                              "the release ledger's unsettled reservations")
    sub = p.add_subparsers(dest="privacy_command", metavar="{steps,epsilon,sigma,ledger}")
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
    lp = sub.add_parser("ledger", help="the release ledger: what each dataset spent, and every reservation no job "
                                       "confirmed (a running or killed job); --settle one whose job is gone")
    lp.add_argument("--params", default="params.yaml", metavar="FILE",
                    help="parameters file naming ledger_dir (default: ./params.yaml when present)")
    lp.add_argument("--settle", metavar="ID", help="settle this reservation (its id, or a unique prefix of it) by an "
                    "appended line naming you and --why: it then counts as failed (its noise may have been drawn)")
    lp.add_argument("--why", default="", help="why it is settled (required with --settle; kept in the ledger)")
    lp.add_argument("--no-noise-drawn", action="store_true",
                    help="with --settle: you know its job drew no noise, so it stops counting (cancelled)")
    lp.set_defaults(func=handle_ledger)


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


def handle_ledger(args: argparse.Namespace) -> int:
    """List the ledger's datasets and unsettled reservations, or settle one (``ReleaseLedger.settle_by_hand``)."""
    from pathlib import Path

    from dpsynth.errors import ConfigError
    from dpsynth.privacy.ledger_store import ReleaseLedger
    from dpsynth.privacy.releases import CONFIRMED, compose

    if args.settle is None and (args.why or args.no_noise_drawn):
        raise ConfigError("--why and --no-noise-drawn go with --settle ID")
    configured = None
    if Path(args.params).is_file():
        from dpsynth.config import load_params

        configured = load_params(args.params).ledger_dir
    elif args.params != "params.yaml":
        raise ConfigError(f"--params {args.params}: no such parameters file")
    ledger = ReleaseLedger.configured(configured)
    if args.settle is not None:
        entry = ledger.settle_by_hand(args.settle, args.why, args.no_noise_drawn)
        print(f"release ledger {ledger.path}: {entry.stage} {entry.name} (id {entry.id[:8]}) settled as "
              f"{entry.status} -- {entry.note}")
        return 0
    known, damaged = ledger.read()
    print(f"release ledger {ledger.path} ({ledger.source.split(';')[0]})")
    for d in damaged:
        print(f"  damaged: {d} -- counts as a release without a guarantee for every dataset until repaired")
    for dataset in sorted({r.dataset for r in known}):
        mine = [r for r in known if r.dataset == dataset]
        total = compose(mine, damaged)
        counts = ", ".join(f"{sum(r.status == s for r in mine)} {s}" for s in (CONFIRMED, "pending", "failed"))
        eps = "∞" if total.epsilon == float("inf") else f"{total.epsilon:.4g}"
        print(f"{dataset}: {counts}; every release composed: ε {eps} ({total.how})")
    unsettled = ledger.unsettled()
    if not unsettled:
        print("no reservation is waiting to be settled")
        return 0
    print("not confirmed, counted as spent until settled (their noise may have been drawn):")
    for r in unsettled:
        print(f"  id {r.id[:8] or '(none)'}  {r.status:<7}  {r.stage} {r.name} ({r.dataset}, ε {r.epsilon:g})  "
              f"reserved {r.time} by pid {r.pid or '?'} on {r.host or 'an unknown host'}")
    print("a reservation whose job is gone: dpsynth privacy ledger --settle ID --why '...' (it then counts as failed); "
          "add --no-noise-drawn only if you know that job drew no noise (it then stops counting)")
    return 0
