#!/usr/bin/env python3
"""Time per job, per stage and in total of a Snakemake run, from its benchmark files and its log.

Every job writes a Snakemake ``benchmark:`` file, ``benchmarks/jobs/<rule>/<wildcards>.tsv``, with
the job's own wall-clock, CPU time and peak memory, measured where the job ran (also under SLURM).
Those give the cost per stage; only Snakemake's log (``.snakemake/log/<date>.snakemake.log``, or
its console output), which stamps every job's start and finish, gives the run's elapsed time:

    python scripts/stage-times.py                       # benchmarks/jobs + the newest .snakemake/log of a run
    python scripts/stage-times.py run.log --jobs        # also one line per job
    python scripts/stage-times.py --benchmarks DIR run.log --json out.json
    python scripts/stage-times.py run.log --log-only    # from the log alone (runs before benchmarks)

Per-stage "job time" sums the jobs' own wall-clock (jobs run side by side, so it can exceed the
run's wall-clock); "span" (log only) is first start to last finish of that stage. A benchmark
file is rewritten each time its job runs, so it holds that job's latest run: files written outside
the given log's run (jobs that were up to date, or a later run) are counted and reported.
Snakemake samples CPU time and memory (every 0.5 s for the first 15 s of a job, then every 30 s),
so both are lower bounds: CPU time stops at the last sample; a short memory peak can fall between.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable

STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
RULE = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):$")
JOBID = re.compile(r"^\s+jobid: (\d+)$")
WILDCARDS = re.compile(r"^\s+wildcards: (.*)$")
FINISHED = re.compile(r"^Finished jobid: (\d+)")
BENCHMARKS = Path("benchmarks/jobs")
# Snakemake writes "NA" for memory and CPU when the job ended before its first sample (0.5 s).
MISSING = {"NA", "-", ""}


def parse(text: str) -> list[dict[str, Any]]:
    """Jobs as {jobid, rule, wildcards, start, end, seconds}, in start order (unfinished: end None)."""
    jobs: dict[int, dict[str, Any]] = {}
    stamp: datetime | None = None
    current: dict[str, Any] | None = None
    for line in text.splitlines():
        if m := STAMP.match(line.strip()):
            stamp, current = datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y"), None
        elif (m := RULE.match(line.strip())) and stamp is not None:
            current = {"rule": m.group(1), "start": stamp, "end": None, "wildcards": ""}
        elif current is not None and (m := JOBID.match(line)):
            jobs[int(m.group(1))] = current
            current["jobid"] = int(m.group(1))
        elif current is not None and (m := WILDCARDS.match(line)):
            current["wildcards"] = m.group(1)
        elif (m := FINISHED.match(line.strip())) and stamp is not None and int(m.group(1)) in jobs:
            job = jobs[int(m.group(1))]
            job["end"] = stamp
    out = sorted(jobs.values(), key=lambda j: (j["start"], j["jobid"]))
    for j in out:
        j["seconds"] = (j["end"] - j["start"]).total_seconds() if j["end"] else None
    return [j for j in out if j["rule"] != "all"]


def newest_run_log(logs: list[Path]) -> Path | None:
    """The newest of ``logs`` (sorted oldest first) that records a job: `make run` ends with
    `snakemake --report`, whose log runs no job, so the newest log alone would leave the run's
    elapsed time unknown. None without logs; the newest when none records a job."""
    for log in reversed(logs):
        if parse(log.read_text(errors="replace")):
            return log
    return logs[-1] if logs else None


def summarize(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    done = [j for j in jobs if j["end"] is not None]
    stages: dict[str, dict[str, Any]] = {}
    for j in done:
        s = stages.setdefault(j["rule"], {"jobs": 0, "job_seconds": 0.0, "first": j["start"], "last": j["end"]})
        s["jobs"] += 1
        s["job_seconds"] += j["seconds"]
        s["first"], s["last"] = min(s["first"], j["start"]), max(s["last"], j["end"])
    total = (max(j["end"] for j in done) - min(j["start"] for j in done)).total_seconds() if done else 0.0
    return {
        "total_seconds": total, "jobs_finished": len(done), "jobs_unfinished": len(jobs) - len(done),
        "stages": {k: {"jobs": v["jobs"], "job_seconds": v["job_seconds"],
                       "span_seconds": (v["last"] - v["first"]).total_seconds()} for k, v in stages.items()},
        "jobs": [{"rule": j["rule"], "wildcards": j["wildcards"], "seconds": j["seconds"]} for j in jobs],
    }


class BenchmarkError(ValueError):
    """A file under the benchmark folder that is not a Snakemake benchmark TSV."""


def _number(path: Path, column: str, value: str, optional: bool) -> float | None:
    if optional and value in MISSING:
        return None
    try:
        x = float(value)
    except ValueError:
        x = float("nan")
    if not x >= 0:  # also catches nan
        raise BenchmarkError(f"{path}: column {column!r} is {value!r}, not a number of seconds/MB")
    return x


def read_benchmark(path: Path) -> dict[str, Any]:
    """One job's TSV -> {seconds, cpu_seconds, max_rss_mb, runs, mtime}.

    Several rows (a rule's ``repeat()``) are runs of the same job: their times add up (what the
    pipeline paid), memory is the peak. CPU or memory is None where Snakemake recorded NA."""
    try:
        lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    except (OSError, UnicodeDecodeError) as e:
        raise BenchmarkError(f"{path}: unreadable ({e})") from e
    header = lines[0].split("\t") if lines else []
    missing = [c for c in ("s", "max_rss", "cpu_time") if c not in header]
    if missing:
        raise BenchmarkError(f"{path}: not a Snakemake benchmark TSV (no column {', '.join(missing)})")
    if len(lines) < 2:
        raise BenchmarkError(f"{path}: a header but no measurement row")
    seconds, cpu, rss = 0.0, [], []
    for n, line in enumerate(lines[1:], start=2):
        row = line.split("\t")
        if len(row) != len(header):
            raise BenchmarkError(f"{path}: line {n} has {len(row)} columns, the header {len(header)}")
        rec = dict(zip(header, row))
        seconds += _number(path, "s", rec["s"], optional=False)
        cpu.append(_number(path, "cpu_time", rec["cpu_time"], optional=True))
        rss.append(_number(path, "max_rss", rec["max_rss"], optional=True))
    known_cpu = [c for c in cpu if c is not None]
    known_rss = [r for r in rss if r is not None]
    return {"seconds": seconds, "cpu_seconds": sum(known_cpu) if known_cpu else None,
            "max_rss_mb": max(known_rss) if known_rss else None, "runs": len(lines) - 1,
            "mtime": datetime.fromtimestamp(path.stat().st_mtime)}


def read_benchmarks(root: Path) -> list[dict[str, Any]]:
    """Every ``<rule>/<wildcards>.tsv`` (or ``<rule>.tsv``) under root, as jobs with rule and job name."""
    jobs = []
    for path in sorted(root.rglob("*.tsv")):
        rel = path.relative_to(root).with_suffix("")
        rule, job = (rel.parts[0], "/".join(rel.parts[1:])) if len(rel.parts) > 1 else (rel.name, "")
        jobs.append({"rule": rule, "job": job, "path": str(path), **read_benchmark(path)})
    return jobs


def summarize_benchmarks(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per stage: jobs, summed and longest wall-clock, summed CPU time, peak memory; and the totals."""
    stages: dict[str, dict[str, Any]] = {}
    for j in jobs:
        s = stages.setdefault(j["rule"], {"jobs": 0, "job_seconds": 0.0, "max_job_seconds": 0.0,
                                          "cpu_seconds": None, "max_rss_mb": None})
        s["jobs"] += 1
        s["job_seconds"] += j["seconds"]
        s["max_job_seconds"] = max(s["max_job_seconds"], j["seconds"])
        if j["cpu_seconds"] is not None:
            s["cpu_seconds"] = (s["cpu_seconds"] or 0.0) + j["cpu_seconds"]
        if j["max_rss_mb"] is not None:
            s["max_rss_mb"] = max(s["max_rss_mb"] or 0.0, j["max_rss_mb"])
    cpus = [s["cpu_seconds"] for s in stages.values() if s["cpu_seconds"] is not None]
    return {
        "jobs": len(jobs), "job_seconds": sum(j["seconds"] for j in jobs),
        "cpu_seconds": sum(cpus) if cpus else None, "stages": stages,
        "job_list": [{k: j[k] for k in ("rule", "job", "seconds", "cpu_seconds", "max_rss_mb", "runs", "path")}
                     for j in jobs],
    }


