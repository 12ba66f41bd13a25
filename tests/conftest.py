"""Shared test helpers. Tests never touch the network: downloads go to a loopback server."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs two xdist workers on two cores: one OpenMP / BLAS thread each (before torch and
    # numpy load). More threads oversubscribe the cores: OpenMP threads wait on descheduled peers
    # (see one_torch_thread). Pipeline stages still set their own torch threads from params.yaml.
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")
FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")

# The release ledger lives outside every workspace (privacy.ledger_store: ~/.local/share/dpsynth/ledger by
# default): no test may write there. Every process of the session -- the smoke pipelines started in the
# background, subprocesses, session fixtures -- gets a temporary one; each test its own (``release_ledger``).
os.environ["DPSYNTH_LEDGER"] = tempfile.mkdtemp(prefix="dpsynth-test-ledger-")
atexit.register(shutil.rmtree, os.environ["DPSYNTH_LEDGER"], ignore_errors=True)


def require(condition: bool, reason: str) -> None:
    """Skip locally when a system prerequisite is missing, but FAIL under CI, which installs it."""
    if condition:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must provide this: {reason}")
    pytest.skip(reason)


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run `dpsynth ...` in a subprocess, the way users and workflow rules do."""
    return subprocess.run([sys.executable, "-m", "dpsynth.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def venv_bin(name: str) -> str:
    """A console script installed next to the running interpreter (snakemake, dvc)."""
    return str(Path(sys.executable).parent / name)


@pytest.fixture
def fashion_dir() -> Path:
    require(FASHION_DIR.is_dir(), f"Debian package dataset-fashion-mnist not installed ({FASHION_DIR})")
    return FASHION_DIR


@pytest.fixture(autouse=True)
def release_ledger(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test's own release ledger folder ($DPSYNTH_LEDGER; outside its tmp_path, so a test listing what a
    stage wrote there sees no ledger), inherited by the subprocesses it starts."""
    d = tmp_path_factory.mktemp("ledger")
    monkeypatch.setenv("DPSYNTH_LEDGER", str(d))
    return d


@pytest.fixture(autouse=True)
def _torch_threads_restored():  # type: ignore[no-untyped-def]
    """A CLI stage run in-process pins torch's thread count (``prepare_cpu``); without this a
    later test inherits it (the float32 trainer-vs-fast-step agreement is thread-count sensitive)."""
    import torch

    old = torch.get_num_threads()
    yield
    if torch.get_num_threads() != old:
        torch.set_num_threads(old)


@pytest.fixture(scope="module")
def one_torch_thread():  # type: ignore[no-untyped-def]
    """One torch and one BLAS thread for a module: on a shared, oversubscribed 2-core CPU two
    threads ran ~10x slower (OpenMP threads wait on descheduled peers). Results do not depend on it."""
    import torch
    from threadpoolctl import threadpool_limits

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    with threadpool_limits(1):
        yield
    torch.set_num_threads(old)


@pytest.fixture(scope="session")
def digits28_processed(tmp_path_factory) -> Path:
    """``processed/`` holding digits28.npz + .json, prepared once per test session (per xdist worker):
    ~25 tests need the bundled digits; each copies them (``with_digits28``) instead of preparing them again."""
    from dpsynth.data.prepare import Sources, prepare

    root = tmp_path_factory.mktemp("digits28-data")
    prepare("digits28", Sources(root=root))
    return root / "processed"


def with_digits28(processed: Path, root: Path) -> Path:
    """Copy the session's prepared digits28 into ``root/processed`` (``root`` is a data root, e.g.
    ``workdir/data``), as `dpsynth data prepare digits28 --root root` would leave it; returns ``root``."""
    import shutil

    dest = root / "processed"
    dest.mkdir(parents=True, exist_ok=True)
    for f in processed.glob("digits28.*"):
        shutil.copy2(f, dest / f.name)
    return root


def clear_pipeline(p: dict) -> dict:
    """A raw params mapping with no pipeline targets of any kind (tests then add their own)."""
    p.update(pipeline={"experiments": [], "sweeps": []}, w2_noise={})
    return p


def digits28_smoke_params(experiment: str, steps: int, **top: object) -> dict:
    """The shipped params.yaml at the smoke scale with one DP-Sinkhorn experiment (a copy of
    dps_fmnist) on the bundled 28x28 digits: nothing to download, ~0.3 s per step. ``top``
    overrides top-level keys (e.g. ``privacy_noise="reproducible"``)."""
    import copy

    import yaml

    p = yaml.safe_load((REPO / "params.yaml").read_text())
    p.update(scale="smoke", datasets=["digits28"], **top)
    clear_pipeline(p)
    p["evaluation"]["real_datasets"] = []
    exp = copy.deepcopy(p["experiments"]["dps_fmnist"])
    exp["dataset"] = "digits28"
    p["experiments"][experiment] = exp
    p["scales"]["smoke"]["train_steps"] = steps
    return p


def _shared_dir(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    """The session's temporary folder that every xdist worker sees (each has its own below it). From the
    environment, not xdist's ``worker_id`` fixture: that one is missing under ``pytest -p no:xdist``."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


NEEDS_SMOKE_RUNS = ("smoke_pipelines", "smoke_snakemake")


def _waits_for_smoke_runs(item) -> bool:  # type: ignore[no-untyped-def]
    """Its set-up waits for the shared smoke runs (their fixtures)."""
    return bool(set(NEEDS_SMOKE_RUNS) & set(getattr(item, "fixturenames", ())))


def _reads_smoke_runs(item) -> bool:  # type: ignore[no-untyped-def]
    return _waits_for_smoke_runs(item) or item.get_closest_marker("smoke_runs") is not None


def pytest_collection_modifyitems(config, items) -> None:  # type: ignore[no-untyped-def]
    """Order for two workers (xdist hands work out in this order; stable sort): first the test that
    reads the smoke runs only after its own SLURM pipeline (mark ``smoke_runs``), which runs beside
    them; last the tests whose set-up waits for the runs, which by then have finished in the background
    while the other tests used both cores."""
    items.sort(key=lambda item: 2 if _waits_for_smoke_runs(item) else 0 if _reads_smoke_runs(item) else 1)


@pytest.fixture(scope="session", autouse=True)
def _smoke_runs_in_background(request, tmp_path_factory) -> None:  # type: ignore[no-untyped-def]
    """Start the shared smoke runs (tests/pipelines.py) as the session starts, when a selected test
    reads them (its fixtures, or the mark ``smoke_runs`` for one that asks for them later): they run
    beside the other tests instead of holding a worker (stopped by pytest_sessionfinish if unfinished)."""
    from tests.pipelines import smoke_base, start_smoke_runs

    wanted = any(_reads_smoke_runs(item) for item in request.session.items)
    if wanted and FASHION_DIR.is_dir():
        start_smoke_runs(smoke_base(_shared_dir(tmp_path_factory)))


def pytest_sessionfinish(session) -> None:  # type: ignore[no-untyped-def]
    """In the process that ends the whole session (xdist's controller, or a plain pytest): stop a
    smoke run still going (after -x, say), so no pipeline outlives the tests."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    from tests.pipelines import smoke_base, stop_smoke_runs

    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is not None and factory._basetemp is not None:
        stop_smoke_runs(smoke_base(factory.getbasetemp()))


def _smoke_run(tmp_path_factory, runner: str):  # type: ignore[no-untyped-def]
    from tests.pipelines import smoke_base, wait_for_smoke_run

    require(FASHION_DIR.is_dir(), f"Debian package dataset-fashion-mnist not installed ({FASHION_DIR})")
    return wait_for_smoke_run(smoke_base(_shared_dir(tmp_path_factory)), runner)


@pytest.fixture(scope="session")
def smoke_snakemake(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    """The workspace of the shared smoke pipeline's Snakemake run, once it has finished (read-only)."""
    return _smoke_run(tmp_path_factory, "snakemake")[0]


@pytest.fixture(scope="session")
def smoke_pipelines(tmp_path_factory):  # type: ignore[no-untyped-def]
    """The smoke pipeline (with GS-WGAN) run once by Snakemake and once by `dvc repro` this session,
    for every test that inspects a finished pipeline (tests/pipelines.py), once both have finished.
    Read-only: copy a workspace before changing it."""
    from tests.pipelines import SmokePipelines

    (sm, sm_log), (dv, dv_log) = (_smoke_run(tmp_path_factory, r) for r in ("snakemake", "dvc"))
    return SmokePipelines(sm, dv, sm_log, dv_log)


@pytest.fixture
def private_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every load of a processed (private) dataset by an in-process stage (a refusal must come
    before any: no record read, no budget spent)."""
    import dpsynth.data.dataset as dataset

    calls: list[str] = []
    real = dataset.load_processed

    def spy(path, *a, **k):  # type: ignore[no-untyped-def]
        calls.append(str(path))
        return real(path, *a, **k)

    monkeypatch.setattr(dataset, "load_processed", spy)
    return calls


def train_split_statistics(node: Any, where: str = "") -> list[str]:
    """Where a metrics.json (``node``) holds a statistic of the training records: a score whose reference is the
    training split, one measured with a network trained on it, or a key (hash) of such a network's records.
    Empty for a file every number of which is computed on synthetic data and the held-out test split."""
    found = []
    if isinstance(node, dict):
        measured = node.get("available", True) is not False
        if measured and "train" in str(node.get("reference_split", "")):
            found.append(where or "(top)")
        clf = node.get("classifier")
        if measured and isinstance(clf, dict) and "train" in str(clf.get("trained_on", "")):
            found.append(where or "(top)")
        if where.endswith("classifier") and "key" in node:
            found.append(f"{where}.key")
        for k, v in node.items():
            found += train_split_statistics(v, f"{where}.{k}" if where else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found += train_split_statistics(v, f"{where}[{i}]")
    return found


def printed_values(values: list[float], log: str) -> list[str]:
    """Which of ``values`` ``log`` shows, in a format the stages and progress lines print numbers in. Counts,
    rates, ETAs and durations ("12.3 step/s", "4.1 s") are left out first: a value is looked for where a score
    is printed, not where a timing happens to share its digits."""
    import re

    lines = []
    for line in log.splitlines():
        if line.startswith("["):  # a progress line: "[desc] unit n/total (pct) | rate | ETA .. | fields | status"
            line = " | ".join(part for part in line.split(" | ")[1:] if not (
                part.endswith("/s") or part.startswith("ETA ") or re.match(r"(done|stopped)\b", part)))
        lines.append(re.sub(r"\d+(?:\.\d+)? s\b", "", line))
    text = "\n".join(lines)
    shown = []
    for v in values:
        for form in {f"{v:.4f}", f"{v:.3f}", f"{v:.4g}", f"{v:.2f}", repr(v)}:
            if len(form.strip("-0.")) >= 2 and re.search(rf"(?<![\d.]){re.escape(form)}(?!\d)", text):
                shown.append(f"{v} as {form}")
    return shown
