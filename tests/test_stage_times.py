"""scripts/stage-times.py reads a Snakemake log into per-job and per-stage wall-clock."""

from __future__ import annotations

import importlib.util

from tests.conftest import REPO

LOG = """Select jobs to execute...

[Mon Nov 23 15:24:06 2026]
localrule prepare_data:
    output: data/processed/mnist.npz, data/processed/mnist.json
    jobid: 1
    wildcards: dataset=mnist
[Mon Nov 23 15:24:14 2026]
Finished jobid: 1 (Rule: prepare_data)

[Mon Nov 23 15:24:14 2026]
rule train:
    jobid: 4
    wildcards: experiment=a
[Mon Nov 23 15:24:15 2026]
rule train:
    jobid: 5
    wildcards: experiment=b
[Mon Nov 23 15:25:14 2026]
Finished jobid: 4 (Rule: train)
[Mon Nov 23 15:26:15 2026]
Finished jobid: 5 (Rule: train)
[Mon Nov 23 15:26:16 2026]
rule evaluate:
    jobid: 6
    wildcards: experiment=a
"""


def _module():
    spec = importlib.util.spec_from_file_location("stage_times", REPO / "scripts" / "stage-times.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_per_stage_and_total_times():
    st = _module()
    s = st.summarize(st.parse(LOG))
    assert s["jobs_finished"] == 3 and s["jobs_unfinished"] == 1
    assert s["stages"]["train"] == {"jobs": 2, "job_seconds": 60.0 + 120.0, "span_seconds": 121.0}
    assert s["stages"]["prepare_data"]["job_seconds"] == 8.0
    assert s["total_seconds"] == 129.0  # 15:24:06 -> 15:26:15
    assert [j["wildcards"] for j in s["jobs"]] == ["dataset=mnist", "experiment=a", "experiment=b", "experiment=a"]


def test_cli_prints_and_writes_json(tmp_path, capsys):
    st = _module()
    log = tmp_path / "run.log"
    log.write_text(LOG)
    assert st.main([str(log), "--jobs", "--json", str(tmp_path / "t.json")]) == 0
    out = capsys.readouterr().out
    assert "wall-clock 2:09" in out and "experiment=b" in out
    assert (tmp_path / "t.json").is_file()
    assert st.main([str(tmp_path / "missing.log")]) == 2
