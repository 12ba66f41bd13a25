"""The release ledger: every release ever made from a dataset, kept under the private folder, append-only.

A re-run is a new release: a re-privatization draws fresh noise over every record, a retrained model
is a new noisy view of the data, and the earlier file lives on in the DVC cache and on any remote it
was pushed to. The report's privacy table composes the releases that exist now (``results/runs``);
this file remembers the ones that existed once. Each stage that releases appends one JSON line --
dataset, mechanism, (epsilon, delta), neighbouring relation, output path, content hash, time, the RDP
curve where the release is central DP -- to ``<private>/ledger/releases.jsonl``, which no stage
declares as an output, so neither runner deletes it before a re-run, and nothing rewrites it.

Appends hold an exclusive ``flock`` (two jobs releasing at once write whole lines, one after the other;
the kernel drops the lock of a killed writer) and are one ``write`` of one line on an ``O_APPEND``
descriptor, then ``fsync``. A line left torn by a crash (a full disk, a power cut) is ended before the
next entry is written, so one damaged line never swallows another; it is read back as a release of
unknown cost, which makes its dataset's composition infinite until someone repairs the line (the
reader names it): a release that cannot be counted is never counted as free.

Composition (``compose``): central DP entries add their RDP curves order by order (converted once, at
the smallest delta among them), local DP entries add epsilon and delta (basic composition), and an entry
with no guarantee (non-private, replayable noise, only approximately private, damaged) makes it infinite.
A per-dataset total budget (``total_budgets`` in params.yaml) is checked with :func:`check_budget` before a
stage draws any noise.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dpsynth.errors import PrivacyError

LEDGER_FILE = Path("ledger") / "releases.jsonl"


def ledger_path(private_root: str | Path) -> Path:
    """Where the release ledger of the private root ``private_root`` lives."""
    return Path(private_root) / LEDGER_FILE


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class Release:
    """One release as the ledger records it. ``epsilon`` is inf for a release without a guarantee;
    ``rdp`` the central release's RDP curve over ``accounting.CLASSIC_ORDERS`` (None: not central DP)."""

    dataset: str
    stage: str
    name: str
    mechanism: str
    epsilon: float
    delta: float
    neighbours: str
    output: str
    sha256: str
    time: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    rdp: list[float] | None = None
    note: str = ""
    line: int = 0  # where it was read from (1-based; not written)

    def to_json(self) -> str:
        d = asdict(self)
        d.pop("line")
        d["epsilon"] = "inf" if math.isinf(self.epsilon) else self.epsilon
        return json.dumps(d, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, line: int) -> Release:
        d = json.loads(text)
        if not isinstance(d, dict):
            raise ValueError("not an object")
        d["epsilon"] = float(d["epsilon"])
        d["delta"] = float(d["delta"])
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__ and k != "line"}, line=line)


def append(path: Path, release: Release) -> None:
    """Append ``release`` to the ledger at ``path`` (module docstring: locked, one write, fsynced)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (release.to_json() + "\n").encode()
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            os.write(fd, b"\n")  # a torn line of a crashed writer ends here; the new entry gets its own line
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)  # drops the lock


def read(path: Path) -> tuple[list[Release], list[int]]:
    """Every release the ledger at ``path`` records, in order, and the numbers of lines that are no entry
    (torn or edited). An absent ledger is empty."""
    try:
        text = path.read_bytes().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return [], []
    except IsADirectoryError:
        raise PrivacyError(f"{path}: is a directory, not the release ledger; remove it (it holds no releases)") \
            from None
    releases, damaged = [], []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            releases.append(Release.from_json(line, i))
        except (ValueError, TypeError, KeyError):
            damaged.append(i)
    return releases, damaged


@dataclass
class Composition:
    """What publishing every release of a dataset together guarantees (module docstring)."""

    epsilon: float
    delta: float
    count: int
    infinite: list[str]
    how: str


def compose(releases: list[Release], damaged: int = 0) -> Composition:
    """The releases composed: RDP for central ones, basic composition for local ones, inf for the rest."""
    import numpy as np

    from dpsynth.privacy import accounting as acc

    unique = list({(r.output, r.sha256, r.stage): r for r in releases}.values())  # one file released twice: once
    infinite = [f"{r.stage} {r.name}" for r in unique if math.isinf(r.epsilon)]
    infinite += [f"damaged ledger line(s) {damaged}"] if damaged else []
    if infinite:
        return Composition(math.inf, math.nan, len(unique), infinite, "not private: " + ", ".join(infinite))
    central = [r for r in unique if r.rdp is not None]
    local = [r for r in unique if r.rdp is None]
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
    return Composition(eps, delta, len(unique), [], " + ".join(parts) or "no release")


def check_budget(dataset: str, budget: Any, releases: list[Release], damaged: int, adds: tuple[float, float],
                 what: str) -> None:
    """Refuse (``PrivacyError``, one line) a release of ``dataset`` adding ``adds`` = (epsilon, delta) that
    would take every release ever made from it past ``budget`` (``epsilon``, ``delta`` or None). What was
    spent is composed as the report composes it; the new release is added by basic composition (before it
    runs only its target is known), an upper bound."""
    spent = compose([r for r in releases if r.dataset == dataset], damaged)
    eps, delta = spent.epsilon + adds[0], (0.0 if math.isnan(spent.delta) else spent.delta) + adds[1]
    over = eps > budget.epsilon or (budget.delta is not None and delta > budget.delta)
    if over:
        limit = f"ε {budget.epsilon:g}" + (f", δ {budget.delta:g}" if budget.delta is not None else "")
        raise PrivacyError(f"total_budgets.{dataset}: {what} refused before any noise is drawn: {spent.count} "
                           f"release(s) of {dataset} spent ε {spent.epsilon:.4g}"
                           + ("" if math.isnan(spent.delta) else f", δ {spent.delta:.3g}")
                           + f"; this release would add ε {adds[0]:.4g}, δ {adds[1]:.3g} -- past the total budget "
                           f"({limit})")