def outside_run(jobs: list[dict[str, Any]], run: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Benchmark files last written before the log's first job start or after its last job end.

    The log stamps whole seconds (truncated) and a job's file is written just before Snakemake logs
    it finished, hence the slack."""
    starts = [j["start"] for j in run]
    ends = [j["end"] for j in run if j["end"] is not None]
    if not starts:
        return []  # a log without jobs (--quiet) says nothing about which run wrote what
    lo, hi = min(starts) - timedelta(seconds=1), max(ends + starts) + timedelta(seconds=2)
    return [j for j in jobs if not lo <= j["mtime"] <= hi]


def _mmss(s: float) -> str:
    """Seconds below a minute (smoke jobs), m:ss, h:mm:ss from an hour on (a quick run's job-hours)."""
    if s < 60:
        return f"{s:.1f}s"
    s = int(s)
    if s >= 3600:
        return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{s // 60}:{s % 60:02d}"


def _opt(x: float | None, fmt: Callable[[float], str]) -> str:
    return "NA" if x is None else fmt(x)


def _print_log(log: Path, summary: dict[str, Any], jobs: bool) -> None:
    """The log-only report: per stage from the log's start/finish stamps."""
    print(f"{log}: {summary['jobs_finished']} jobs finished, {summary['jobs_unfinished']} unfinished, "
          f"wall-clock {_mmss(summary['total_seconds'])} (first job start to last job end)")
    print(f"{'stage':<15}{'jobs':>5}{'job time':>11}{'span':>9}")
    for name, s in sorted(summary["stages"].items(), key=lambda kv: -kv[1]["job_seconds"]):
        print(f"{name:<15}{s['jobs']:>5}{_mmss(s['job_seconds']):>11}{_mmss(s['span_seconds']):>9}")
    if jobs:
        for j in summary["jobs"]:
            took = _mmss(j["seconds"]) if j["seconds"] is not None else "unfinished"
            print(f"  {j['rule']:<14}{j['wildcards']:<45}{took:>10}")


def _print_benchmarks(root: Path, bench: dict[str, Any], log: Path | None, run: dict[str, Any] | None,
                      stale: int, jobs: bool) -> None:
    mb = lambda x: f"{x:.0f} MB"  # noqa: E731
    print(f"{root}: {bench['jobs']} jobs; their own wall-clock adds up to {_mmss(bench['job_seconds'])}, "
          f"CPU time to {_opt(bench['cpu_seconds'], _mmss)}")
    if run is None:
        print("run: elapsed time unknown (no Snakemake log; pass one, e.g. .snakemake/log/*.snakemake.log)")
    elif not run["jobs"]:
        print(f"run {log}: elapsed time unknown (the log records no job; was it `snakemake --quiet`?)")
    else:
        print(f"run {log}: wall-clock {_mmss(run['total_seconds'])} (first job start to last job end), "
              f"{run['jobs_finished']} jobs finished, {run['jobs_unfinished']} unfinished")
        if stale:
            print(f"note: {stale} of {bench['jobs']} benchmark files were written outside this run "
                  f"(up-to-date jobs from an earlier run, or a later run); their times are included")
    print(f"{'stage':<15}{'jobs':>5}{'job time':>11}{'share':>7}{'longest':>10}{'CPU time':>11}{'peak RSS':>11}")
    total = bench["job_seconds"] or 1.0
    for name, s in sorted(bench["stages"].items(), key=lambda kv: -kv[1]["job_seconds"]):
        print(f"{name:<15}{s['jobs']:>5}{_mmss(s['job_seconds']):>11}{s['job_seconds'] / total:>7.0%}"
              f"{_mmss(s['max_job_seconds']):>10}{_opt(s['cpu_seconds'], _mmss):>11}"
              f"{_opt(s['max_rss_mb'], mb):>11}")
    print(f"{'all jobs':<15}{bench['jobs']:>5}{_mmss(bench['job_seconds']):>11}{'':>17}"
          f"{_opt(bench['cpu_seconds'], _mmss):>11}")
    print("(CPU time and peak RSS are sampled, 30 s apart after a job's first 15 s: lower bounds)")
    if jobs:
        for j in sorted(bench["job_list"], key=lambda j: (j["rule"], -j["seconds"])):
            print(f"  {j['rule']:<14}{j['job']:<40}{_mmss(j['seconds']):>9}{_opt(j['cpu_seconds'], _mmss):>11}"
                  f"{_opt(j['max_rss_mb'], mb):>11}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", nargs="?", type=Path, help="Snakemake log (default: newest .snakemake/log/*.log)")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--benchmarks", type=Path, metavar="DIR",
                     help=f"the jobs' benchmark TSVs (default: {BENCHMARKS} when it holds any)")
    src.add_argument("--log-only", action="store_true", help="ignore benchmark files; every time from the log")
    ap.add_argument("--jobs", action="store_true", help="also list every job")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    root = args.benchmarks
    if root is None and not args.log_only and BENCHMARKS.is_dir() and any(BENCHMARKS.rglob("*.tsv")):
        root = BENCHMARKS
    if root is not None and not any(root.rglob("*.tsv")):
        print(f"stage-times: {root}: no benchmark files (*.tsv)", file=sys.stderr)
        return 2
    log = args.log
    if log is None:
        logs = sorted(Path(".snakemake/log").glob("*.snakemake.log"))
        if not logs and root is None:
            print("stage-times: no .snakemake/log/*.snakemake.log here; pass a log file", file=sys.stderr)
            return 2
        log = newest_run_log(logs)
    if log is not None and not log.is_file():
        print(f"stage-times: {log}: no such file", file=sys.stderr)
        return 2
    run_jobs = parse(log.read_text(errors="replace")) if log is not None else None
    run = summarize(run_jobs) if run_jobs is not None else None
    if root is None:
        _print_log(log, run, args.jobs)
        summary = run
    else:
        try:
            jobs = read_benchmarks(root)
        except BenchmarkError as e:
            print(f"stage-times: {e}", file=sys.stderr)
            return 2
        bench = summarize_benchmarks(jobs)
        stale = len(outside_run(jobs, run_jobs)) if run_jobs is not None else 0
        _print_benchmarks(root, bench, log, run, stale, args.jobs)
        summary = {**bench, "benchmarks": str(root), "log": str(log) if log else None,
                   "run_seconds": run["total_seconds"] if run and run["jobs"] else None,
                   "outside_run": stale, "run": run}
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
