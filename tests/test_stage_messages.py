"""What a person reads at the end of a stage: one line saying what happened and what was written
where; the record itself stays in its file or behind ``--json`` (issue 46). No training here: the
lines are built from a summary as the training loop returns it."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from dpsynth.stages.common import finish
from dpsynth.stages.train import train_message

CTX = SimpleNamespace(name="dps_mnist", generator_path=Path("models/dps_mnist/generator.pt"),
                      privacy_path=Path("models/dps_mnist/privacy.json"),
                      checkpoint_path=Path("private/runs/dps_mnist/checkpoint.pt"))


def summary(**changes: object) -> dict:
    base = {"experiment": "dps_mnist", "steps": 900, "total_steps": 900, "finished": True, "already_done": False,
            "steps_this_run": 900, "wall_seconds": 112.4, "resumed_from": None}
    return {**base, **changes}


def test_a_finished_run_says_where_the_generator_went() -> None:
    line = train_message(CTX, summary())
    assert line == ("train dps_mnist: done, 900 steps in 1m52s (900/900) -> models/dps_mnist/generator.pt, "
                    "privacy.json and train_summary.json beside it")
    assert "resumed from step 300" in train_message(CTX, summary(steps_this_run=600, resumed_from=300))


def test_already_done_says_so_and_that_nothing_trained() -> None:
    line = train_message(CTX, summary(already_done=True, steps_this_run=0))
    assert line.startswith("train dps_mnist: already done (900 steps;") and line.endswith("nothing trained")


def test_a_slice_says_it_kept_a_checkpoint_and_released_nothing() -> None:
    line = train_message(CTX, summary(finished=False, steps=300, steps_this_run=300, wall_seconds=40.0))
    assert "stopped as asked after 300 steps in 40s (--max-steps-this-run), at step 300/900" in line
    assert "checkpoint kept in private/runs/dps_mnist/checkpoint.pt, nothing released" in line


@pytest.mark.parametrize("as_json", [False, True])
def test_finish_prints_the_line_or_the_record(as_json: bool, capsys: pytest.CaptureFixture[str]) -> None:
    finish("x: done -> a/b", {"steps": 3}, as_json)
    out = capsys.readouterr().out
    assert (json.loads(out) == {"steps": 3}) if as_json else out == "x: done -> a/b\n"
