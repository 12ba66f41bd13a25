"""Downloads through mirrors against a real HTTP server on loopback (never the network)."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import threading
from collections.abc import Iterator
from functools import partial

import pytest

from dpsynth.data.download import RawFile, download, fetch, find_local
from dpsynth.errors import DataError

PAYLOAD = b"\x00\x00\x08\x01\x00\x00\x00\x03abc"  # a 3-byte IDX label file
GOOD = RawFile("labels.gz", sha256=hashlib.sha256(PAYLOAD).hexdigest())


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest output clean
        pass


@pytest.fixture
def servers(tmp_path) -> Iterator[dict[str, str]]:
    """Two mirrors: 'broken' serves nothing (404), 'good' serves the gz, 'corrupt' serves bad bytes."""
    roots = {name: tmp_path / f"srv_{name}" for name in ("broken", "good", "corrupt")}
    for r in roots.values():
        r.mkdir()
    (roots["good"] / "labels.gz").write_bytes(gzip.compress(PAYLOAD))
    (roots["corrupt"] / "labels.gz").write_bytes(gzip.compress(PAYLOAD[:-1] + b"X"))
    urls, httpds = {}, []
    for name, root in roots.items():
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(_Handler, directory=str(root)))
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        httpds.append(httpd)
        urls[name] = f"http://127.0.0.1:{httpd.server_address[1]}/"
    yield urls
    for h in httpds:
        h.shutdown()
        h.server_close()


def test_first_mirror_fails_second_serves(servers, tmp_path):
    cache = tmp_path / "cache"
    got = download(GOOD, [servers["broken"], servers["good"]], cache, retries=2, backoff=0)
    assert got.content == PAYLOAD
    assert got.source == servers["good"] + "labels.gz"
    assert (cache / "labels.gz").is_file()
    # the next fetch is served from the cache, with no server at all
    again = fetch(GOOD, local_dirs=[], mirrors=[], cache_dir=cache)
    assert again.content == PAYLOAD and again.source == str(cache / "labels.gz")


def test_checksum_mismatch_is_clear_and_leaves_nothing(servers, tmp_path):
    cache = tmp_path / "cache"
    with pytest.raises(DataError) as info:
        download(GOOD, [servers["corrupt"]], cache, retries=1, backoff=0)
    msg = str(info.value)
    assert "checksum mismatch" in msg and "labels" in msg and GOOD.sha256 in msg
    assert not cache.exists() or not any(cache.iterdir()), "no partial or unverified file may remain"


def test_corrupt_mirror_then_good_mirror(servers, tmp_path):
    got = download(GOOD, [servers["corrupt"], servers["good"]], tmp_path / "c", retries=1, backoff=0)
    assert got.content == PAYLOAD


def test_all_mirrors_down_names_the_file_to_place(servers, tmp_path):
    with pytest.raises(DataError) as info:
        fetch(GOOD, local_dirs=[tmp_path / "mine"], mirrors=[servers["broken"]], cache_dir=tmp_path / "c")
    msg = str(info.value)
    assert "Place labels.gz" in msg and str(tmp_path / "mine") in msg and "404" in msg


def test_local_copy_checked_first_and_verified(tmp_path):
    d = tmp_path / "local"
    d.mkdir()
    (d / "labels").write_bytes(PAYLOAD)  # decompressed copies are accepted too
    assert find_local(GOOD, [d]).content == PAYLOAD
    (d / "labels").write_bytes(PAYLOAD + b"!")
    with pytest.raises(DataError, match="checksum mismatch"):
        find_local(GOOD, [d])


def test_archive_md5_verification(tmp_path):
    blob = gzip.compress(PAYLOAD)
    spec = RawFile("labels.gz", md5_gz=hashlib.md5(blob).hexdigest())
    d = tmp_path / "l"
    d.mkdir()
    (d / "labels.gz").write_bytes(blob)
    assert find_local(spec, [d]).verified_by == "md5 of official archive"
    # a decompressed copy cannot be verified against an archive checksum: refuse, don't guess
    (d / "labels.gz").unlink()
    (d / "labels").write_bytes(PAYLOAD)
    with pytest.raises(DataError, match="cannot verify"):
        find_local(spec, [d])


def test_unreachable_mirror_is_not_retried_and_skipped_for_later_files(tmp_path):
    """Offline, each mirror costs one refused connection per dataset, not retries x files."""
    import time

    dead = "http://127.0.0.1:9/"  # nothing listens on the discard port: connection refused
    unreachable: set[str] = set()
    t0 = time.perf_counter()
    with pytest.raises(DataError) as info:
        download(GOOD, [dead], tmp_path, retries=3, backoff=10.0, unreachable=unreachable)
    assert time.perf_counter() - t0 < 5.0, "a retry would have slept 10 s"
    assert "unreachable" in str(info.value) and unreachable == {dead}
    with pytest.raises(DataError, match="skipped"):
        download(RawFile("other.gz", sha256="0" * 64), [dead], tmp_path, unreachable=unreachable)
