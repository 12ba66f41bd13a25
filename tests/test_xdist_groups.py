"""The xdist groups the suite relies on are in effect (`make test`: ``-n 2 --dist loadgroup``).

Modules whose module fixtures cost minutes (test_sweep_train, test_gswgan_stage, test_dvc) or that
run a SLURM cluster (test_slurm) carry ``xdist_group``; pytest-xdist then sends each such module to
one worker. pytest 9.2 made xdist's grouping a silent no-op (pytest-dev/pytest-xdist#1386: the
group travels as a nodeid suffix, which 9.2 no longer lets a plugin set), so every expensive fixture
ran once per worker; requirements.lock pins pytest 9.1.1. This test fails when grouping is off
again, instead of the suite quietly getting slower."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.xdist_group("xdist_groups_check")


def test_a_grouped_test_carries_its_group_under_loadgroup(request: pytest.FixtureRequest) -> None:
    worker = request.config.workerinput["workerid"] if hasattr(request.config, "workerinput") else None
    if worker is None or not request.config.getvalue("loadgroup"):
        pytest.skip("not an xdist worker under --dist loadgroup: nothing is grouped")
    assert request.node.nodeid.endswith("@xdist_groups_check"), (
        f"pytest-xdist's loadgroup is not in effect ({request.node.nodeid}, pytest {pytest.__version__}): "
        "grouped modules run on both workers (pytest-dev/pytest-xdist#1386); pin pytest < 9.2")
