"""The cost book ``dpsynth workflow budget`` sizes a target from (``benchmarks/costs.yaml``): step rates and
job times, each measured (with the file it comes from) or an assumption stated as such.

An entry applies to a stage, optionally methods, devices, scales and settings (``when``); the first entry
that applies to a job is its cost. Values are read from the entry, or -- ``file`` + ``key`` -- from a
measurement file when it exists (``benchmarks/results/*.json``; the GPU slice ``bash benchmarks/gpu.sh`` writes),
so a new measurement changes the budget without an edit here. The file's header says what each field means.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dpsynth.errors import ConfigError

DEFAULT_COSTS = "benchmarks/costs.yaml"
BASES = ("measured", "extrapolated", "assumption")
STAGES = ("train", "warmstart", "sample", "evaluate", "evaluate_real", "prepare_data", "privatize", "w2_noise",
          "report")
DEVICES = ("gpu", "cpu")
_KEYS = {"stage", "method", "device", "scales", "when", "steps_per_s", "hours", "like", "basis", "note", "source",
         "reference", "scale_by", "threads", "file", "key", "file_unit", "file_requires"}


@dataclass(frozen=True)
class Cost:
    """One entry of the cost book, its value resolved (``like`` followed, ``file`` read)."""

    id: str
    stages: tuple[str, ...]
    methods: tuple[str, ...] | None
    devices: tuple[str, ...]
    scales: tuple[str, ...] | None
    when: dict[str, Any]
    basis: str
    note: str
    source: str  # the file the value comes from (and where in it); for an assumption, the cost book itself
    steps_per_s: float | None = None
    hours: float | None = None
    reference: dict[str, float] = field(default_factory=dict)
    scale_by: str | None = None
    threads: int | None = None

    def applies(self, stage: str, method: str | None, device: str, scale: str, traits: dict[str, Any]) -> bool:
        return (stage in self.stages and device in self.devices
                and (self.methods is None or method in self.methods)
                and (self.scales is None or scale in self.scales)
                and all(k in traits and traits[k] == v for k, v in self.when.items()))


def _tuple(value: Any, where: str, allowed: tuple[str, ...] | None = None) -> tuple[str, ...]:
    items = tuple(value) if isinstance(value, list) else (value,)
    if not items or not all(isinstance(v, str) for v in items):
        raise ConfigError(f"{where}: expected a name or a list of names, got {value!r}")
    bad = [v for v in items if allowed is not None and v not in allowed]
    if bad:
        raise ConfigError(f"{where}: unknown {bad[0]!r} (known: {', '.join(allowed or ())})")
    return items


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"{where}: expected a positive number, got {value!r}")
    return float(value)


def _from_file(raw: dict[str, Any], where: str, root: Path) -> tuple[float, str, str] | None:
    """(value, source, what was read) from the entry's measurement file, or None when the file is absent or
    fails ``file_requires`` (a dry run, another experiment): the entry's own value then stands."""
    path = root / str(raw["file"])
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{where}.file: {raw['file']} cannot be read as JSON ({exc})") from None
    for k, want in (raw.get("file_requires") or {}).items():
        if not isinstance(data, dict) or data.get(k) != want:
            return None
    value: Any = data
    for part in str(raw.get("key", "")).split("."):
        if not isinstance(value, dict) or part not in value:
            raise ConfigError(f"{where}.key: {raw['file']} has no {raw.get('key')!r}")
        value = value[part]
    number = _number(value, f"{raw['file']} {raw['key']}")
    if raw.get("file_unit") == "seconds":
        number /= 3600
    when = f" (measured {data['date']})" if "date" in data else ""
    return number, f"{raw['file']}, {raw['key']}", when


