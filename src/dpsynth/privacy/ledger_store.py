"""Where the release ledger lives, and how a release is reserved in it before any noise is drawn.

The ledger belongs to whoever holds the data, not to one workspace: every clone of the project, every
temporary DVC experiment (``dvc exp run --temp`` runs in a copy of the workspace) and every clean-up
(``make clean-results`` deletes ``private/``) must see the same one, or a budget could be spent again from a
fresh folder. So it lives in one folder per user, outside every workspace, shared by all of them:

1. ``$DPSYNTH_LEDGER`` if set (the tests point it at a temporary folder);
2. else ``ledger_dir`` in params.yaml (absolute, ``~`` allowed: a folder shared by a group, say);
3. else ``$XDG_DATA_HOME/dpsynth/ledger`` (by default ``~/.local/share/dpsynth/ledger``).

It holds one file, ``releases.jsonl`` (``privacy.releases``); releases are keyed by dataset name, so every
workspace working on the same data counts against the same budget. Moving it is moving the folder (and
pointing one of the above at it).

The protocol (issue 63): a release is first *reserved* -- under the ledger's exclusive ``flock``, the budget
is checked against every counted entry (reservations of jobs still running included) and a ``pending`` line is
appended, all while holding the lock, so two jobs started together under a budget that fits one cannot both
pass. Only then is any noise drawn. The job then *settles* it: ``confirmed`` with the release's own cost and
hash, or ``failed`` (its noise may have been drawn: still counted), or ``cancelled`` (it stopped before any
noise: not counted). A job killed before settling leaves its reservation pending, counted. A resumed training
run adopts its own earlier reservation (same private run folder) instead of paying twice, and a job that finds
its output on disk without a confirmed entry records it (:meth:`ReleaseLedger.record_found`).

A reservation carries its job's pid and host, so a refusal can say whose it is; one whose job is gone (killed) is
settled by a person, never by the code on a guess (:meth:`ReleaseLedger.settle_by_hand`, ``dpsynth privacy
ledger``): an appended line naming who and why, still counted unless they state that no noise was drawn. A job
waiting for the lock says so after ``LOCK_NOTICE_S``; the file's mode follows the umask, so a folder a group
shares works. Where the ledger may not lie, the older layout it imports and the line naming it:
``privacy.ledger_place``.

Appends are whole lines, one ``write`` loop on an ``O_APPEND`` descriptor under the lock, then ``fsync``. A
write that stops short (a full disk) is an error, never a silent success: the torn line reads back as a
damaged line, counted as a release without a guarantee, and the job fails.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import getpass
import os
import socket
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dpsynth.errors import PrivacyError
from dpsynth.privacy.releases import (
    CANCELLED,
    CONFIRMED,
    FAILED,
    LEDGER_FILE,
    PENDING,
    Damaged,
    Release,
    check_budget,
    now,
    parse,
)

#: The environment variable naming the ledger's folder (first of the three places: module docstring).
LEDGER_ENV = "DPSYNTH_LEDGER"
#: The params.yaml key naming it (second).
LEDGER_KEY = "ledger_dir"
#: After this many seconds waiting for the ledger's lock a job says so (another job is reserving or recording).
LOCK_NOTICE_S = 3.0


def default_dir() -> Path:
    """The per-user default: ``$XDG_DATA_HOME/dpsynth/ledger``, ``~/.local/share/dpsynth/ledger`` without it."""
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path("~/.local/share").expanduser()
    return base / "dpsynth" / "ledger"


def locate(configured: str | None) -> tuple[Path, str]:
    """The ledger's folder and what chose it (for messages): ``$DPSYNTH_LEDGER``, params.yaml's ``ledger_dir``
    (``configured``), or the per-user default. A relative folder is refused: it would be one workspace's."""
    env = os.environ.get(LEDGER_ENV)
    where, source = (env, f"${LEDGER_ENV}") if env is not None else \
        (configured, f"params.yaml {LEDGER_KEY}") if configured is not None else (None, "the per-user default")
    if where is None:
        return default_dir(), f"{source}; set {LEDGER_KEY} in params.yaml or ${LEDGER_ENV} to move it"
    path = Path(where).expanduser()
    if not where.strip() or not path.is_absolute():
        raise PrivacyError(f"{source} {where!r}: the release ledger's folder must be an absolute path (one folder "
                           "shared by every workspace and clean-up of the data), not relative to a workspace")
    return path, source


