"""Our side of every table: read a run's ``metrics.json`` (validated through its format,
``dpsynth.evaluate.record.MetricsRecord``) and turn it into cells.

The wording of a cell that holds no number is fixed here so every table says the same
thing for the same reason, and a blank or invented cell cannot happen: a run that was not
run says so, a metric the run did not compute says so, an FID that could not be computed
says "unavailable" (its reason goes into the table's notes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpsynth.errors import DataError
from dpsynth.evaluate.record import REAL_DATA, MetricsError, MetricsRecord
from dpsynth.paths import REAL, RUNS, metrics_file, real_metrics_file
from dpsynth.privacy.randomness import privacy_label

NOT_RUN = "not run"
REPORTED_ONLY = "reported only"
NOT_REPORTED = "not reported"
PLOT_ONLY = "not reported (plot only)"
NOT_EVALUATED = "not evaluated"
UNAVAILABLE = "unavailable"
NOT_APPLICABLE = "n/a"

#: Metric id -> column label. Accuracies are printed in percent like the papers.
METRICS = {"fid": "FID", "logreg": "LogReg (%)", "mlp": "MLP (%)", "cnn": "CNN (%)"}
#: Ours only, read from inside ``fid`` (``dpsynth.evaluate.fidelity``): KID, printed x 1000 like the
#: accuracies' percent, FID-infinity, and Kynkäänniemi et al.'s precision and recall, printed as fractions.
#: None of the papers whose tables we rebuild reports them, so they have no paper column; they are apart
#: from ``METRICS`` because the figures plot those against the papers'.
SMALL_N_METRICS = {"kid": "KID (×10³)", "fid_inf": "FID∞", "precision": "Precision", "recall": "Recall"}
#: printed value = scale x mean, digits
_SCALE = {"kid": (1000.0, 2), "fid_inf": (1.0, 1), "precision": (1.0, 2), "recall": (1.0, 2)}

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


def _read_metrics(path: Path) -> dict[str, Any]:
    from dpsynth.io import read_json

    metrics = read_json(path)  # a DataError naming the file (and line/column) when it is damaged
    if not isinstance(metrics, dict):
        raise DataError(f"{path}: expected a JSON object, got {type(metrics).__name__}")
    return metrics


def _verify(path: Path, metrics: dict[str, Any]) -> None:
    if metrics.get("privacy") is not None:  # real-data rows have none; everything else is recomputed
        from dpsynth.privacy.verify import verify_report

        verify_report(metrics["privacy"], f"{path} (its 'privacy' report)")


def read_run(path: Path, name: str) -> Run | None:
    """The run whose metrics are at ``path``; None when it was not run (no file)."""
    if not path.is_file():
        return None
    metrics = _read_metrics(path)
    _verify(path, metrics)
    return Run(name, path, metrics)


def validate_metrics(path: Path, metrics: dict[str, Any], *, real: str | None = None,
                     configured: tuple[str, str] | None = None) -> dict[str, Any]:
    """Check one metrics.json before any table uses it; return it (dataset/method filled, see below).

    A file missing ``classifiers`` (or with ``privacy: "oops"``) would otherwise print "not
    evaluated" or "not reported" cells over a good table; the report refuses it instead, naming the
    file and the key (the checks are ``MetricsRecord.from_dict``'s, the format's owner). ``real`` is
    the dataset of a real-data row (``results/real/{dataset}/``), whose ``privacy`` is null; every
    other run's is a mapping. ``configured`` is (dataset, method) from params.yaml for a configured
    experiment: a file that lacks those keys (hand-made fixtures, older evaluate output) takes them
    from there, since the tables never read them from the file."""
    exp = path.parent.name
    fix = f"re-run `dpsynth evaluate {'--real ' + real if real else exp}`"
    out = dict(metrics)
    if real is not None:
        configured = (real, REAL_DATA)
    if configured is not None:
        for key, value in zip(("dataset", "method"), configured):
            out.setdefault(key, value)
    try:
        MetricsRecord.from_dict(out, experiment=f"real_{real}" if real is not None else exp,
                                dataset=configured[0] if configured is not None else None, real=real is not None)
    except MetricsError as exc:
        raise DataError(f"{path}: key {exc.key!r} {exc.why}; refusing to build the report from it "
                        f"(nothing was written; {fix})") from None
    return out


def with_public_training_split(metrics: dict[str, Any], private: Path, experiment: str) -> dict[str, Any]:
    """A run's metrics with GS-WGAN's IS and training-split FID read back from under the private root
    (``paths.gswgan_train_file``, written by its evaluate job), each labelled ``paths.PUBLIC_TRAINING_SPLIT``: for a
    dataset ``data.public`` declares public, as GS-WGAN's Table 1 shows them. Unchanged when the run has no such
    record or the file is not there (the table then says where it would be); a damaged file is refused by name."""
    import json

    from dpsynth.evaluate.gswgan_protocol import TRAINING_SPLIT_KEYS
    from dpsynth.evaluate.record import GS_WGAN
    from dpsynth.paths import PUBLIC_TRAINING_SPLIT, gswgan_train_file

    gs = (metrics.get("protocols") or {}).get(GS_WGAN)
    if not isinstance(gs, dict) or not all("private" in (gs.get(k) or {}) for k in TRAINING_SPLIT_KEYS):
        return metrics
    where = gswgan_train_file(private, experiment)
    try:
        kept = json.loads(where.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return metrics
    except (OSError, ValueError) as exc:
        raise DataError(f"{where}: not readable JSON ({exc.__class__.__name__}); re-run `dpsynth evaluate "
                        f"{experiment}`") from None
    kept = kept.get("gswgan_train") if isinstance(kept, dict) else None
    if not isinstance(kept, dict) or not all(isinstance(kept.get(k), dict) for k in TRAINING_SPLIT_KEYS):
        raise DataError(f"{where}: lacks {' and '.join(TRAINING_SPLIT_KEYS)}; re-run `dpsynth evaluate {experiment}`")
    shown = {k: {**kept[k], "privacy": PUBLIC_TRAINING_SPLIT} for k in TRAINING_SPLIT_KEYS}
    return {**metrics, "protocols": {**metrics["protocols"], GS_WGAN: {**gs, **shown}}}


class RunStore:
    """Reads ``{results}/runs/{experiment}/metrics.json`` (and ``real/{dataset}/``) once per run."""

    def __init__(self, results: Path) -> None:
        self.results = Path(results)
        self._cache: dict[str, Run | None] = {}
        self._complete = False  # True once every metrics.json under results/ is loaded (see load_all)

    @classmethod
    def load_all(cls, results: Path, configured: dict[str, tuple[str, str]] | None = None, *,
                 private: Path | None = None, public: frozenset[str] = frozenset()) -> RunStore:
        """Read, verify and validate EVERY metrics.json under ``results/runs`` and ``results/real``
        before anything is written: one bad file refuses the whole report (naming it), so a
        previous good set of tables is never replaced by one built from a damaged file. The
        store then never reads a file again (what was validated is what is printed).
        ``configured`` maps experiment -> (dataset, method) from params.yaml. With ``private`` (the private
        root), a run on a dataset in ``public`` (``data.public`` as the report is built) gets GS-WGAN's
        training-split statistics back from where its evaluate job kept them (:func:`with_public_training_split`):
        the tables show them labelled; no released file holds them."""
        store = cls(results)
        configured = configured or {}
        for kind, root in ((RUNS, store.results / RUNS), (REAL, store.results / REAL)):
            for path in sorted(root.glob("*/metrics.json")) if root.is_dir() else []:
                sub = path.parent.name
                name, key = (sub, sub) if kind == RUNS else (f"real_{sub}", f"real:{sub}")
                metrics = validate_metrics(path, _read_metrics(path), real=sub if kind == REAL else None,
                                           configured=configured.get(sub) if kind == RUNS else None)
                _verify(path, metrics)  # after the shape check, so 'privacy: "oops"' is named as a bad key
                if kind == RUNS and private is not None and metrics.get("dataset") in public:
                    metrics = with_public_training_split(metrics, Path(private), sub)
                store._cache[key] = Run(name, path, metrics)
        store._complete = True
        return store

    def runs(self) -> list[Run]:
        """Every loaded run of ``results/runs`` (not the real-data rows), sorted by name."""
        return sorted((r for k, r in self._cache.items() if r is not None and not k.startswith("real:")),
                      key=lambda r: r.name)

    def _get(self, key: str, path: Path, name: str) -> Run | None:
        if key not in self._cache:
            self._cache[key] = None if self._complete else read_run(path, name)
        return self._cache[key]

    def experiment(self, name: str) -> Run | None:
        return self._get(name, metrics_file(self.results, name), name)

    def real(self, dataset: str) -> Run | None:
        return self._get(f"real:{dataset}", real_metrics_file(self.results, dataset), f"real_{dataset}")


# --------------------------------------------------------------------------- formatting


def fmt_number(x: float, digits: int) -> str:
    if math.isinf(x):
        return "∞" if x > 0 else "-∞"
    if math.isnan(x):
        return "nan"
    return f"{x:.{digits}f}"


def fmt_spread(std: float, digits: int) -> str:
    """A spread at ``digits`` decimals, or, where that prints as zero, with its first significant digit (0.003):
    a measured spread never reads "± 0.00" (issue 64; an exact zero is the caller's "all equal")."""
    if not math.isfinite(std) or std == 0:
        return fmt_number(std, digits)
    text = fmt_number(std, digits)
    return text if any(c in "123456789" for c in text) else f"{std:.1g}"


def _sets_of(rec: dict[str, Any]) -> int:
    values = rec.get("values")
    n = rec.get("n")
    return int(n) if isinstance(n, int) and not isinstance(n, bool) else len(values) if isinstance(values, list) else 1


def fmt_summary(records: list[dict[str, Any]], *, scale: float = 1.0, digits: int = 1) -> str:
    """One table cell from the metric records of a row's training runs (one record per run: ``{"mean", "std",
    "n", "values"}`` over its synthetic sets), with its counts, never "± 0.0" for a single value:

    - one run, one synthetic set: ``31.1 (1 run)``;
    - one run, S sets: ``31.1 ± 0.4 (1 run, std over 5 sets)``;
    - R runs: ``30.2 ± 3.1 (3 runs)``, the mean and standard deviation (ddof 1) of the runs' means; when the
      runs have several sets, the spread within a run is given apart: ``(3 runs; within a run ± 0.4 over 5 sets)``.
    """
    import numpy as np

    recs = [r for r in records if isinstance(r, dict) and "mean" in r]
    if not recs:
        raise DataError("fmt_summary: no record with a mean")
    means = np.asarray([scale * float(r["mean"]) for r in recs], dtype=np.float64)
    sets = [_sets_of(r) for r in recs]
    if len(recs) == 1:
        m = fmt_number(float(means[0]), digits)
        if sets[0] <= 1:
            return f"{m} (1 run)"
        std = scale * float(recs[0].get("std", math.nan))
        if std == 0:
            return f"{m} (1 run, {sets[0]} sets, all equal)"
        return f"{m} ± {fmt_spread(std, digits)} (1 run, std over {sets[0]} sets)"
    spread = float(means.std(ddof=1))
    body = fmt_number(float(means.mean()), digits)
    if spread == 0:
        body, runs = body, f"{len(recs)} runs, all equal"
    else:
        body, runs = f"{body} ± {fmt_spread(spread, digits)}", f"{len(recs)} runs"
    if max(sets) <= 1:
        return f"{body} ({runs})"
    within = float(np.mean([scale * float(r.get("std", math.nan)) for r in recs]))
    per = f"{sets[0]}" if len(set(sets)) == 1 else f"{min(sets)}-{max(sets)}"
    inside = "all equal" if within == 0 else f"± {fmt_spread(within, digits)}"
    return f"{body} ({runs}; within a run {inside} over {per} sets)"


def fmt_values(values: list[float], *, digits: int = 3) -> str:
    """A cell from plain numbers, one per training run (a sweep CSV's rows): :func:`fmt_summary` of them."""
    return fmt_summary([{"mean": float(v), "n": 1} for v in values], digits=digits)


def _check_record(rec: Any, where: str) -> dict[str, Any]:
    if not isinstance(rec, dict) or "mean" not in rec:
        raise DataError(f"{where}: expected a record with 'mean' and 'std', got {rec!r}")
    return rec


def _as_runs(runs: Run | list[Run] | None) -> list[Run]:
    if runs is None:
        return []
    return [runs] if isinstance(runs, Run) else [r for r in runs if r is not None]


def small_n_record(fid: dict[str, Any], metric: str, where: str) -> dict[str, Any] | str:
    """The KID or FID-infinity record of an available FID record (``fid`` or GS-WGAN's ``fid_train``), or the
    cell that says why there is none: "not evaluated" in a record written before they existed, "unavailable"
    when the sets were too small."""
    sub = fid.get(metric)
    if sub is None:
        return NOT_EVALUATED
    if isinstance(sub, dict) and sub.get("available") is False:
        return UNAVAILABLE
    return _check_record(sub, f"{where}.{metric}")


def small_n_cell(fid: dict[str, Any], metric: str, where: str) -> str:
    """KID (x 1000) or FID-infinity of one available FID record, or why there is none."""
    rec = small_n_record(fid, metric, where)
    if isinstance(rec, str):
        return rec
    scale, digits = _SCALE[metric]
    return fmt_summary([rec], scale=scale, digits=digits)


def metric_record(run: Run, metric: str) -> dict[str, Any] | str:
    """One run's record of FID, KID, FID-infinity or a classifier's accuracy, or the cell that says why there
    is none: KID, FID-infinity, precision and recall are "unavailable" with FID (or alone, when their sets were
    too small) and
    "not evaluated" in a record written before they existed."""
    if metric == "fid" or metric in SMALL_N_METRICS:
        fid = run.metrics.get("fid")
        if not isinstance(fid, dict):
            return NOT_EVALUATED
        if not fid.get("available"):
            return UNAVAILABLE
        if metric == "fid":
            return _check_record(fid, f"{run.path}: fid")
        return small_n_record(fid, metric, f"{run.path}: fid")
    rec = (run.metrics.get("classifiers") or {}).get(metric)
    if rec is None:
        return NOT_EVALUATED
    return _check_record(rec, f"{run.path}: classifiers.{metric}")


def metric_cell(runs: Run | list[Run] | None, metric: str) -> str:
    """FID, KID (x 1000), FID-infinity or a classifier accuracy (percent) of a row's training runs (one run or
    several: :func:`fmt_summary`), or the reason there is none (the first run's, when none has it)."""
    found = _as_runs(runs)
    if not found:
        return NOT_RUN
    recs = [metric_record(r, metric) for r in found]
    numbers = [r for r in recs if isinstance(r, dict)]
    if not numbers:
        return str(recs[0])
    scale, digits = _SCALE.get(metric, (1.0 if metric == "fid" else 100.0, 1))
    return fmt_summary(numbers, scale=scale, digits=digits)


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
    if real:  # the real-data row: the classifiers and FID on the training records themselves, no noise
        return "∞ (real data: no noise, outside the guarantee)"
    eps = run.epsilons()
    if not eps:
        return NOT_REPORTED
    if set(eps) == {"non_private"}:
        return "∞ (non-private)"
    body = "; ".join(f"{c}={fmt_number(eps[c], 2)}" for c in ordered_conventions(list(eps)))
    delta = (run.privacy or {}).get("delta")
    cell = f"{body} (δ={delta:g})" if isinstance(delta, int | float) and delta > 0 else body
    label = privacy_label(run.privacy)
    return cell if label is None else f"{cell} [{label}]"


#: The (epsilon, delta) conversion of the papers' central-DP tables (Mironov 2017's RDP conversion; "the
#: papers' RDP conversion"): a table's epsilon cell shows ours in it, so it reads beside the paper's number;
#: every other convention goes to the table's notes (:func:`epsilon_cell`).
TABLE_CONVENTION = "rdp_classic"


def table_epsilon_cell(run: Run | None, *, real: bool = False, convention: str = TABLE_CONVENTION) -> str:
    """The run's epsilon in the table's own ``convention`` alone, short (issue 70: the result first), e.g.
    ``10.00 (δ=1e-05)``. A run reporting the convention under an accounting (GS-WGAN's ``sound.rdp_classic``,
    its headline, before ``as_published.rdp_classic``) names that accounting; one without it shows its headline
    convention by name. :func:`epsilon_cell` gives every convention, for the notes."""
    if run is None or real:
        return epsilon_cell(run, real=real)
    eps = run.epsilons()
    if not eps or set(eps) == {"non_private"}:
        return epsilon_cell(run)
    head = str((run.privacy or {}).get("headline") or "")
    under = [c for c in ordered_conventions(list(eps)) if c.endswith(f".{convention}")]
    key = (convention if convention in eps else head if head.endswith(f".{convention}")
           else under[0] if under else head if head in eps else ordered_conventions(list(eps))[0])
    name = "" if key == convention else key.removesuffix(f".{convention}") if key.endswith(f".{convention}") else key
    delta = (run.privacy or {}).get("delta")
    extra = [name] if name else []
    if isinstance(delta, int | float) and delta > 0:
        extra.append(f"δ={delta:g}")
    cell = fmt_number(eps[key], 2) + (f" ({'; '.join(extra)})" if extra else "")
    label = privacy_label(run.privacy)
    return cell if label is None else f"{cell} [{label}]"


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


def fid_reason(run: Run | None, metric: str = "fid") -> str | None:
    """Why FID (or, with ``metric``, one of ``SMALL_N_METRICS``) is unavailable for ``run``; None if it is not."""
    fid = run.metrics.get("fid") if run is not None else None
    if isinstance(fid, dict) and not fid.get("available"):
        return str(fid.get("reason") or "no reason recorded") if metric == "fid" else None
    sub = fid.get(metric) if isinstance(fid, dict) and metric != "fid" else None
    if isinstance(sub, dict) and sub.get("available") is False:
        return str(sub.get("reason") or "no reason recorded")
    return None