def load_costs(path: str | Path = DEFAULT_COSTS, root: Path = Path(".")) -> list[Cost]:
    """Every entry of the cost book at ``path`` (relative to ``root``, the project), in its order; a malformed
    entry is one line naming its key."""
    from dpsynth.config.loader import load_yaml
    from dpsynth.config.methods import METHOD_SPECS

    file = root / path
    if not file.is_file():
        raise ConfigError(f"{file}: no cost book there (run in the project's root, or pass --costs FILE)")
    raw = load_yaml(file)
    entries = raw.get("costs") if isinstance(raw, dict) else None
    if not isinstance(entries, dict) or not entries:
        raise ConfigError(f"{file}: expected a mapping `costs:` of named entries")
    parsed: dict[str, tuple[Cost, dict[str, Any]]] = {}
    for name, e in entries.items():
        where = f"{file}: costs.{name}"
        if not isinstance(e, dict):
            raise ConfigError(f"{where}: expected a mapping")
        unknown = sorted(set(e) - _KEYS)
        if unknown:
            raise ConfigError(f"{where}.{unknown[0]}: unknown key (known: {', '.join(sorted(_KEYS))})")
        if sum(k in e for k in ("steps_per_s", "hours", "like")) != 1:
            raise ConfigError(f"{where}: give exactly one of steps_per_s, hours or like")
        if e.get("basis") not in BASES:
            raise ConfigError(f"{where}.basis: {e.get('basis')!r} is not one of {', '.join(BASES)}")
        if not isinstance(e.get("note"), str) or not e["note"].strip():
            raise ConfigError(f"{where}.note: say what the value is (a measurement, or the assumption's reason)")
        if e["basis"] == "measured" and not e.get("source"):
            raise ConfigError(f"{where}.source: a measured value names the file it comes from")
        cost = Cost(
            id=str(name), stages=_tuple(e.get("stage"), f"{where}.stage", STAGES),
            methods=_tuple(e["method"], f"{where}.method", tuple(METHOD_SPECS)) if "method" in e else None,
            devices=_tuple(e.get("device", list(DEVICES)), f"{where}.device", DEVICES),
            scales=_tuple(e["scales"], f"{where}.scales") if "scales" in e else None,
            when=dict(e.get("when") or {}), basis=e["basis"], note=" ".join(e["note"].split()),
            source=str(e.get("source") or f"{path}, costs.{name}"),
            steps_per_s=_number(e["steps_per_s"], f"{where}.steps_per_s") if "steps_per_s" in e else None,
            hours=_number(e["hours"], f"{where}.hours") if "hours" in e else None,
            reference={k: _number(v, f"{where}.reference.{k}") for k, v in (e.get("reference") or {}).items()},
            scale_by=e.get("scale_by"), threads=int(e["threads"]) if "threads" in e else None)
        if cost.scale_by is not None and not ("like" in e or cost.scale_by in cost.reference):
            raise ConfigError(f"{where}.reference: scale_by {cost.scale_by} needs reference.{cost.scale_by}")
        if "file" in e:
            read = _from_file(e, where, root)
            if read is not None:
                value, source, when = read
                unit = "steps_per_s" if cost.steps_per_s is not None else "hours"
                cost = replace(cost, source=source, note=f"{cost.note}; read from {source}{when}", **{unit: value})
        parsed[str(name)] = (cost, e)
    return [_follow(name, parsed, file) for name in parsed]


def _follow(name: str, parsed: dict[str, tuple[Cost, dict[str, Any]]], file: Path) -> Cost:
    """An entry with ``like``: the value, reference and source of the entry it names (which must have a value
    of its own), with its own basis and note."""
    cost, raw = parsed[name]
    if "like" not in raw:
        return cost
    other = parsed.get(str(raw["like"]))
    if other is None or "like" in other[1]:
        raise ConfigError(f"{file}: costs.{name}.like: {raw['like']!r} is not an entry with a value of its own")
    base = other[0]
    return replace(cost, steps_per_s=base.steps_per_s, hours=base.hours, reference=base.reference,
                   scale_by=cost.scale_by or base.scale_by, threads=cost.threads or base.threads,
                   source=f"{base.source} (entry {base.id})")


def find_cost(costs: list[Cost], stage: str, method: str | None, device: str, scale: str,
              traits: dict[str, Any]) -> Cost | None:
    """The first entry that applies, or None."""
    return next((c for c in costs if c.applies(stage, method, device, scale, traits)), None)
