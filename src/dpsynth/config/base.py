"""The pieces every configuration model shares: strict frozen models, names, and how a pydantic
error becomes the one line a user reads (the key path and the reason)."""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

# paper_cpu: the papers' training settings for the runs whose models fit a 2-core CPU (Reshetova et al.'s MNIST
# MLP, Figs. 5 and 11: the `reshetova_mnist` target), with the quick scale's evaluation sizes. paper_gpu: the same
# figures decided on one GPU (10 runs per cell, 20,000 steps, the packed trainer: the `reshetova_mnist_gpu` target).
ScaleName = Literal["smoke", "quick", "paper", "paper_cpu", "paper_gpu"]
SCALE_NAMES: tuple[str, ...] = get_args(ScaleName)
OptimizerName = Literal["adam", "sgd", "rmsprop"]

_NAME_RE = r"^[A-Za-z][A-Za-z0-9_.\-]*$"
Name = Annotated[str, Field(pattern=_NAME_RE, max_length=120)]


class Strict(BaseModel):
    """Unknown keys are errors (a typo such as ``epsilom`` must not be silently ignored); frozen so a
    resolved setting cannot drift after validation."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class KeyedValueError(ValueError):
    """A validation error about a key *below* the model being validated (e.g. ``grid.m`` of a sweep):
    ``format_validation`` appends ``subkey`` to pydantic's location, so the message names the full
    path ``sweeps.<name>.grid.m`` instead of stopping at ``sweeps.<name>``."""

    def __init__(self, subkey: str, message: str) -> None:
        super().__init__(message)
        self.subkey = subkey


def validation_errors(exc: ValidationError) -> list[tuple[str, str]]:
    """``(key.path, reason (got value))`` per error: pydantic's location with a ``KeyedValueError``'s
    sub-key appended, and its messages in this project's words."""
    out = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith("function-after"))
        sub = getattr(err.get("ctx", {}).get("error"), "subkey", None)
        if sub:
            loc = ".".join(x for x in (loc, sub) if x)
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        got = err.get("input")
        if err["type"] not in ("missing",) and not isinstance(got, dict | list):
            msg += f" (got {got!r})"
        out.append((loc, msg))
    return out


def format_validation(exc: ValidationError, prefix: str = "") -> str:
    """One ``key.path: reason (got value)`` per error, joined by ``; ``."""
    return "; ".join(f"{'.'.join(x for x in (prefix, loc) if x) or '(top level)'}: {msg}"
                     for loc, msg in validation_errors(exc))
