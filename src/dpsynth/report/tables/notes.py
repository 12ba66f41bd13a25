"""The notes printed under a table: the paper's own notes, why a FID (KID, FID-infinity, precision,
recall) cell is unavailable, the sample counts and network behind our FID cells (and, in a methods
table, the protocol of our KID, FID-infinity, precision and recall cells), what a reduced scale
changed, and the configuration's own notes (params.yaml ``tables.<name>.notes``)."""

from __future__ import annotations

from typing import Any

from dpsynth.config import Table
from dpsynth.report.published import PaperTable
from dpsynth.report.runs import SMALL_N_METRICS, Run, fid_reason

#: Inception pool features: FID_N is close to linear in 1/N only well above this many images.
FEATURE_DIM = 2048


def _notes(rows_runs: list[tuple[str, Run | None]], papers: list[PaperTable], *,
           small_n: bool = False, fid: bool = True) -> list[str]:
    """``small_n``: the table shows our KID, FID-infinity, precision and recall columns (methods tables);
    ``fid`` False: it
    shows no FID against the test split (GS-WGAN's protocol table, whose FID has notes of its own)."""
    notes: list[str] = []
    for p in {p.table_id: p for p in papers}.values():
        notes += [f"{p.source}: {n}" for n in p.notes]
    labels = {"fid": "FID", **SMALL_N_METRICS} if small_n else {"fid": "FID"} if fid else {}
    for label, run in rows_runs:
        for metric, name in labels.items():
            reason = fid_reason(run, metric)
            if reason:
                notes.append(f"{name} unavailable for {label} ({run.name if run else ''}): {reason}")
    if fid:
        notes += _fid_protocol_notes([run for _, run in rows_runs])
    if small_n:
        notes += _small_n_notes([run for _, run in rows_runs])
        notes += _prc_notes([run for _, run in rows_runs])
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


def _small_n_notes(runs: list[Run | None]) -> list[str]:
    """What our KID and FID-infinity cells are, per protocol (reference size, KID subsets, the N
    values of FID-infinity's fit), and when FID-infinity is still biased: below ``FEATURE_DIM``
    images FID_N curves in 1/N, and the reference's own bias is never extrapolated away."""
    seen: dict[tuple[Any, ...], list[str]] = {}
    for run in runs:
        fid = run.metrics.get("fid") if run is not None else None
        if not (isinstance(fid, dict) and fid.get("available")):
            continue
        kid, inf = (fid.get(k) if isinstance(fid.get(k), dict) and fid[k].get("available") else None
                    for k in ("kid", "fid_inf"))
        if kid is None and inf is None:
            continue
        ns = (inf or {}).get("n_values") or [None]
        n_ref = (kid or inf or {}).get("n_reference", fid.get("n_reference"))
        key = (n_ref, kid and kid.get("subsets"), kid and kid.get("subset_size"), inf and ns[0], inf and ns[-1],
               inf and len(ns))
        seen.setdefault(key, []).append(run.name)
    notes = []
    for (n_ref, subsets, size, n_min, n_max, points), names in seen.items():
        which = " and ".join(name for name, v in (("KID", size), ("FID∞", n_max)) if v is not None)
        parts = [f"{which} ours ({', '.join(names)}): the same Inception features and the same {n_ref} real test "
                 "images as FID; no paper reports either"]
        if size is not None:
            parts.append("KID (Binkowski et al., \"Demystifying MMD GANs\", ICLR 2018, arXiv:1801.01401): unbiased "
                         f"MMD² with the cubic polynomial kernel, mean over {subsets} random subset(s) of {size}, "
                         "printed ×10³; its expectation does not depend on N")
        if n_max is not None:
            parts.append("FID∞ (Chong and Forsyth, \"Effectively Unbiased FID and Inception Score and where to find "
                         f"them\", CVPR 2020, arXiv:1911.07023): FID of random subsets of {n_min} to {n_max} generated "
                         f"(or real training) images ({points} sizes), fitted as a + b/N by least squares; FID∞ = a")
            if isinstance(n_ref, int) and min(n_max, n_ref) < FEATURE_DIM:
                parts.append(f"It removes only the generated side's small-N bias, and below {FEATURE_DIM:,} images "
                             "(the feature dimension) FID_N still curves in 1/N, so FID∞ at these counts reads "
                             "above the FID the papers' counts give: compare it with the Real data row's, not the "
                             "papers' FID")
        notes.append(". ".join(parts))
    return notes


def _prc_notes(runs: list[Run | None]) -> list[str]:
    """What our precision and recall cells are, per protocol (k, the equal counts, the reference split,
    the implementation): one note per distinct protocol, naming its runs."""
    seen: dict[tuple[Any, ...], list[str]] = {}
    for run in runs:
        fid = run.metrics.get("fid") if run is not None else None
        rec = fid.get("precision") if isinstance(fid, dict) and fid.get("available") else None
        if run is not None and isinstance(rec, dict) and rec.get("available"):
            key = (rec.get("k"), rec.get("n_generated"), rec.get("n_reference"), rec.get("reference_split", "test"),
                   rec.get("implementation"))
            seen.setdefault(key, []).append(run.name)
    return [f"Precision and recall ours ({', '.join(names)}): Kynkäänniemi et al., \"Improved Precision and Recall "
            "Metric for Assessing Generative Models\", NeurIPS 2019, arXiv:1904.06991 -- the fraction of generated "
            "(or real training) images inside the real images' manifold, and of real images inside the generated "
            "ones', each manifold the union of balls around its images, each reaching that image's k-th nearest "
            f"neighbour in its own set (k = {k}), in the same Inception features as FID; the first {n_g} generated "
            f"(or real training) images against the first {n_r} real {split} images (equal counts, as the paper), "
            f"{impl}; no paper reports them. A k-NN manifold of a finite sample misses part of its own "
            "distribution, so neither reaches 1 even for real data: read them against the Real data row's"
            for (k, n_g, n_r, split, impl), names in seen.items()]


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
        if preset.get("classifier_test_subset"):
            parts.append(f"classifiers scored on {preset['classifier_test_subset']} test images (paper: all)")
        key = "; ".join(x for x in parts if x)
        if key:
            seen.setdefault(f"scale {run.scale}: {key}", []).append(run.name)
    return [f"Ours at {k} ({', '.join(v)})" for k, v in seen.items()]
