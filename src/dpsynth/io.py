"""Atomic file writes: a killed job never leaves a half file that looks complete.

Every pipeline output goes through these helpers: the content is written to a
temporary file in the destination directory, flushed and fsync'ed, then renamed
over the destination (``os.replace`` is atomic on POSIX within one filesystem).

Temporary names carry the writer's host and PID (``.{name}.{host}.{pid}.XXXXXXXX{suffix}.tmp``)
so a later successful write of the same file can tell a dead writer's leftover (removed) from a
live writer's file in progress (kept). Whole folders (the report's tables and figures) are built
in a staging folder beside the destination and swapped in only when complete: ``staged_dir``.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from dpsynth.errors import DataError
from dpsynth.locations import UNWRITABLE


def _host_tag() -> str:
    """This machine's short host name, safe in a file name: PIDs only mean something per host
    (a shared filesystem may hold temporaries of writers on other nodes, which are never touched)."""
    short = socket.gethostname().split(".")[0]
    return re.sub(r"[^A-Za-z0-9-]", "-", short) or "host"


HOST = _host_tag()


def writer_prefix(dest: str | os.PathLike[str], pid: int | None = None) -> str:
    """The name prefix of ``dest``'s temporaries written by process ``pid`` (default: this one) on this host."""
    return f".{Path(dest).name}.{HOST}.{os.getpid() if pid is None else pid}."


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (conservative: True whenever unsure)."""
    if pid <= 0:
        return True  # os.kill(0, ...) addresses a process group: never treat it as dead
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: it exists, owned by someone else
        return True
    return True


def _dead_entries(dest: Path, pattern: str) -> list[Path]:
    """Entries beside ``dest`` named ``.{dest.name}.{HOST}.{pid}.{pattern}`` whose pid is dead and not ours."""
    rx = re.compile(rf"^\.{re.escape(dest.name)}\.{re.escape(HOST)}\.(\d+)\.{pattern}$")
    head = f".{dest.name}.{HOST}."
    out = []
    try:
        entries = list(os.scandir(dest.parent))
    except OSError:
        return []
    for entry in entries:
        if not entry.name.startswith(head):
            continue
        m = rx.match(entry.name)
        if m is None:
            continue
        pid = int(m.group(1))
        if pid != os.getpid() and not pid_alive(pid):
            out.append(Path(entry.path))
    return out


#: mkstemp/mkdtemp's random part: 8 characters of [a-z0-9_]; an optional extension; ".tmp".
_TMP_FILE = r"[a-z0-9_]{8}(?:\.[A-Za-z0-9]+)?\.tmp"


def remove_stale_temps(dest: str | os.PathLike[str]) -> list[Path]:
    """Remove temporaries of ``dest`` left by killed writers (dead PID on this host); return them.

    Best effort: a temporary that cannot be removed is left, never an error for the write that succeeded."""
    removed = []
    for p in _dead_entries(Path(dest), _TMP_FILE):
        with contextlib.suppress(OSError):
            p.unlink()
            removed.append(p)
    return removed


@contextlib.contextmanager
def atomic_path(dest: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path next to ``dest``; rename it over ``dest`` on success.

    On any exception the temporary file is removed and ``dest`` is left untouched. After a
    success, temporaries of the same ``dest`` left by killed writers are removed.
    ``suffix`` lets libraries that insist on an extension (``np.savez``) keep it.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=writer_prefix(dest), suffix=suffix + ".tmp", dir=dest.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    os.chmod(tmp_path, 0o666 & ~_umask())  # mkstemp creates 0600; outputs should be shareable
    try:
        yield tmp_path
        with open(tmp_path, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp_path, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise
    remove_stale_temps(dest)


@contextlib.contextmanager
def atomic_open(dest: str | os.PathLike[str], mode: str = "w") -> Iterator[Any]:
    """Open a temporary file for writing that replaces ``dest`` only on success."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open supports 'w' and 'wb', not {mode!r}")
    with atomic_path(dest) as tmp:
        with open(tmp, mode, encoding=None if "b" in mode else "utf-8") as fh:
            yield fh


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# --------------------------------------------------------------------------- whole folders

_STAGING = r"[a-z0-9_]{8}\.staging"
_ASIDE = r"[a-z0-9_]{8}\.old"


def _remove_tree(p: Path) -> None:
    if p.is_symlink() or not p.is_dir():
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
    else:
        shutil.rmtree(p, ignore_errors=True)


