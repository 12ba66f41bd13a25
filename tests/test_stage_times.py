"""scripts/stage-times.py: per-job and per-stage cost from Snakemake's benchmark files, the run's
elapsed time from its log (or everything from the log alone)."""

from __future__ import annotations

import csv
import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, venv_bin

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


def test_cli_prints_and_writes_json(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no benchmarks/jobs here: the log alone
    st = _module()
    log = tmp_path / "run.log"
    log.write_text(LOG)
    assert st.main([str(log), "--jobs", "--json", str(tmp_path / "t.json")]) == 0
    out = capsys.readouterr().out
    assert "wall-clock 2:09" in out and "experiment=b" in out
    assert (tmp_path / "t.json").is_file()
    assert st.main([str(tmp_path / "missing.log")]) == 2


def test_the_default_log_is_the_newest_that_ran_jobs(tmp_path, capsys, monkeypatch):
    """`make run` ends with `snakemake --report`, whose log runs no job: the run's log is the one before."""
    monkeypatch.chdir(tmp_path)
    logs = tmp_path / ".snakemake" / "log"
    logs.mkdir(parents=True)
    (logs / "2026-11-26T070000.000000.snakemake.log").write_text(LOG)
    (logs / "2026-11-26T073000.000000.snakemake.log").write_text("Building DAG of jobs...\nCreating report...\n")
    assert _module().main([]) == 0
    assert "wall-clock 2:09" in capsys.readouterr().out


# Two rules as the pipeline declares them: a wildcard rule (two short jobs) and a rule without
# wildcards that burns CPU long enough for Snakemake's first samples (every 0.5 s) to see it.
SNAKEFILE = """
rule all:
    input: "out/total.txt"

rule nap:
    output: "out/{{x}}.txt"
    benchmark: "benchmarks/jobs/nap/{{x}}.tsv"
    shell: "sleep 0.2 && echo {{wildcards.x}} > {{output}}"

rule busy:
    input: expand("out/{{x}}.txt", x=["a", "b"])
    output: "out/total.txt"
    benchmark: "benchmarks/jobs/busy.tsv"
    shell: "{python} busy.py && cat {{input}} > {{output}}"
"""
BUSY = "import time\nt = time.time()\nwhile time.time() - t < 1.2:\n    pass\n"


def _snakemake(cwd: Path, *args: str) -> None:
    res = subprocess.run([venv_bin("snakemake"), "--cores", "1", *args], cwd=cwd, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    """A tiny real Snakemake run (a few seconds) that leaves benchmarks/jobs and its log."""
    d = tmp_path_factory.mktemp("sm")
    (d / "Snakefile").write_text(SNAKEFILE.format(python=sys.executable))
    (d / "busy.py").write_text(BUSY)
    _snakemake(d)
    return d


def _seconds(path: Path) -> float:
    with path.open() as f:
        return sum(float(r["s"]) for r in csv.DictReader(f, delimiter="\t"))


def test_real_benchmark_files_sum_per_stage(real_run, tmp_path, capsys, monkeypatch):
    st = _module()
    root = real_run / "benchmarks/jobs"
    naps = [_seconds(root / f"nap/{x}.tsv") for x in "ab"]
    busy = _seconds(root / "busy.tsv")
    jobs = st.read_benchmarks(root)
    assert sorted((j["rule"], j["job"]) for j in jobs) == [("busy", ""), ("nap", "a"), ("nap", "b")]
    b = st.summarize_benchmarks(jobs)
    nap, bz = b["stages"]["nap"], b["stages"]["busy"]
    assert nap["jobs"] == 2 and bz["jobs"] == 1 and b["jobs"] == 3
    assert nap["job_seconds"] == pytest.approx(sum(naps)) and nap["max_job_seconds"] == max(naps)
    assert min(naps) >= 0.2 and busy >= 1.2 and bz["job_seconds"] == busy
    assert b["job_seconds"] == pytest.approx(sum(naps) + busy)
    assert bz["cpu_seconds"] > 0.1 and bz["max_rss_mb"] > 1  # sampled: the job outlived 0.5 s
    assert b["cpu_seconds"] >= bz["cpu_seconds"]

    monkeypatch.chdir(real_run)  # the defaults: benchmarks/jobs and the newest .snakemake/log
    assert st.main(["--jobs", "--json", str(tmp_path / "t.json")]) == 0
    out = capsys.readouterr().out
    assert "benchmarks/jobs: 3 jobs" in out and "first job start to last job end" in out
    assert "note:" not in out  # every file is from this log's run
    assert [ln.split()[:2] for ln in out.splitlines() if ln.startswith(("nap ", "busy "))] == \
        [["busy", "1"], ["nap", "2"]]  # the costliest stage first
    import json

    s = json.loads((tmp_path / "t.json").read_text())
    assert s["outside_run"] == 0 and len(s["job_list"]) == 3
    assert s["run"]["jobs_finished"] == 3 and 1 <= s["run_seconds"] <= 30  # whole-second stamps, 1.6 s of jobs


def test_files_from_an_earlier_run_are_reported(real_run, tmp_path, capsys):
    """Rerunning only `busy` leaves the naps' files from the first run: counted, and said so."""
    import shutil

    d = tmp_path / "again"
    shutil.copytree(real_run, d)
    time.sleep(1.1)  # the log stamps whole seconds
    _snakemake(d, "--forcerun", "busy")
    st = _module()
    log = sorted((d / ".snakemake/log").glob("*.snakemake.log"))[-1]
    stale = st.outside_run(st.read_benchmarks(d / "benchmarks/jobs"), st.parse(log.read_text()))
    assert sorted(j["job"] for j in stale) == ["a", "b"]
    assert st.main([str(log), "--benchmarks", str(d / "benchmarks/jobs")]) == 0
    assert "note: 2 of 3 benchmark files were written outside this run" in capsys.readouterr().out


def test_na_columns_and_malformed_files(tmp_path, capsys):
    st = _module()
    root = tmp_path / "jobs"
    (root / "train").mkdir(parents=True)
    head = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
    (root / "train/a.tsv").write_text(head + "0.1200\t0:00:00\tNA\tNA\tNA\tNA\tNA\tNA\tNA\tNA\n")
    (root / "train/b.tsv").write_text(head + "90.5\t0:01:30\t512.3\t900\t500\t505\t1\t2\t95.0\t88.25\n")
    s = st.summarize_benchmarks(st.read_benchmarks(root))["stages"]["train"]
    assert s == {"jobs": 2, "job_seconds": pytest.approx(90.62), "max_job_seconds": 90.5,
                 "cpu_seconds": 88.25, "max_rss_mb": 512.3}  # NA (a job shorter than the first sample) skipped
    for bad, why in (("hello world\n", "no column s, max_rss, cpu_time"), (head, "no measurement row"),
                     (head + "soon\t0:00:00\tNA\tNA\tNA\tNA\tNA\tNA\tNA\tNA\n", "'s' is 'soon'"),
                     (head + "1.0\t0:00:01\n", "line 2 has 2 columns")):
        (root / "report.tsv").write_text(bad)
        (tmp_path / "run.log").write_text(LOG)
        assert st.main(["--benchmarks", str(root), str(tmp_path / "run.log")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and str(root / "report.tsv") in err[0] and why in err[0], (err, why)
    assert st.main(["--benchmarks", str(tmp_path / "empty")]) == 2
    assert st.main(["--benchmarks", str(root), str(tmp_path / "none.log")]) == 2
    with pytest.raises(SystemExit):  # one source of stage times or the other
        st.main(["--benchmarks", str(root), "--log-only"])
