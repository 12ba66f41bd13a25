"""Where a release ledger may not lie, the older layout it replaces, and which ledger a workspace last used.

``privacy.ledger_store`` holds the ledger itself; this module holds what ``ReleaseLedger.check`` and
``ReleaseLedger.reserve`` need to know about the workspace around a job (issue 71):

- **Never inside a workspace.** A ledger inside a workspace folder -- its root included -- is one workspace's:
  a second clone, a temporary DVC experiment (a copy of the workspace) or ``make clean-results`` would not see
  it, and ``releases.jsonl`` would sit untracked in the project. Each folder is resolved absolutely (against
  the folder of params.yaml and against the current folder, wherever the command runs from), and any folder
  above the ledger that holds a workspace's files (params.yaml, dvc.yaml, a Snakefile) is a workspace too.
- **The older layout is imported, never forgotten.** Before the ledger moved out of the workspace it lived in
  ``<private root>/ledger/releases.jsonl``. A releasing job that finds such a file appends each of its lines
  to the current ledger, once, each kept with its origin (``Release.origin``: that file and line), before it
  checks any budget; a damaged line there is refused in one line until repaired (nothing is imported).
- **A switch is never silent.** Each reservation says in one line which ledger it went to; the workspace
  remembers it (``LAST_USED`` in its private root: a test pointing only ``--private-out`` at a temporary folder
  leaves the project's record alone) and the next job that uses another ledger says so.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from dpsynth.errors import PrivacyError
from dpsynth.privacy.releases import LEDGER_FILE, Release


class ReleaseLedger(Protocol):
    """What this module uses of ``ledger_store.ReleaseLedger`` (structurally: the store imports this module,
    so this one names no class of the store's and the two stay one-way)."""

    path: Path
    source: str

    def _locked(self) -> AbstractContextManager[int]: ...

    def _write(self, fd: int, entries: Sequence[Release]) -> None: ...


#: A folder holding one of these is a workspace (a clone of the project, or a copy DVC made of one).
WORKSPACE_MARKERS = ("params.yaml", "dvc.yaml", "Snakefile")
#: The file in a workspace's private root naming the ledger its last reservation went to.
LAST_USED = "ledger-used.txt"
#: Where the older layout kept its ledger, under a private root.
OLD_LAYOUT = Path("ledger") / LEDGER_FILE


def inside_workspace(folder: Path, apart: Sequence[tuple[str, str | Path]], workspace: str | Path | None) -> str:
    """Why the ledger folder ``folder`` lies inside a workspace ('' when it does not): inside one of ``apart``
    (``(option, folder)``; a relative folder resolved against ``workspace`` and against the current folder),
    inside ``workspace`` itself, or below any folder holding a workspace's files (``WORKSPACE_MARKERS``)."""
    real = Path(os.path.realpath(folder))
    bases = [Path.cwd()] + ([Path(workspace)] if workspace is not None else [])
    for opt, f in apart:
        for base in bases:
            where = Path(os.path.realpath(base / f))  # an absolute f stays itself
            if real == where or real.is_relative_to(where):
                shown = (f"{f}/" if opt == str(f) else f"{opt} {f}") + ("" if str(f) == str(where) else f" ({where})")
                return f"lies inside {shown}, which a re-run or `make clean-results` empties"
    for above in (real, *real.parents):
        held = [m for m in WORKSPACE_MARKERS if (above / m).is_file()]
        if held or (workspace is not None and above == Path(os.path.realpath(workspace))):
            what = f"it holds {held[0]}" if held else "the folder of its parameters file"
            return (f"lies inside the workspace {above} ({what}): a second clone, a temporary DVC experiment or a "
                    "clean-up would not see it, and releases.jsonl would sit untracked in the project")
    return ""


def old_ledgers(workspace: str | Path | None, private_roots: Sequence[str | Path]) -> list[Path]:
    """The older layout's ledgers (``<private root>/ledger/releases.jsonl``) a job can find: under each of
    ``private_roots`` and the workspace's ``private/``, each once."""
    roots = [*private_roots, "private", *([Path(workspace) / "private"] if workspace is not None else [])]
    found: dict[str, Path] = {}
    for root in roots:
        f = Path(root) / OLD_LAYOUT
        if f.is_file():
            found.setdefault(os.path.realpath(f), Path(os.path.realpath(f)))
    return list(found.values())


def _origins(text: str) -> set[str]:
    """The origins of every line of the ledger's text already imported (read loosely: any line naming one)."""
    out = set()
    for line in text.splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict) and isinstance(d.get("origin"), str) and d["origin"]:
            out.add(d["origin"])
    return out


def import_old(ledger: ReleaseLedger, olds: Sequence[Path]) -> int:
    """Append every line of each older-layout ledger of ``olds`` that the ledger does not hold yet to it, each
    with its origin (module docstring); how many were imported. A damaged line there: ``PrivacyError`` naming
    the file and line, nothing imported (it would count as a release without a guarantee: repair it first)."""
    imported = 0
    for old in olds:
        if os.path.realpath(old) == os.path.realpath(ledger.path):
            continue
        try:
            text = old.read_bytes().decode("utf-8", errors="replace")
        except OSError as exc:
            raise PrivacyError(f"older release ledger {old}: cannot be read ({exc.strerror}); its releases must be "
                               "imported into the release ledger before anything is released") from None
        entries = []
        for i, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                entries.append(replace(Release.from_json(line, i), origin=f"{old}:{i}", line=0))
            except ValueError as exc:
                raise PrivacyError(f"older release ledger {old} line {i} ({exc}): repair or remove that line, then "
                                   f"re-run; nothing was imported into {ledger.path} and nothing released") from None
        with ledger._locked() as fd:
            have = _origins(os.pread(fd, os.fstat(fd).st_size, 0).decode("utf-8", errors="replace"))
            new = [e for e in entries if e.origin not in have]
            if new:
                ledger._write(fd, new)
        if new:
            imported += len(new)
            print(f"dpsynth: imported {len(new)} entr{'y' if len(new) == 1 else 'ies'} of the older workspace ledger "
                  f"{old} into the release ledger {ledger.path}, each with its origin; {old} is kept as it is and "
                  "is never imported twice", file=sys.stderr)
    return imported


def memo_file(workspace: str | Path | None, private_roots: Sequence[str | Path]) -> Path | None:
    """Where a workspace remembers its ledger: in the job's private root, else the workspace's ``private/`` when
    there is one (a job that makes no private folder does not make one for this)."""
    if private_roots:
        return Path(private_roots[0]) / LAST_USED
    return None if workspace is None or not (Path(workspace) / "private").is_dir() else \
        Path(workspace) / "private" / LAST_USED


def announce(ledger: ReleaseLedger, memo: Path | None) -> None:
    """Say in one line which ledger this job's release went to, and -- when the workspace last used another --
    that it changed; then remember this one (``memo``: ``memo_file``; one that cannot be written is not an
    error here: the release is in the ledger already)."""
    line = f"dpsynth: release ledger {ledger.path} ({ledger.source.split(';')[0]})"
    if memo is not None:
        try:
            before = memo.read_text(encoding="utf-8").strip() if memo.is_file() else ""
        except (OSError, UnicodeDecodeError):
            before = ""
        if before and before != str(ledger.path):
            line += (f"; this workspace's earlier releases went to {before}, which this ledger does not count: if "
                     "the ledger moved, point ledger_dir or $DPSYNTH_LEDGER at its one place (docs/privacy.md)")
        try:
            memo.write_text(f"{ledger.path}\n", encoding="utf-8")
        except OSError:
            pass
    print(line, file=sys.stderr, flush=True)
