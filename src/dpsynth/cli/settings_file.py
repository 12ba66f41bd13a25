"""``dpsynth --record-settings FILE <stage> ...``: FILE checked before the stage runs, written after it.

The file is written once the stage has succeeded -- for ``train`` that is after the model was released,
for ``privatize`` after every record was noised. A FILE that cannot be written then (a directory, a
folder that is a file) used to surface only as a traceback after the release, and a FILE naming another
job (or none) was written with that job's settings, so DVC and Snakemake would record settings the job
never read. So everything that can be known before the stage runs is checked here, first: the path is a
settings file, it can be written, it names the very job this command runs, and that job exists in the
parameters file. Kept out of ``cli/__init__`` (which only wires it) so the startup stays cheap: nothing
here imports more than the settings module, and only when the option is given.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from dpsynth.errors import DpsynthError

if TYPE_CHECKING:
    from dpsynth.config import Params

#: The stage module's command and the job (stage, name) it runs; None for a command that is no pipeline job.
_POSITIONAL = {"privatize": ("privatize", "experiment"), "warmstart": ("warmstart", "experiment"),
               "train": ("train", "experiment"), "train-sweep": ("train_sweep", "sweep"),
               "sample": ("sample", "experiment"), "w2noise": ("w2_noise", "dataset")}


def command_job(args: argparse.Namespace) -> tuple[str, str] | None:
    """The pipeline job (stage, name) the parsed command runs, as its Snakemake rule and DVC stage run it;
    None for a command that is not one job (``config``, ``experiments``, several datasets at once)."""
    command = args.command
    if command in _POSITIONAL:
        stage, attr = _POSITIONAL[command]
        return stage, getattr(args, attr)
    if command == "data" and getattr(args, "data_cmd", None) == "prepare" and len(args.dataset) == 1:
        return "prepare_data", args.dataset[0]
    if command == "evaluate":
        return ("evaluate_real", args.real) if args.real else ("evaluate", args.experiment)
    if command == "report":
        return "report", ""
    return None


def _exists(params: Params, stage: str, name: str) -> bool:
    """Whether the parameters configure job ``stage``/``name`` (the names a settings file can be for)."""
    if stage == "report":
        return True
    if stage in ("prepare_data", "evaluate_real"):
        return name in params.datasets
    if stage == "w2_noise":
        return name in params.w2_noise
    if stage == "train_sweep":
        return name in params.sweeps
    return name in params.all_experiments()


def check_settings_file(args: argparse.Namespace) -> None:
    """Refuse, in one line naming FILE, a ``--record-settings FILE`` the stage could not honour; called
    before the stage reads anything (``DpsynthError``; nothing has run)."""
    from dpsynth.cli.common import params_from_args, params_path
    from dpsynth.locations import unwritable_reason
    from dpsynth.workflow.settings import job_of

    path = args.record_settings
    opt = f"--record-settings {path}"
    try:
        stage, name = job_of(path)
    except ValueError as exc:
        raise DpsynthError(f"--record-settings: {exc}") from None
    target = Path(path)
    if target.is_dir():
        raise DpsynthError(f"{opt}: is a directory, so the job's settings file cannot be written there; remove it "
                           "or name the file (nothing was run)")
    reason = unwritable_reason(target.parent)
    if reason is not None:
        raise DpsynthError(f"{opt}: {reason}; the job's settings file could not be written (nothing was run)")
    job = command_job(args)
    if job is None:
        raise DpsynthError(f"{opt}: `dpsynth {args.command}` is not one pipeline job, so it has no settings file "
                           "to record (nothing was run)")
    if job != (stage, name):
        raise DpsynthError(f"{opt}: the settings file of job {stage}/{name or stage}, but this command runs job "
                           f"{job[0]}/{job[1] or job[0]}; name the command's own file, "
                           f"results/settings/{job[0]}/{job[1] or job[0]}.json (nothing was run)")
    params = params_from_args(args)
    assert params is not None
    if not _exists(params, stage, name):
        raise DpsynthError(f"{opt}: {params_path(args)} configures no job {stage}/{name} (nothing was run)")


def record(args: argparse.Namespace) -> None:
    """Write the job's settings (``dpsynth.workflow.settings.record_settings``), from the same parameters
    file and scale the stage read."""
    from dpsynth.cli.common import params_from_args
    from dpsynth.workflow.settings import record_settings

    record_settings(params_from_args(args), args.record_settings)
