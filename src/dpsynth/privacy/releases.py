"""The release ledger's entries: every release ever made from a dataset, what each one cost, and their
composition against a total budget. Where the ledger lives and how a release is reserved before its noise
is drawn: ``privacy.ledger_store``.

A re-run is a new release: a re-privatization draws fresh noise over every record, a retrained model
is a new noisy view of the data, and the earlier file lives on in the DVC cache and on any remote it
was pushed to. The report's privacy table composes the releases that exist now (``results/runs``);
the ledger remembers the ones that existed once. Each line is one JSON object -- dataset, stage, mechanism,
(epsilon, delta), neighbouring relation, output path, content hash, time, the RDP curve where the release
is central DP -- and a ``status``:

- ``pending``: reserved before any noise was drawn, at its target (or infinite) cost; counted as spent;
- ``confirmed``: released; its line carries the release's own cost and hash;
- ``failed``: the job ended without confirming after its noise may have been drawn; still counted;
- ``cancelled``: the job ended before drawing any noise; not counted.

A reservation and the lines that settle it share an ``id``; the last line of an id is its state. A line
written before reservations existed has no id and is a confirmed release of its own. Every line is
validated when read (:func:`parse`): a line that is no valid entry -- torn by a crash, or hand-edited to an
epsilon of -100 or NaN, an RDP curve that is a string, a dataset that is a list -- is reported with its
file, line number and reason (:class:`Damaged`) and counts as a release without a guarantee for every
dataset, since its dataset cannot be trusted either: a release that cannot be counted is never free.

Composition (:func:`compose`): confirmed central DP entries add their RDP curves order by order (converted
once, at the smallest delta among them), local DP entries and reservations not yet confirmed add epsilon
and delta (basic composition, an upper bound), and an entry with no guarantee (non-private, replayable
noise, only approximately private, damaged) makes it infinite. One file released twice (the same SHA-256)
counts once. A composition of releases stated for different neighbouring relations says so.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from dpsynth.errors import PrivacyError

#: The ledger's file name inside its folder (``ledger_store``).
LEDGER_FILE = "releases.jsonl"
PENDING, CONFIRMED, FAILED, CANCELLED = "pending", "confirmed", "failed", "cancelled"
STATUSES = (PENDING, CONFIRMED, FAILED, CANCELLED)
#: What a budget counts as spent: everything but a reservation cancelled before its noise.
COUNTED = (PENDING, CONFIRMED, FAILED)

_TEXT_FIELDS = ("dataset", "stage", "name", "mechanism", "neighbours", "output", "sha256", "time", "note", "id",
                "key", "host", "origin")
_REQUIRED = ("dataset", "stage", "name", "epsilon", "delta", "output", "sha256")


@dataclass
class Release:
    """One release (or reservation) as the ledger records it. ``epsilon`` is inf for a release without a
    guarantee; ``rdp`` the central release's RDP curve over ``accounting.CLASSIC_ORDERS`` (None: not central
    DP, or not yet known); ``id`` ties a reservation to the lines settling it; ``key`` names what a resumed
    job adopts (the private run folder of a training run, the output of a privatization)."""

    dataset: str
    stage: str
    name: str
    mechanism: str
    epsilon: float
    delta: float
    neighbours: str
    output: str
    sha256: str
    time: str = field(default_factory=lambda: now())
    rdp: list[float] | None = None
    note: str = ""
    status: str = CONFIRMED
    id: str = ""
    key: str = ""
    pid: int = 0  # the job that wrote a reservation, and its machine: who holds a pending entry (0, "": unknown)
    host: str = ""
    origin: str = ""  # an entry imported from an older ledger: that file and line (``ledger_place``)
    line: int = 0  # where it was read from (1-based; not written)

    @property
    def counted(self) -> bool:
        return self.status in COUNTED

    def to_json(self) -> str:
        d = asdict(self)
        d.pop("line")
        d["epsilon"] = "inf" if math.isinf(self.epsilon) else self.epsilon
        return json.dumps(d, sort_keys=True, allow_nan=False)

    @classmethod
    def from_json(cls, text: str, line: int) -> Release:
        """The entry on one line; ``ValueError`` saying what is wrong with it (the reader reports it)."""
        try:
            d = json.loads(text)
        except ValueError:
            raise ValueError("not a JSON object (torn by a crash, or edited)") from None
        if not isinstance(d, dict):
            raise ValueError(f"a JSON {type(d).__name__}, not an object")
        missing = [k for k in _REQUIRED if k not in d]
        if missing:
            raise ValueError(f"lacks {', '.join(missing)}")
        for k in _TEXT_FIELDS:
            if k in d and not isinstance(d[k], str):
                raise ValueError(f"{k} is {type(d[k]).__name__} {d[k]!r}, not a string")
        if not d["dataset"].strip():
            raise ValueError("dataset is empty")
        d["epsilon"] = _number(d["epsilon"], "epsilon", upper=math.inf)
        d["delta"] = _number(d["delta"], "delta", upper=1.0)
        d["rdp"] = _rdp(d.get("rdp"))
        pid = d.get("pid", 0)
        if isinstance(pid, bool) or not isinstance(pid, int) or pid < 0:
            raise ValueError(f"pid is {type(pid).__name__} {pid!r}, not a process id")
        status = d.setdefault("status", CONFIRMED)
        if status not in STATUSES:
            raise ValueError(f"status {status!r} is not one of {', '.join(STATUSES)}")
        if status == CONFIRMED and not _is_sha256(d["sha256"]):
            raise ValueError(f"sha256 {d['sha256']!r} is not a SHA-256 (64 hex digits)")
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__ and k != "line"}, line=line)


def now() -> str:
    """The time a ledger line is written (local time with its offset)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def _number(v: Any, key: str, upper: float) -> float:
    """A non-negative number (``"inf"`` for infinity) no larger than ``upper``; ValueError otherwise."""
    if isinstance(v, str) and v == "inf":
        return math.inf
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{key} is {type(v).__name__} {v!r}, not a number")
    x = float(v)
    if math.isnan(x):
        raise ValueError(f"{key} is NaN, not a number")
    if x < 0 or x > upper:
        raise ValueError(f"{key} {v!r} is outside [0, {upper:g}]")
    return x


