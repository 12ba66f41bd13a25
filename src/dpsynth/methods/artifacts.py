"""Writing a run's files so a failure names them, and the released generator: saving, loading
(an untrusted file), and whether a finished run's release is intact ("already done")."""

from __future__ import annotations

import errno
import json
import os
import pickle
import shutil
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from dpsynth.errors import DpsynthError
from dpsynth.io import atomic_path, naming_failed_writes, sha256_file
from dpsynth.methods.context import TrainContext


@contextmanager
def writing_to(path: Path) -> Iterator[None]:
    """Make a failed write name ``path``: a full disk reaches us as an ``OSError`` without a file
    name (a write into an open handle) or one naming an internal temporary, or -- from
    ``torch.save`` -- as a ``RuntimeError`` ("PytorchStreamWriter failed writing file ...",
    "unexpected pos ...") that carries no errno at all. The CLI can tell the user which output
    did not fit only if the error names it."""
    try:
        with naming_failed_writes(path):
            yield
    except RuntimeError as exc:
        if not _is_torch_write_failure(exc):
            raise
        raise _write_failure(Path(path), exc) from exc


def _is_torch_write_failure(exc: RuntimeError) -> bool:
    text = str(exc)
    return any(s in text for s in ("PytorchStreamWriter failed writing", "unexpected pos", "file write failed"))


def _write_failure(path: Path, exc: RuntimeError) -> Exception:
    """torch dropped the errno: take it from a chained OSError, else from the free space left."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno is not None:
            return OSError(cause.errno, os.strerror(cause.errno), str(path))
        cause = cause.__cause__ or cause.__context__
    try:
        full = shutil.disk_usage(path.parent).free < (1 << 20)
    except OSError:
        full = False
    if full:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return DpsynthError(f"{path}: writing failed ({first}); check the free space, quota and permissions there")


def torch_save(obj: Any, path: Path) -> None:
    """Atomically ``torch.save`` into ``path`` with write failures naming it.

    Into a handle, not a path: torch names the zip's folder after the (random) temp file name,
    which would make identical content hash differently."""
    with writing_to(path), atomic_path(path, suffix=".pt") as tmp, open(tmp, "wb") as fh:
        torch.save(obj, fh)


def _load_failure(exc: BaseException, weights_only: bool) -> str:
    """Why torch could not read a file, in words -- never torch's own text: for a weights-only
    failure that advises ``weights_only=False``, i.e. unpickling an untrusted file."""
    text = str(exc)
    if isinstance(exc, pickle.UnpicklingError):
        return "not a PyTorch file of tensors and plain data" if weights_only else "not a PyTorch file"
    if "zip archive" in text or "central directory" in text or isinstance(exc, EOFError):
        return "truncated or corrupt archive"
    if isinstance(exc, (IsADirectoryError, PermissionError)):
        return exc.strerror or type(exc).__name__
    return type(exc).__name__


def torch_load(path: Path, what: str, remedy: str, *, weights_only: bool = True,
               device: str | torch.device = "cpu") -> Any:
    """``torch.load`` whose failure is a ``DpsynthError`` naming ``path``, saying it is not a
    valid ``what`` and what to do (``remedy``). torch's warnings are silenced: they too suggest
    loosening ``weights_only``."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return torch.load(path, map_location=device, weights_only=weights_only)
    except Exception as exc:  # torch raises several unrelated types for a corrupt file
        raise DpsynthError(f"{path}: not a valid {what} ({_load_failure(exc, weights_only)}); {remedy}") from None


def release_meta(ctx: TrainContext, output_range: str, **extra: Any) -> dict[str, Any]:
    """The meta record every released generator carries (what sampling needs to rebuild and batch it,
    and which run it came from); ``extra`` adds a method's own keys (e.g. GS-WGAN's ``released``)."""
    return {"num_classes": ctx.data.num_classes, "record_shape": list(ctx.data.record_shape),
            "output_range": output_range, "sample_batch_size": 500, "experiment": ctx.name, "scale": ctx.scale,
            "seed": ctx.seed, **extra}


def save_generator(path: Path, module: torch.nn.Module, arch: dict[str, Any], meta: dict[str, Any]) -> None:
    """Write the released generator: enough to rebuild it with ``dpsynth.nets.build_generator``.

    ``arch`` = ``{"name": ..., "kwargs": {...}}``; ``meta`` holds ``num_classes``,
    ``record_shape``, ``output_range`` ("tanh" -> [-1, 1] or "sigmoid" -> [0, 1]) and
    ``sample_batch_size`` (generators with batch statistics sample in fixed batches).
    """
    for key in ("num_classes", "record_shape", "output_range"):
        if key not in meta:
            raise ValueError(f"generator meta needs {key!r}")
    state = {k: v.detach().cpu() for k, v in module.state_dict().items()}
    torch_save({"format": "dpsynth-generator/1", "arch": arch, "meta": meta, "state_dict": state}, path)


