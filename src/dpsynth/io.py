"""Atomic file writes: a killed job never leaves a half file that looks complete.

Every pipeline output goes through these helpers: the content is written to a
temporary file in the destination directory, flushed and fsync'ed, then renamed
over the destination (``os.replace`` is atomic on POSIX within one filesystem).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np


@contextlib.contextmanager
def atomic_path(dest: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path next to ``dest``; rename it over ``dest`` on success.

    On any exception the temporary file is removed and ``dest`` is left untouched.
    ``suffix`` lets libraries that insist on an extension (``np.savez``) keep it.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=suffix + ".tmp", dir=dest.parent)
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
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


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
