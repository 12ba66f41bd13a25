"""The notes printed under a table: the paper's own notes, why a FID cell is unavailable, the
sample counts and network behind our FID cells, what a reduced scale changed, and the
configuration's own notes (params.yaml ``tables.<name>.notes``)."""

from __future__ import annotations

from typing import Any

from dpsynth.config import Table
from dpsynth.report.published import PaperTable
from dpsynth.report.runs import Run, fid_reason


def _notes(rows_runs: list[tuple[str, Run | None]], papers: list[PaperTable]) -> list[str]:
    notes: list[str] = []
    for p in {p.table_id: p for p in papers}.values():
        notes += [f"{p.source}: {n}" for n in p.notes]
    for label, run in rows_runs:
        reason = fid_reason(run)
        if reason:
            notes.append(f"FID unavailable for {label} ({run.name if run else ''}): {reason}")
    notes += _fid_protocol_notes([run for _, run in rows_runs])
    notes += _scale_notes([run for _, run in rows_runs])
    return notes


def _ours(table: Table) -> list[str]:
    """The configuration's own notes on a table (params.yaml ``tables.<name>.notes``)."""
    return [f"Ours: {n}" for n in table.notes]


def _fid_protocol_notes(runs: list[Run | None]) -> list[str]:
    """The sample counts and network behind our FID cells: FID is biased upward at small N, so a
    cell is only comparable with one computed at the same counts (the papers': 60,000 vs the test split)."""
    seen: dict[tuple[Any, Any, Any], list[str]] = {}
    for run in runs:
        fid = run.metrics.get("fid") if run is not None else None
        if isinstance(fid, dict) and fid.get("available"):
            key = (fid.get("n_synthetic"), fid.get("n_reference"), fid.get("extractor"))
            seen.setdefault(key, []).append(run.name)
    notes = []
    for (n_a, n_b, extractor), names in seen.items():
        notes.append(f"FID ours ({', '.join(names)}): {n_a} generated (or real training) images vs the first "
                     f"{n_b} of the real test split, {extractor}; FID is biased upward at small N, so these "
                     f"read higher than the papers' (60,000 vs the full test split)")
    return notes


def _scale_notes(runs: list[Run | None]) -> list[str]:
    """What a reduced scale changed for our runs (steps, hyperparameters, classifier budget): the
    row still means the paper's method at its privacy target, at a smaller cost."""
    seen: dict[str, list[str]] = {}
    for run in runs:
        if run is None or run.scale == "paper":
            continue
        train = run.metrics.get("train") if isinstance(run.metrics.get("train"), dict) else {}
        preset = run.metrics.get("preset") if isinstance(run.metrics.get("preset"), dict) else {}
        parts = [f"{train['steps']:,} training steps" if isinstance(train.get("steps"), int) else None]
        for key, ov in sorted((train.get("scale_overrides") or {}).items()):
            if isinstance(ov, dict) and "this_scale" in ov:
                value = ov["this_scale"]
                shown = format(value, "g") if isinstance(value, float) else value
                parts.append(f"{key} {shown} (paper {ov.get('paper')})")
        if preset.get("classifier_max_epochs"):
            parts.append(f"MLP/CNN at most {preset['classifier_max_epochs']} epochs on "
                         f"{preset.get('classifier_train_subset') or 'all'} images")
        key = "; ".join(x for x in parts if x)
        if key:
            seen.setdefault(f"scale {run.scale}: {key}", []).append(run.name)
    return [f"Ours at {k} ({', '.join(v)})" for k, v in seen.items()]
