"""Where a stage may write, checked before it starts, and one run at a time per run directory.

A stage that trains spends privacy budget on the private data the moment it starts, so every
place it will write -- released and private -- is checked first (exists or can be created, is a
directory, is writable): an ``--out`` that names a file, or a read-only folder, is one clear line
before any private record is read, not a traceback after the budget is spent.

``RunLock`` keeps two processes from training the same run at once (a user beside Snakemake, a
SLURM requeue racing its predecessor): both would write the same checkpoint and released files, so
the outputs could mix two runs and the released model's privacy accounting would be wrong. It is an
``fcntl`` lock, which the kernel (or the NFS server) drops when its holder dies, so a lock left by
a killed process is taken over without anyone deleting a file; the holder's pid and host are
written into the lock file so the refusal can name them.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
from pathlib import Path
from types import TracebackType

from dpsynth.errors import DpsynthError

__all__ = ["LOCK_FILE", "UNWRITABLE", "RunLock", "check_apart", "check_writable_dir", "unwritable_reason"]

LOCK_FILE = "run.lock"
#: errno values that mean "this folder cannot be written" (the CLI reports them in one line).
UNWRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)


def unwritable_reason(path: Path) -> str | None:
    """Why files cannot be written in directory ``path`` (created if missing) -- None when they can.

    Nothing is created: the nearest existing ancestor must be a writable directory."""
    probe = Path(os.path.abspath(path))
    missing = False
    while True:
        try:
            is_dir = probe.is_dir()
            exists = is_dir or probe.exists() or probe.is_symlink()
        except OSError as exc:  # e.g. ELOOP on a symlink loop
            return f"{probe}: {os.strerror(exc.errno) if exc.errno else exc}"
        if exists:
            break
        missing = True
        probe = probe.parent
    if probe.is_symlink() and not probe.exists():
        return f"{probe} is a dangling symbolic link"
    if not is_dir:
        return f"{probe} is a file, not a directory" if probe == Path(os.path.abspath(path)) else \
            f"{probe} is a file, so {path} cannot be a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        what = "read-only file system" if _read_only_fs(probe) else "no write permission"
        where = "" if not missing else f" (to create {path})"
        return f"{probe} is not writable ({what}){where}"
    return None


def _read_only_fs(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def check_writable_dir(path: str | Path, option: str) -> Path:
    """``path`` as a ``Path``, or a ``DpsynthError`` naming ``option`` and the reason it cannot be
    written to. Call it for every output root before a stage reads any private record."""
    reason = unwritable_reason(Path(path))
    if reason is not None:
        raise DpsynthError(f"{option} {path}: {reason}; choose another folder (nothing was read or written)")
    return Path(path)


def check_apart(private: tuple[str, str | Path], *released: tuple[str, str | Path]) -> None:
    """Refuse (``DpsynthError``, one line) a released folder that is, holds or lies inside the private one.

    ``private`` and each of ``released`` are ``(option, path)``. The private folder holds the
    checkpoints (with the secret noise generators' states) and the diagnostics computed on private
    data without noise; anything under a released folder may be pushed, shared or published
    wholesale (DVC outputs, a copied ``models/``), and a released folder inside the private one
    mixes what may be shared into what may not. Paths are compared after resolving symbolic links
    and ``..``, before anything is read or written."""
    popt, ppath = private
    pr = Path(os.path.realpath(ppath))
    for opt, path in released:
        rr = Path(os.path.realpath(path))
        if rr == pr:
            how = "they are the same folder"
        elif pr.is_relative_to(rr):
            how = f"{popt} lies inside {opt}"
        elif rr.is_relative_to(pr):
            how = f"{opt} lies inside {popt}"
        else:
            continue
        raise DpsynthError(f"{opt} {path} and {popt} {ppath} overlap ({how}): private files (checkpoints with the "
                           "secret noise state, diagnostics on private data) must never sit in or around a folder "
                           "meant for release; choose separate folders (nothing was read or written)")


class RunLock:
    """An exclusive lock on one run directory for the life of a ``with`` block."""

    def __init__(self, directory: str | Path, what: str) -> None:
        self.path = Path(directory) / LOCK_FILE
        self.what = what
        self._fd: int | None = None

    def check(self) -> None:
        """Refuse (one line) a lock path that is not a regular file -- a folder or a device named ``run.lock``
        (a copy gone wrong): ``os.open`` would fail with a traceback, and only once the data is read. Stages
        call it before reading any private record; ``__enter__`` calls it again."""
        if (self.path.exists() or self.path.is_symlink()) and not self.path.is_file():
            kind = "a directory" if self.path.is_dir() else "not a regular file"
            raise DpsynthError(f"{self.path}: is {kind}, not {self.what}'s lock file; remove it (a run leaves no lock "
                               "file behind) and run again (nothing was read or written)")

    def __enter__(self) -> RunLock:
        self.check()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                holder = _read_holder(fd)
                os.close(fd)
                if exc.errno in (errno.EACCES, errno.EAGAIN):
                    raise DpsynthError(f"{self.what} is being trained by another process ({holder}; lock {self.path}); "
                                       "wait for it to finish, or stop it, and run again") from None
                raise
            if _is_current(fd, self.path):
                break
            # The holder released and removed this file between our open and our lock: the lock we hold is on
            # a file no one else will open; take the one now at the path.
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on host {socket.gethostname()}\n".encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._fd is not None:
            # Removed while still held, then closed (which drops the lock): nothing stays behind after a run.
            # A process that opened the file just before the removal finds, once it holds the lock, that the
            # file is no longer at the path (``_is_current``) and opens the new one, so two never both hold it.
            self.path.unlink(missing_ok=True)
            os.close(self._fd)
            self._fd = None


def _is_current(fd: int, path: Path) -> bool:
    """Whether the open file ``fd`` is still the file at ``path`` (not removed by a releasing holder)."""
    try:
        here = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino)


def _read_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 200, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    return text or "holder unknown"
