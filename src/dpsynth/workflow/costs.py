"""The cost book ``dpsynth workflow budget`` sizes a target from (``benchmarks/costs.yaml``): step rates and
job times, each measured (with the file it comes from) or an assumption stated as such.

An entry applies to a stage, optionally methods, devices, scales and settings (``when``); the first entry
that applies to a job is its cost. Values are read from the entry, or -- ``file`` + ``key`` -- from a
measurement file when it exists (``benchmarks/results/*.json``; the GPU slice ``bash benchmarks/gpu.sh`` writes),
so a new measurement changes the budget without an edit here. The file's header says what each field means.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from dpsynth.errors import ConfigError

DEFAULT_COSTS = "benchmarks/costs.yaml"
BASES = ("measured", "extrapolated", "assumption")
STAGES = ("train", "train_sweep", "warmstart", "sample", "evaluate", "evaluate_real", "prepare_data", "privatize",
          "w2_noise", "report")
DEVICES = ("gpu", "cpu")
_KEYS = {"stage", "method", "device", "scales", "when", "steps_per_s", "hours", "like", "basis", "note", "source",
         "reference", "scale_by", "threads", "file", "key", "file_unit", "file_requires", "packed"}
#: What a value of the book may be, by unit: a rate or a time outside these is a typo or a unit mix-up (a step
#: rate of 1e-300 budgets a job at 10^296 hours; .inf at 0.00 h), refused in one line. Wide enough for any real
#: device: the fastest step measured is ~1,800 steps/s (docs/performance.md), the longest job a few days.
RANGES = {"steps_per_s": (1e-3, 1e6), "hours": (1e-4, 1e4), "reference": (1e-6, 1e12), "seconds": (1e-3, 3.6e7)}


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
    #: a packed job's fit (``packed``): seconds per packed step of K configurations, T(K) = a + b K
    packed: tuple[float, float] | None = None

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


def _number(value: Any, where: str, unit: str) -> float:
    """A finite positive number within ``RANGES[unit]``, or one line naming where it is and its value."""
    low, high = RANGES[unit]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not low <= value <= high:
        shown = f"{value:.4g}" if isinstance(value, float) else repr(value)
        raise ConfigError(f"{where}: {shown} is not a number of {unit} from {low:g} to {high:g}")
    return float(value)


def _threads(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1024:
        raise ConfigError(f"{where}: {value!r} is not a thread count from 1 to 1024")
    return value


def _read_key(data: Any, key: str, file: str, where: str) -> Any:
    value: Any = data
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            raise ConfigError(f"{where}: {file} has no {key!r}")
        value = value[part]
    return value


def _json(file: str, where: str, root: Path) -> Any:
    try:
        return json.loads((root / file).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{where}: {file} cannot be read as JSON ({exc})") from None


def _from_file(raw: dict[str, Any], where: str, root: Path, unit: str) -> tuple[float, str, str] | None:
    """(value, source, what was read) from the entry's measurement file -- the first of ``file`` (a name or a
    list: your own measurement first, then the committed one) that exists and holds ``file_requires`` -- or
    None when none does (a dry run, another experiment): the entry's own value then stands."""
    files = raw["file"] if isinstance(raw["file"], list) else [raw["file"]]
    for file in map(str, files):
        if not (root / file).is_file():
            continue
        data = _json(file, f"{where}.file", root)
        if not all(isinstance(data, dict) and data.get(k) == want
                   for k, want in (raw.get("file_requires") or {}).items()):
            continue
        value = _read_key(data, str(raw.get("key", "")), file, f"{where}.key")
        seconds = raw.get("file_unit") == "seconds"
        number = _number(value, f"{where}.key: {file} {raw['key']}", "seconds" if seconds else unit)
        when = f" (measured {data['date'][:10]})" if "date" in data else ""
        return (number / 3600 if seconds else number), f"{file}, {raw['key']}", when
    return None


