"""scripts/privacy-mutations.py stays usable: it explains itself, lists its mutations, and every
mutation still applies to the source (a refactoring that moves a mutated line would otherwise turn
the mutation into a silent no-op). Running the mutations themselves re-runs the wiring tests once per
mutation (long): see its --help."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "privacy-mutations.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60, cwd=REPO)


def test_help_names_the_usage_and_every_mutation() -> None:
    r = _run("--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: scripts/privacy-mutations.py"), r.stdout
    for name in ("released epsilon replaced by the target", "steps derived from 2*sigma",
                 "secret numpy generator seeded with a constant", "sigma/2 in the DP-Sinkhorn step"):
        assert name in r.stdout


def test_every_mutation_still_applies() -> None:
    listed = _run("--list")
    assert listed.returncode == 0 and len(listed.stdout.splitlines()) >= 15
    r = _run("--check")
    assert r.returncode == 0, r.stdout
    assert r.stdout.strip() == f"all {len(listed.stdout.splitlines())} mutations apply"


def test_an_unknown_mutation_index_is_one_line() -> None:
    r = _run("99")
    assert r.returncode == 2 and "no mutation 99 (0.." in r.stderr.splitlines()[-1], r.stderr
