"""Training methods. Each module exposes ``train(ctx: TrainContext) -> dict`` (see ``base``)."""

import importlib
from types import ModuleType

from dpsynth.errors import DpsynthError

METHODS = ("dp_sinkhorn", "gs_wgan", "entropic_wgan")


def get_method(name: str) -> ModuleType:
    if name not in METHODS:
        raise DpsynthError(f"unknown method {name!r} (known: {', '.join(METHODS)})")
    try:
        return importlib.import_module(f"dpsynth.methods.{name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"dpsynth.methods.{name}":
            raise DpsynthError(f"method {name!r} is not implemented yet") from None
        raise