@dataclass(frozen=True)
class Held:
    """A reservation a job holds: the ledger's entry, and whether it was an earlier job's (``adopted``)."""

    release: Release
    adopted: bool


@dataclass(frozen=True)
class Reservation:
    """One release a job is about to make: the pending entry it reserves (``entry``: its dataset, stage, name,
    target cost, ``key``), and whether it resumes an earlier job's noise (``adopt``: take over that job's counted
    reservation instead of reserving again -- one of the same stage and key, pending or failed at no less than
    this cost, or the confirmed release of the file whose hash is ``released``, the model a finished checkpoint
    released)."""

    entry: Release
    adopt: bool = False
    released: str | None = None

    def adopts(self, r: Release) -> bool:
        """Whether this reservation may take over ``r`` (a counted entry) instead of reserving again."""
        if not self.adopt or r.stage != self.entry.stage or r.key != self.entry.key:
            return False
        if r.status == CONFIRMED:
            return bool(self.released) and r.sha256 == self.released
        return r.epsilon >= self.entry.epsilon and r.delta >= self.entry.delta


class ReleaseLedger:
    """The release ledger file in its folder (module docstring)."""

    def __init__(self, folder: Path, source: str = "") -> None:
        self.folder, self.source = Path(folder), source
        self.path = self.folder / LEDGER_FILE
        self.memo: Path | None = None  # where the job's workspace remembers its ledger (``check``)

    @classmethod
    def configured(cls, configured: str | None) -> ReleaseLedger:
        """The ledger :func:`locate` finds (``configured``: params.yaml's ``ledger_dir``)."""
        return cls(*locate(configured))

    def _fail(self, what: str) -> PrivacyError:
        return PrivacyError(f"release ledger {self.path} ({self.source}): {what}")

    def check(self, *apart: tuple[str, str | Path], workspace: str | Path | None = None,
              private_roots: Sequence[str | Path] = ()) -> None:
        """Before any record is read: refuse, in one line, a ledger that cannot be written -- its folder a file,
        the file a folder or a symbolic-link loop, read-only -- or one inside a workspace (``ledger_place.
        inside_workspace``: a folder a stage writes or a clean-up deletes, ``apart``: ``(option, folder)``, the
        relative ones resolved against ``workspace``, the folder of params.yaml, and against the current folder;
        or any workspace at all). Creates the folder and the (empty) file if missing. Then import an older
        layout's ledger found under the workspace or ``private_roots`` (``ledger_place.import_old``). ``reserve``
        then says in one line which ledger this job uses -- and, if ``workspace`` last used another, that it
        changed (``ledger_place.announce``)."""
        from dpsynth.privacy import ledger_place

        problem = ledger_place.inside_workspace(self.folder, apart, workspace)
        if problem:
            raise self._fail(f"{problem}; keep the ledger outside every workspace folder (nothing was read or "
                             "written)")
        with self._locked():
            pass
        ledger_place.import_old(self, ledger_place.old_ledgers(workspace, private_roots))
        self.memo = ledger_place.memo_file(workspace, private_roots)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[int]:
        """The ledger file open for appending, under its exclusive lock; every OS error one line."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            # the mode follows the umask (0o666 & ~umask): a folder a group shares works for each member
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
        except FileExistsError:
            what = "a symbolic link that leads nowhere (a loop, or a dangling link)" if self.folder.is_symlink() \
                else "a file, not a folder"
            raise self._fail(f"{self.folder} is {what}; move it away or choose another folder (nothing was "
                             "released)") from None
        except OSError as exc:
            raise self._fail(self._why(exc)) from None
        try:
            self._acquire(fd)
            yield fd
        finally:
            os.close(fd)  # drops the lock

    def _acquire(self, fd: int) -> None:
        """The ledger's exclusive lock on ``fd``: read, budget check and append happen under it, so two jobs
        cannot both pass a budget that fits one. A job that waits for it says so after ``LOCK_NOTICE_S``."""
        mode = fcntl.LOCK_EX
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        notice = threading.Timer(LOCK_NOTICE_S, lambda: print(
            f"dpsynth: waiting for the release ledger's lock ({self.path}): another job is reserving or recording "
            "a release there", file=sys.stderr, flush=True))
        notice.daemon = True
        notice.start()
        try:
            fcntl.flock(fd, mode)
        finally:
            notice.cancel()

    def _why(self, exc: OSError) -> str:
        why = {errno.ELOOP: "a symbolic link loop", errno.EISDIR: "a folder, not the ledger file",
               errno.ENOTDIR: f"{self.folder} (or a folder above it) is a file, not a folder"}.get(
            exc.errno or 0, os.strerror(exc.errno) if exc.errno else str(exc))
        return f"{why}; nothing was released (fix it, or move the ledger: docs/privacy.md)"

    def read(self) -> tuple[list[Release], list[Damaged]]:
        """Every counted release and reservation in its latest state, and every damaged line (``releases.parse``).
        An absent ledger is empty; an unreadable one is refused in one line."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return [], []
        except OSError as exc:
            raise self._fail(self._why(exc)) from None
        return parse(data.decode("utf-8", errors="replace"), str(self.path))

    def _read_locked(self, fd: int) -> tuple[list[Release], list[Damaged]]:
        size = os.fstat(fd).st_size
        return parse(os.pread(fd, size, 0).decode("utf-8", errors="replace"), str(self.path))

    def _write(self, fd: int, entries: Sequence[Release]) -> None:
        """Append ``entries`` as whole lines (the lock held); a short write is an error (module docstring)."""
        size = os.fstat(fd).st_size
        data = "".join(e.to_json() + "\n" for e in entries).encode()
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data  # a torn line of a crashed writer ends here; the new entry gets its own line
        done = 0
        try:
            while done < len(data):
                n = os.write(fd, data[done:])
                if n <= 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                done += n
            os.fsync(fd)
        except OSError as exc:
            torn = f"; {done} of {len(data)} bytes written, a torn line that counts as a release without a " \
                   "guarantee until repaired" if done else ""
            raise self._fail(f"could not record {', '.join(f'{e.stage} {e.name} ({e.status})' for e in entries)}: "
                             f"{os.strerror(exc.errno) if exc.errno else exc}{torn}") from None

    def append(self, *entries: Release) -> None:
        """Append ``entries`` as they are (locked, whole lines, fsynced)."""
        with self._locked() as fd:
            self._write(fd, entries)

    def reserve(self, wanted: Sequence[Reservation], budgets: Mapping[str, Any], what: str) -> list[Held]:
        """Reserve every release of ``wanted`` at once, or none: under the lock, each one adopts its counted
        earlier reservation (``adopt``) or is checked against its dataset's budget (``budgets``: dataset ->
        ``TotalBudget``; absent: none), together with everything counted so far and the others of ``wanted``,
        then all new ones are appended as ``pending``. Returns the reservations to settle, in order. An earlier
        reservation is adopted only at no less than this cost: a resumed run whose reservation the ledger lacks, or
        holds at a smaller cost (another configuration's), reserves again, its budget checked."""
        with self._locked() as fd:
            known, damaged = self._read_locked(fd)
            out, new = [], []
            for w in wanted:
                mine = [r for r in known if w.adopts(r)]
                if mine:
                    out.append(Held(mine[-1], adopted=True))
                    continue
                entry = replace(w.entry, status=PENDING, id=uuid.uuid4().hex, pid=os.getpid(),
                                host=socket.gethostname())
                budget = budgets.get(entry.dataset)
                if budget is not None:
                    check_budget(entry.dataset, budget, known + new, damaged, (entry.epsilon, entry.delta), what,
                                 str(self.path))
                new.append(entry)
                out.append(Held(entry, adopted=False))
            if new:
                self._write(fd, new)
        if wanted:
            from dpsynth.privacy.ledger_place import announce

            announce(self, self.memo)
        return out

    def settle(self, reservation: Release, status: str, release: Release | None = None) -> None:
        """Settle ``reservation``: ``confirmed`` with ``release`` (its own cost, output and hash), or ``failed``
        (still counted, at the reserved cost), or ``cancelled`` (no noise was drawn: not counted)."""
        if status not in (CONFIRMED, FAILED, CANCELLED) or (status == CONFIRMED) != (release is not None):
            raise ValueError(f"settle: {status!r} with release={release is not None}")
        self.append(replace(release or reservation, status=status, id=reservation.id, key=reservation.key, line=0,
                            time=now()))

    def unsettled(self) -> list[Release]:
        """Every reservation no job confirmed (pending or failed: counted), in order."""
        known, _ = self.read()
        return [r for r in known if r.status in (PENDING, FAILED)]

    def settle_by_hand(self, ident: str, why: str, no_noise: bool) -> Release:
        """A person settles a reservation whose job will never settle it (killed): by an appended line naming who
        settled it, when and why. It becomes ``failed`` -- still counted, its noise may have been drawn -- or,
        only when ``no_noise`` says in so many words that the job drew none, ``cancelled`` (no longer counted).
        ``ident``: the entry's id or a unique prefix of it. Refused, in one line, for an unknown or ambiguous id,
        an empty reason, or a reservation whose job still runs on this machine."""
        if not why.strip():
            raise self._fail("settling a reservation needs a reason (--why): the ledger keeps who settled it and why")
        with self._locked() as fd:
            known, _ = self._read_locked(fd)
            match = [r for r in known if r.status in (PENDING, FAILED) and ident and r.id.startswith(ident)]
            if len(match) != 1:
                raise self._fail(f"{len(match) or 'no'} unsettled reservation(s) have an id starting {ident!r}; "
                                 "`dpsynth privacy ledger` lists them with their ids")
            r = match[0]
            if r.status == FAILED and not no_noise:
                raise self._fail(f"{r.stage} {r.name} (id {r.id[:8]}) is already failed: counted, nothing to settle")
            if r.host == socket.gethostname() and _running(r.pid):
                raise self._fail(f"{r.stage} {r.name} (id {r.id[:8]}) is held by pid {r.pid}, a dpsynth job still "
                                 "running on this machine: it settles its own reservation (stop it first)")
            who = f"{getpass.getuser()}@{socket.gethostname()}"
            said = ("the user states no noise was drawn: no longer counted" if no_noise else
                    "still counted: its noise may have been drawn")
            entry = replace(r, status=CANCELLED if no_noise else FAILED, time=now(), line=0, pid=os.getpid(),
                            host=socket.gethostname(), note=f"settled by hand by {who} ({said}): {why.strip()}")
            self._write(fd, [entry])
        return entry

    def record_found(self, entry: Release) -> bool:
        """A release found on disk (``entry``, confirmed, with its hash): nothing if the ledger already holds that
        file (its hash), else it confirms the unsettled reservation of the same stage and key (the job that made
        it died before confirming) or is appended. Whether anything was recorded."""
        with self._locked() as fd:
            known, _ = self._read_locked(fd)
            if any(r.status == CONFIRMED and r.sha256 == entry.sha256 for r in known):
                return False
            open_ = [r for r in known if r.status in (PENDING, FAILED) and r.stage == entry.stage
                     and r.key == entry.key]
            ident = open_[-1].id if open_ else uuid.uuid4().hex
            self._write(fd, [replace(entry, status=CONFIRMED, id=ident)])
        return True


def _running(pid: int) -> bool:
    """Whether ``pid`` is a dpsynth job running on this machine (its command line names dpsynth; a pid the
    system reused for another program is not)."""
    if pid <= 0:
        return False
    try:
        return b"dpsynth" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: whether the process exists at all
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


@contextlib.contextmanager
def settled(ledger: ReleaseLedger, held: Sequence[Held], drawn: Callable[[], bool]) -> Iterator[None]:
    """If the block raises, settle this job's own reservations of ``held`` as ``failed`` (``drawn()``: noise may
    have been drawn) or ``cancelled``, and re-raise; a kill (SIGKILL) leaves them pending, which counts the same.
    An adopted reservation (an earlier job's noise) stays as it is: counted. Confirming is the caller's, once its
    release is written."""
    try:
        yield
    except BaseException:
        status = FAILED if drawn() else CANCELLED
        for h in held:
            if not h.adopted:
                with contextlib.suppress(PrivacyError):  # the job's own error is the one to report
                    ledger.settle(h.release, status)
        raise