def _rdp(v: Any) -> list[float] | None:
    """None, or an RDP curve over ``accounting.CLASSIC_ORDERS``: that many non-negative numbers."""
    if v is None:
        return None
    from dpsynth.privacy.accounting import CLASSIC_ORDERS

    if not isinstance(v, list) or len(v) != len(CLASSIC_ORDERS):
        what = f"a list of {len(v)}" if isinstance(v, list) else f"{type(v).__name__} {str(v)[:20]!r}"
        raise ValueError(f"rdp is {what}, not the {len(CLASSIC_ORDERS)} values of an RDP curve")
    return [_number(x, "an rdp value", upper=math.inf) for x in v]


def _is_sha256(s: str) -> bool:
    return len(s) == 64 and all(c in "0123456789abcdef" for c in s)


@dataclass(frozen=True)
class Damaged:
    """A ledger line that is no valid entry: counted as a release without a guarantee."""

    path: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path} line {self.line} ({self.reason})"


def describe_damaged(damaged: Sequence[Damaged]) -> str:
    """``damaged ledger line(s) <file> line 3 (why), ...`` -- what a composition and a refusal say."""
    return "damaged ledger line(s) " + "; ".join(str(d) for d in damaged)


def describe_unsettled(unsettled: Sequence[Release]) -> str:
    """The reservations no job confirmed, each with the job that made it (stage, name), when, its process and
    machine and its id -- what a refusal says apart from the confirmed releases, so a person can tell a running
    job from a killed one and settle it (``dpsynth privacy ledger``)."""
    each = "; ".join(f"{r.status} {r.stage} {r.name} reserved {r.time} by pid {r.pid or '?'} on "
                     f"{r.host or 'an unknown host'}, id {r.id[:8] or f'line {r.line}'}" for r in unsettled)
    return (f"{len(unsettled)} reservation(s) never confirmed, counted as spent because their noise may have been "
            f"drawn: {each}; a job that is no longer running can be settled with `dpsynth privacy ledger`")


def parse(text: str, path: str) -> tuple[list[Release], list[Damaged]]:
    """The ledger at ``path`` (its text): every release and reservation in its latest state, in order of their
    first line, cancelled ones left out; and every line that is no valid entry (:class:`Damaged`)."""
    latest: dict[str, Release] = {}
    damaged = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = Release.from_json(line, i)
        except ValueError as exc:
            damaged.append(Damaged(path, i, str(exc)))
            continue
        latest[entry.id or f"line {i}"] = entry  # dicts keep the first insertion's order
    return [r for r in latest.values() if r.counted], damaged


@dataclass
class Composition:
    """What publishing every release of a dataset together guarantees (module docstring)."""

    epsilon: float
    delta: float
    count: int
    infinite: list[str]
    how: str