def _packed_fit(raw: Any, where: str, root: Path) -> tuple[tuple[float, float], str, str]:
    """((a, b) seconds, source, date) of ``packed: {file, points: [{k, key}, ...]}``: the packed step's rate
    measured at two or more K (configurations per step), as seconds per step T(K) = 1 / rate, fitted by least
    squares to T(K) = a + b K."""
    if not isinstance(raw, dict) or not isinstance(raw.get("points"), list) or len(raw["points"]) < 2 \
            or not isinstance(raw.get("file"), str):
        raise ConfigError(f"{where}: expected {{file: <measurement JSON>, points: [{{k: K, key: <its steps/s>}}, "
                          "...]}} with two or more K")
    data = _json(raw["file"], f"{where}.file", root)
    ks, ts = [], []
    for i, point in enumerate(raw["points"]):
        k = point.get("k") if isinstance(point, dict) else None
        if isinstance(k, str) and "." in k:  # K read from the file too
            k = _read_key(data, k, raw["file"], f"{where}.points[{i}].k")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ConfigError(f"{where}.points[{i}].k: {k!r} is not a number of configurations (1 or more)")
        rate = _number(_read_key(data, str(point.get("key")), raw["file"], f"{where}.points[{i}].key"),
                       f"{where}.points[{i}].key: {raw['file']} {point.get('key')}", "steps_per_s")
        ks.append(k)
        ts.append(1.0 / rate)
    if len(set(ks)) < 2:
        raise ConfigError(f"{where}.points: the fit needs two different K, got {ks}")
    mk, mt = sum(ks) / len(ks), sum(ts) / len(ts)
    b = sum((k - mk) * (t - mt) for k, t in zip(ks, ts)) / sum((k - mk) ** 2 for k in ks)
    a = mt - b * mk
    if not (a > 0 and b > 0):
        raise ConfigError(f"{where}: T(K) = a + b K through {raw['file']}'s points gives a = {a:.3g} s, "
                          f"b = {b:.3g} s: not a packed step that costs more with more configurations")
    when = f" (measured {data['date'][:10]})" if isinstance(data, dict) and "date" in data else ""
    keys = ", ".join(f"K = {k}: {p['key']}" for k, p in zip(ks, raw["points"]))
    return (a, b), f"{raw['file']}, {keys}", when


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
        if sum(k in e for k in ("steps_per_s", "hours", "like", "packed")) != 1:
            raise ConfigError(f"{where}: give exactly one of steps_per_s, hours, like or packed")
        if e.get("basis") not in BASES:
            raise ConfigError(f"{where}.basis: {e.get('basis')!r} is not one of {', '.join(BASES)}")
        if not isinstance(e.get("note"), str) or not e["note"].strip():
            raise ConfigError(f"{where}.note: say what the value is (a measurement, or the assumption's reason)")
        if e["basis"] == "measured" and not (e.get("source") or e.get("file")):
            raise ConfigError(f"{where}.source: a measured value names the file it comes from (source or file)")
        cost = Cost(
            id=str(name), stages=_tuple(e.get("stage"), f"{where}.stage", STAGES),
            methods=_tuple(e["method"], f"{where}.method", tuple(METHOD_SPECS)) if "method" in e else None,
            devices=_tuple(e.get("device", list(DEVICES)), f"{where}.device", DEVICES),
            scales=_tuple(e["scales"], f"{where}.scales") if "scales" in e else None,
            when=dict(e.get("when") or {}), basis=e["basis"], note=" ".join(e["note"].split()),
            source=str(e.get("source") or f"{path}, costs.{name}"),
            steps_per_s=_number(e["steps_per_s"], f"{where}.steps_per_s", "steps_per_s") if "steps_per_s" in e
            else None,
            hours=_number(e["hours"], f"{where}.hours", "hours") if "hours" in e else None,
            reference={k: _number(v, f"{where}.reference.{k}", "reference")
                       for k, v in (e.get("reference") or {}).items()},
            scale_by=e.get("scale_by"), threads=_threads(e["threads"], f"{where}.threads") if "threads" in e else None)
        if "packed" in e and cost.stages != ("train_sweep",):
            raise ConfigError(f"{where}: packed prices a train_sweep job and nothing else (stage: train_sweep, alone)")
        if cost.scale_by is not None and not ("like" in e or cost.scale_by in cost.reference):
            raise ConfigError(f"{where}.reference: scale_by {cost.scale_by} needs reference.{cost.scale_by}")
        if "packed" in e:
            fit, source, when = _packed_fit(e["packed"], f"{where}.packed", root)
            cost = replace(cost, packed=fit, source=source, note=f"{cost.note}; read from {source}{when}")
        if "file" in e:
            read = _from_file(e, where, root, "steps_per_s" if cost.steps_per_s is not None else "hours")
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
    return replace(cost, steps_per_s=base.steps_per_s, hours=base.hours, reference=cost.reference or base.reference,
                   scale_by=cost.scale_by or base.scale_by, threads=cost.threads or base.threads,
                   source=f"{base.source} (entry {base.id})")


def find_cost(costs: list[Cost], stage: str, method: str | None, device: str, scale: str,
              traits: dict[str, Any]) -> Cost | None:
    """The first entry that applies, or None."""
    return next((c for c in costs if c.applies(stage, method, device, scale, traits)), None)
