"""Our side of every table: read a run's ``metrics.json`` and turn it into cells.

The wording of a cell that holds no number is fixed here so every table says the same
thing for the same reason, and a blank or invented cell cannot happen: a run that was not
run says so, a metric the run did not compute says so, an FID that could not be computed
says "unavailable" (its reason goes into the table's notes).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpsynth.errors import DataError
from dpsynth.paths import metrics_file, real_metrics_file
from dpsynth.privacy.randomness import NOT_PRIVATE_LABEL, is_reproducible

NOT_RUN = "not run"
REPORTED_ONLY = "reported only"
NOT_REPORTED = "not reported"
PLOT_ONLY = "not reported (plot only)"
NOT_EVALUATED = "not evaluated"
UNAVAILABLE = "unavailable"
NOT_APPLICABLE = "n/a"

#: Metric id -> column label. Accuracies are printed in percent like the papers.
METRICS = {"fid": "FID", "logreg": "LogReg (%)", "mlp": "MLP (%)", "cnn": "CNN (%)"}

#: Epsilon conventions in the order tables list them; unknown ones follow, sorted.
CONVENTION_ORDER = ("non_private", "rdp_classic", "rdp_modern", "pld",
                    "as_published.rdp_classic", "as_published.rdp_modern", "as_published.pld",
                    "as_published_poisson.rdp_classic", "as_published_poisson.rdp_modern",
                    "sound.rdp_classic", "sound.rdp_modern", "sound.pld")


@dataclass(frozen=True)
class Run:
    """One evaluated run: its name, where its metrics live, and the parsed metrics."""

    name: str
    path: Path
    metrics: dict[str, Any]

    @property
    def scale(self) -> str:
        return str(self.metrics.get("scale") or "unknown")

    @property
    def privacy(self) -> dict[str, Any] | None:
        p = self.metrics.get("privacy")
        return p if isinstance(p, dict) else None

    def epsilons(self) -> dict[str, float]:
        """Every reported (convention -> epsilon); empty for the real-data rows."""
        eps = (self.privacy or {}).get("epsilon") or {}
        if not isinstance(eps, dict):
            raise DataError(f"{self.path}: privacy.epsilon must be a mapping, got {type(eps).__name__}")
        return {str(k): float(v) for k, v in eps.items()}


def read_run(path: Path, name: str) -> Run | None:
    """The run whose metrics are at ``path``; None when it was not run (no file)."""
    if not path.is_file():
        return None
    try:
        metrics = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"{path}: not a readable metrics file: {exc}") from None
    if not isinstance(metrics, dict):
        raise DataError(f"{path}: expected a JSON object, got {type(metrics).__name__}")
    if metrics.get("privacy") is not None:  # real-data rows have none; everything else is recomputed
        from dpsynth.privacy.verify import verify_report

        verify_report(metrics["privacy"], f"{path} (its 'privacy' report)")
    return Run(name, path, metrics)


class RunStore:
    """Reads ``{results}/runs/{experiment}/metrics.json`` (and ``real/{dataset}/``) once per run."""

    def __init__(self, results: Path) -> None:
        self.results = Path(results)
        self._cache: dict[str, Run | None] = {}

    def experiment(self, name: str) -> Run | None:
        if name not in self._cache:
            self._cache[name] = read_run(metrics_file(self.results, name), name)
        return self._cache[name]

    def real(self, dataset: str) -> Run | None:
        key = f"real:{dataset}"
        if key not in self._cache:
            self._cache[key] = read_run(real_metrics_file(self.results, dataset), f"real_{dataset}")
        return self._cache[key]


# --------------------------------------------------------------------------- formatting


def fmt_number(x: float, digits: int) -> str:
    if math.isinf(x):
        return "∞" if x > 0 else "-∞"
    if math.isnan(x):
        return "nan"
    return f"{x:.{digits}f}"


def fmt_mean_std(mean: float, std: float, digits: int = 1) -> str:
    """``82.0 ± 1.3``: every measured number of ours is printed as mean ± std."""
    return f"{fmt_number(mean, digits)} ± {fmt_number(std, digits)}"


def _stat(rec: Any, where: str) -> tuple[float, float]:
    if not isinstance(rec, dict) or "mean" not in rec:
        raise DataError(f"{where}: expected a record with 'mean' and 'std', got {rec!r}")
    return float(rec["mean"]), float(rec.get("std", 0.0))


def metric_cell(run: Run | None, metric: str) -> str:
    """FID or a classifier accuracy (percent) of one run, or the reason there is none."""
    if run is None:
        return NOT_RUN
    if metric == "fid":
        fid = run.metrics.get("fid")
        if not isinstance(fid, dict):
            return NOT_EVALUATED
        if not fid.get("available"):
            return UNAVAILABLE
        return fmt_mean_std(*_stat(fid, f"{run.path}: fid"), digits=1)
    rec = (run.metrics.get("classifiers") or {}).get(metric)
    if rec is None:
        return NOT_EVALUATED
    mean, std = _stat(rec, f"{run.path}: classifiers.{metric}")
    return fmt_mean_std(100.0 * mean, 100.0 * std, digits=1)


def metric_value(run: Run | None, metric: str) -> float | None:
    """The mean as a plain number (accuracy in percent) for figures; None where there is none."""
    if run is None:
        return None
    if metric == "fid":
        fid = run.metrics.get("fid")
        return float(fid["mean"]) if isinstance(fid, dict) and fid.get("available") else None
    rec = (run.metrics.get("classifiers") or {}).get(metric)
    return 100.0 * float(rec["mean"]) if isinstance(rec, dict) and "mean" in rec else None


def ordered_conventions(names: set[str] | list[str]) -> list[str]:
    names = set(names)
    known = [c for c in CONVENTION_ORDER if c in names]
    return known + sorted(names - set(known))


def epsilon_cell(run: Run | None, *, real: bool = False) -> str:
    """Every convention the run's privacy report holds, e.g. ``rdp_classic=10.00; rdp_modern=9.41 (δ=1e-05)``."""
    if run is None:
        return NOT_RUN
    if real:
        return "∞ (real data)"
    eps = run.epsilons()
    if not eps:
        return NOT_REPORTED
    if set(eps) == {"non_private"}:
        return "∞ (non-private)"
    body = "; ".join(f"{c}={fmt_number(eps[c], 2)}" for c in ordered_conventions(list(eps)))
    delta = (run.privacy or {}).get("delta")
    cell = f"{body} (δ={delta:g})" if isinstance(delta, int | float) and delta > 0 else body
    return f"{cell} [{NOT_PRIVATE_LABEL}]" if is_reproducible(run.privacy) else cell


def sigma_cell(run: Run | None) -> str:
    if run is None:
        return NOT_RUN
    sigma = (run.privacy or {}).get("sigma")
    return NOT_APPLICABLE if sigma is None else f"{float(sigma):.4g}"


def scale_cell(run: Run | None, expected: str) -> str:
    """The scale the run ran at, flagged when it is not the scale being reported."""
    if run is None:
        return NOT_RUN
    return run.scale if run.scale == expected else f"{run.scale} (report scale: {expected})"


def fid_reason(run: Run | None) -> str | None:
    fid = run.metrics.get("fid") if run is not None else None
    if isinstance(fid, dict) and not fid.get("available"):
        return str(fid.get("reason") or "no reason recorded")
    return None