def compose(releases: list[Release], damaged: Sequence[Damaged] = ()) -> Composition:
    """The releases composed: RDP for confirmed central ones, basic composition for local ones and for
    reservations not yet confirmed (at their target), inf for the rest and for any damaged line."""
    import numpy as np

    from dpsynth.privacy import accounting as acc

    # one file released twice (its hash recorded twice): once; a reservation by its id
    unique = list({(("sha", r.sha256) if r.status == CONFIRMED else ("id", r.id or r.line)): r
                   for r in releases if r.counted}.values())
    infinite = [f"{r.stage} {r.name}" + ("" if r.status == CONFIRMED else f" ({r.status})")
                for r in unique if math.isinf(r.epsilon)]
    infinite += [describe_damaged(damaged)] if damaged else []
    if infinite:
        return Composition(math.inf, math.nan, len(unique), infinite, "not private: " + ", ".join(infinite))
    central = [r for r in unique if r.rdp is not None and r.status == CONFIRMED]
    local = [r for r in unique if r.rdp is None and r.status == CONFIRMED]
    reserved = [r for r in unique if r.status != CONFIRMED]
    eps = delta = 0.0
    parts = []
    if central:
        delta = min(r.delta for r in central)
        total = np.sum([np.asarray(r.rdp, dtype=float) for r in central], axis=0)
        eps = float(acc.classic_epsilon(acc.CLASSIC_ORDERS, total, delta)[0])
        parts.append(f"RDP composition of {len(central)} central release(s) at δ={delta:g}")
    if local:
        eps += sum(r.epsilon for r in local)
        delta += sum(r.delta for r in local)
        parts.append(f"{len(local)} local release(s), basic composition")
    if reserved:
        eps += sum(r.epsilon for r in reserved)
        delta += sum(r.delta for r in reserved)
        parts.append(f"{len(reserved)} reservation(s) not confirmed (pending or failed: their noise may have been "
                     "drawn), at their target, basic composition")
    how = " + ".join(parts) or "no release"
    relations = sorted({r.neighbours for r in unique if r.neighbours and r.status == CONFIRMED})
    if len(relations) > 1:
        how += (f"; mixes neighbouring relations ({'; '.join(relations)}): each release's ε is stated for its own "
                "relation (under replace-one an add/remove-one ε counts twice), so this total is exact for none")
    return Composition(eps, delta, len(unique), [], how)


def check_budget(dataset: str, budget: Any, releases: list[Release], damaged: Sequence[Damaged],
                 adds: tuple[float, float], what: str, ledger: str = "") -> None:
    """Refuse (``PrivacyError``, one line) a release of ``dataset`` adding ``adds`` = (epsilon, delta) that
    would take every release ever made from it past ``budget`` (``epsilon``, ``delta`` or None). What was
    spent -- reservations included -- is composed as the report composes it; the new release is added by basic
    composition (before it runs only its target is known), an upper bound. A damaged line is named with its
    file and line number: it is what makes the spent epsilon infinite. ``ledger``: the ledger's file, named at
    the end (the wrong ledger is a reason for a refusal, or for a budget that passes)."""
    spent = compose([r for r in releases if r.dataset == dataset], damaged)
    eps, delta = spent.epsilon + adds[0], (0.0 if math.isnan(spent.delta) else spent.delta) + adds[1]
    over = eps > budget.epsilon or (budget.delta is not None and delta > budget.delta)
    if over:
        limit = f"ε {budget.epsilon:g}" + (f", δ {budget.delta:g}" if budget.delta is not None else "")
        why = f" ({describe_damaged(damaged)}: a line that is no entry counts as a release without a guarantee; " \
              "repair it)" if damaged else ""
        unsettled = [r for r in releases if r.dataset == dataset and r.status in (PENDING, FAILED)]
        held = f" ({spent.count - len(unsettled)} confirmed; {describe_unsettled(unsettled)})" if unsettled else ""
        raise PrivacyError(f"total_budgets.{dataset}: {what} refused before any noise is drawn: {spent.count} "
                           f"release(s) of {dataset} spent ε {spent.epsilon:.4g}"
                           + ("" if math.isnan(spent.delta) else f", δ {spent.delta:.3g}") + held + why
                           + f"; this release would add ε {adds[0]:.4g}, δ {adds[1]:.3g} -- past the total budget "
                           f"({limit})" + (f"; counted in the release ledger {ledger}" if ledger else ""))
