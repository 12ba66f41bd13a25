"""Progress lines: what a job's log shows while a long stage runs."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys

import pytest
import yaml

from dpsynth.progress import ENV_EVERY, Progress, format_duration
from tests.conftest import digits28_smoke_params, with_digits28

LINE = re.compile(r"^\[train (\w+)\] step (\d+)/(\d+) \(([\d.]+)%\) \| ([\d.e+-]+) step/s")


def test_lines_start_at_once_then_every_interval_and_say_done():
    out = io.StringIO()
    with Progress(10, "train x", stream=out, every=0) as p:
        for _ in range(10):
            p.update()
            p.set(eps="1.5/10")
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("[train x] step 0/10 (0.0%)") and lines[0].endswith("started")
    assert len(lines) == 1 + 10 + 1  # every update at interval 0, plus start and end
    assert "step 5/10 (50.0%)" in lines[5] and "ETA " in lines[5] and "eps 1.5/10" in lines[5]
    assert lines[-1].startswith("[train x] step 10/10 (100.0%)") and " done in " in lines[-1]


def test_a_long_interval_writes_only_the_first_and_last_line():
    out = io.StringIO()
    p = Progress(1000, "evaluate y", unit="batch", stream=out, every=3600)
    for _ in range(999):
        p.update()
    p.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and "batch 999/1000" in lines[1] and "stopped in" in lines[1]


def test_a_terminal_gets_a_bar_and_a_file_gets_lines():
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty, log = Tty(), io.StringIO()
    for stream in (tty, log):
        with Progress(3, "w", stream=stream, every=0) as p:
            p.update(3)
    assert "\r" in tty.getvalue() and "started" not in tty.getvalue()  # tqdm redraws one line
    assert "\r" not in log.getvalue() and "started" in log.getvalue()


def test_bad_interval_is_named(monkeypatch):
    monkeypatch.setenv(ENV_EVERY, "soon")
    with pytest.raises(ValueError, match=f"{ENV_EVERY}='soon'"):
        Progress(1, "x", stream=io.StringIO())


def test_durations():
    assert [format_duration(s) for s in (4.4, 75, 3725, float("inf"))] == ["4s", "1m15s", "1h02m", "?"]


def test_a_private_training_job_logs_steps_and_epsilon_but_not_its_loss(tmp_path, digits28_processed):
    """`dpsynth train --no-progress` (as Snakemake and DVC run it), with output to a file: lines
    with step/total, rate, ETA and epsilon spent against the target. The loss is computed on the
    private records without noise, so it is not in a private run's log."""
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(digits28_smoke_params("dps_digits", 12)))
    env = {**os.environ, ENV_EVERY: "0"}
    cli = [sys.executable, "-m", "dpsynth.cli"]
    with_digits28(digits28_processed, tmp_path / "data")  # the params' data root: "data"
    with open(tmp_path / "train.log", "w") as log:
        res = subprocess.run([*cli, "train", "dps_digits", "--no-progress", "--device", "cpu"], cwd=tmp_path,
                             stdout=log, stderr=subprocess.STDOUT, env=env, timeout=600)
    text = (tmp_path / "train.log").read_text()
    assert res.returncode == 0, text[-3000:]
    lines = [m for m in map(LINE.match, text.splitlines()) if m]
    assert [int(m.group(2)) for m in lines[:2]] == [0, 1] and int(lines[-1].group(2)) == 12
    assert {int(m.group(3)) for m in lines} == {12}
    with_eps = [ln for ln in text.splitlines() if LINE.match(ln) and re.search(r"\| eps [\d.]+/10\b", ln)]
    assert with_eps, text[-2000:]
    assert not re.search(r"\bloss\b", "\n".join(m.string for m in lines)), "a private loss reached the log"
    assert "\r" not in text


def test_no_eta_until_the_rate_is_measured(monkeypatch):
    """Set-up before the first unit (loading data, building a network) is not work done: the ETA
    waits for a measured rate, then counts from the first unit (issue 46: 'ETA 13h' for 5 minutes)."""
    import types

    clock = types.SimpleNamespace(now=0.0)
    monkeypatch.setattr("dpsynth.progress.time", types.SimpleNamespace(monotonic=lambda: clock.now))
    out = io.StringIO()
    p = Progress(100, "w2noise x", stream=out, every=0)
    clock.now = 600.0  # ten minutes of set-up
    p.update()
    assert "ETA" not in out.getvalue().splitlines()[-1]
    clock.now = 601.0
    p.update()
    assert "| 1 step/s | ETA 1m38s" in out.getvalue().splitlines()[-1]  # 98 left at 1 step/s