def load_generator(path: Path, device: str | torch.device = "cpu") -> tuple[torch.nn.Module, dict[str, Any]]:
    """Rebuild a released generator (``weights_only=True``: a released file is untrusted input).

    Any defect is a ``DpsynthError`` naming the file: sampling must never start from a file
    that is not what `dpsynth train` wrote."""
    from dpsynth.nets import build_generator

    path = Path(path)
    remedy = f"re-run `dpsynth train {path.parent.name}` to rebuild it"
    if not path.is_file():
        raise DpsynthError(f"{path}: generator not found (run `dpsynth train {path.parent.name}` first)")
    blob = torch_load(path, "dpsynth generator", remedy, device=device)

    def invalid(why: str) -> DpsynthError:
        return DpsynthError(f"{path}: not a valid dpsynth generator ({why}); {remedy}")

    if not isinstance(blob, dict) or blob.get("format") != "dpsynth-generator/1":
        raise invalid("no dpsynth-generator/1 format tag")
    arch, meta, state = blob.get("arch"), blob.get("meta"), blob.get("state_dict")
    if not (isinstance(arch, dict) and isinstance(arch.get("name"), str) and isinstance(arch.get("kwargs", {}), dict)):
        raise invalid("no architecture record")
    if not isinstance(meta, dict) or any(k not in meta for k in ("num_classes", "record_shape", "output_range")):
        raise invalid("incomplete meta record")
    if not isinstance(state, dict):
        raise invalid("no weights")
    try:
        module = build_generator(arch["name"], **arch.get("kwargs", {}))
        module.load_state_dict(state)
    except Exception as exc:  # unknown architecture, bad kwargs, weights of another shape
        raise invalid(f"its weights do not fit its architecture: {type(exc).__name__}") from None
    module.to(device).eval()
    return module, meta


def release_record(ctx: TrainContext) -> dict[str, str]:
    """What a finished checkpoint remembers of its release: the generator's hash. The checkpoint
    is tied to the configuration fingerprint, so the hash ties the released file to it too --
    without releasing the fingerprint, which hashes the private training data."""
    return {"generator_sha256": sha256_file(ctx.generator_path)}


def release_problem(ctx: TrainContext, state: dict[str, Any]) -> str | None:
    """Why the release of a finished run (``state``: its checkpoint, already matched to this
    configuration) is not intact -- None when it is. A run reports ``already_done`` only when
    this is None; otherwise it re-releases from the checkpoint."""
    gen = ctx.generator_path
    for path in (gen, ctx.privacy_path, ctx.public_log_path, *ctx.also_released):
        if not path.is_file():
            return f"{path} is missing"
    try:
        load_generator(gen)
    except DpsynthError as exc:
        return str(exc)
    recorded = (state.get("release") or {}).get("generator_sha256")
    if recorded is None:
        return f"{ctx.checkpoint_path} records no hash of the released generator"
    if sha256_file(gen) != recorded:
        return f"{gen} is not the generator this configuration released"
    for path in (ctx.privacy_path, *(p for p in ctx.also_released if p.suffix == ".json")):
        try:
            with open(path, encoding="utf-8") as fh:
                ok = isinstance(json.load(fh), dict)
        except (OSError, ValueError):
            ok = False
        if not ok:
            return f"{path} is unreadable"
    return None


#: Marks a cell checkpoint a batched sweep wrote (``methods.dp_sinkhorn.together``): finished, not yet released.
TOGETHER_KEY = "trained_together"


def already_done(ctx: TrainContext, state: dict[str, Any] | None) -> bool:
    """True when ``state`` is a finished checkpoint whose release is intact. A finished one whose
    release is not is re-released from the checkpoint (same weights, no new training): say so."""
    if state is None or not state.get("done"):
        return False
    if state.get(TOGETHER_KEY) and state.get("release") is None:
        print(f"dpsynth: {ctx.name} was trained by the batched sweep {state[TOGETHER_KEY]!r}; releasing it from "
              f"its finished checkpoint {ctx.checkpoint_path}", file=sys.stderr)
        return False
    problem = release_problem(ctx, state)
    if problem is None:
        return True
    print(f"dpsynth: {problem}; re-releasing from the finished checkpoint {ctx.checkpoint_path}", file=sys.stderr)
    return False