def recover_staged_dir(dest: str | os.PathLike[str]) -> None:
    """Clean up after a writer of folder ``dest`` that was killed (dead PID on this host).

    A kill between moving the old folder aside and moving the new one in leaves no ``dest``: the
    old folder (complete) is moved back. Every other dead staging or aside folder is removed."""
    dest = Path(dest)
    asides = _dead_entries(dest, _ASIDE)
    if asides and not (dest.exists() or dest.is_symlink()):
        newest = max(asides, key=lambda p: p.lstat().st_mtime_ns)
        with contextlib.suppress(OSError):
            os.rename(newest, dest)
            asides.remove(newest)
    for p in asides + _dead_entries(dest, _STAGING):
        _remove_tree(p)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths in one atomic step (Linux ``renameat2(RENAME_EXCHANGE)``).

    False where the system or filesystem cannot (then the caller renames twice)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


@contextlib.contextmanager
def staged_dir(dest: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield an empty staging folder beside ``dest``; on success it replaces ``dest`` as a whole.

    The staging folder is on the same filesystem (same parent). Where the system can, the two
    folders are exchanged in one atomic step; elsewhere the old folder is renamed aside and the
    new one into place. Then the old one is deleted. A kill at any moment leaves the complete old
    folder or the complete new one, plus at most a staging or aside folder, which the next
    ``staged_dir`` of the same ``dest`` removes (moving the old folder back if a kill fell
    between the two renames, when ``dest`` is briefly absent). On an exception the staging
    folder is deleted and ``dest`` is untouched.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    recover_staged_dir(dest)
    staging = Path(tempfile.mkdtemp(prefix=writer_prefix(dest), suffix=".staging", dir=dest.parent))
    old: Path | None = None
    try:
        os.chmod(staging, 0o777 & ~_umask())  # mkdtemp creates 0700; outputs should be shareable
        yield staging
        if not (dest.exists() or dest.is_symlink()):
            os.rename(staging, dest)
        elif _exchange(staging, dest):
            old = staging  # now holds the previous folder
        else:
            aside = dest.parent / f"{writer_prefix(dest)}{secrets.token_hex(4)}.old"
            os.rename(dest, aside)
            try:
                os.rename(staging, dest)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.rename(aside, dest)  # put the previous folder back
                raise
            old = aside
    except BaseException:
        if old is not staging:
            _remove_tree(staging)
        raise
    _fsync_dir(dest.parent)
    if old is not None:
        _remove_tree(old)


# --------------------------------------------------------------------------- JSON, NPZ, hashes


def write_json(dest: str | os.PathLike[str], obj: Any) -> None:
    """Atomically write ``obj`` as indented, key-sorted JSON (stable diffs, DVC-friendly)."""
    with atomic_open(dest, "w") as fh:
        json.dump(obj, fh, indent=2, sort_keys=True, default=_json_default)
        fh.write("\n")


def write_npz(dest: str | os.PathLike[str], **arrays: np.ndarray) -> None:
    """Atomically write a compressed ``.npz``."""
    with atomic_path(dest, suffix=".npz") as tmp:
        with open(tmp, "wb") as fh:
            np.savez_compressed(fh, **arrays)


def read_json(path: str | os.PathLike[str]) -> Any:
    """Parse a JSON file the pipeline reads; any failure is a ``DataError`` naming the file and,
    for bad JSON, the line and column (a user sees what to fix, not a traceback)."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a folder, expected a JSON file") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not valid JSON (not UTF-8 text: byte {exc.start}); the file is damaged") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not text.strip():
        raise DataError(f"{path}: not valid JSON (the file is empty; truncated by a killed job?)")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
                        f"the file is damaged or was edited by hand") from None


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file's bytes, read in blocks (generators, checkpoints and weights are large)."""
    with open(path, "rb") as fh:
        return sha256_stream(fh)


def sha256_stream(fh: BinaryIO, block: int = 1 << 20) -> str:
    h = hashlib.sha256()
    for chunk in iter(lambda: fh.read(block), b""):
        h.update(chunk)
    return h.hexdigest()


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


#: errno values of a write that failed because of where it went (a full disk or quota, a read-only or
#: forbidden folder): the CLI reports them in one line naming the output, without a traceback.
ENVIRONMENT_WRITE_ERRORS = (errno.ENOSPC, errno.EDQUOT, *UNWRITABLE)


@contextlib.contextmanager
def naming_failed_writes(path: str | os.PathLike[str]) -> Iterator[None]:
    """Make such a failed write name ``path``: the OS reports it without a file name (a write into an
    open handle) or naming an internal temporary, and the user needs to know which output it was."""
    try:
        yield
    except OSError as exc:
        if exc.errno in ENVIRONMENT_WRITE_ERRORS:
            raise OSError(exc.errno, os.strerror(exc.errno), str(path)) from exc
        raise

