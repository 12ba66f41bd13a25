#!/usr/bin/env python3
"""Time per job, per stage and in total of a Snakemake run, read from its log.

Snakemake's own log (``.snakemake/log/<date>.snakemake.log``, or its console output) stamps every
job's start and finish; this turns that into what the run cost where:

    python scripts/stage-times.py                       # the newest log under .snakemake/log
    python scripts/stage-times.py run.log --jobs        # also one line per job
    python scripts/stage-times.py run.log --json out.json

Per-stage "job time" sums the jobs' own wall-clock (jobs run side by side, so it can exceed the
run's wall-clock); "span" is first start to last finish of that stage.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
RULE = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):$")
JOBID = re.compile(r"^\s+jobid: (\d+)$")
WILDCARDS = re.compile(r"^\s+wildcards: (.*)$")
FINISHED = re.compile(r"^Finished jobid: (\d+)")


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


def _mmss(s: float) -> str:
    return f"{int(s // 60)}:{int(s % 60):02d}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", nargs="?", type=Path, help="Snakemake log (default: newest .snakemake/log/*.log)")
    ap.add_argument("--jobs", action="store_true", help="also list every job")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    log = args.log
    if log is None:
        logs = sorted(Path(".snakemake/log").glob("*.snakemake.log"))
        if not logs:
            print("stage-times: no .snakemake/log/*.snakemake.log here; pass a log file", file=sys.stderr)
            return 2
        log = logs[-1]
    if not log.is_file():
        print(f"stage-times: {log}: no such file", file=sys.stderr)
        return 2
    summary = summarize(parse(log.read_text(errors="replace")))
    print(f"{log}: {summary['jobs_finished']} jobs finished, {summary['jobs_unfinished']} unfinished, "
          f"wall-clock {_mmss(summary['total_seconds'])} (first job start to last job end)")
    print(f"{'stage':<15}{'jobs':>5}{'job time':>11}{'span':>9}")
    for name, s in sorted(summary["stages"].items(), key=lambda kv: -kv[1]["job_seconds"]):
        print(f"{name:<15}{s['jobs']:>5}{_mmss(s['job_seconds']):>11}{_mmss(s['span_seconds']):>9}")
    if args.jobs:
        for j in summary["jobs"]:
            took = _mmss(j["seconds"]) if j["seconds"] is not None else "unfinished"
            print(f"  {j['rule']:<14}{j['wildcards']:<45}{took:>10}")
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
