"""The privacy ledger: every released model per dataset, and what publishing all of them costs.

Each run is held to its own (epsilon, delta), but a sweep or a set of variants trains many models
on the same private data, and releasing several composes. The ledger lists, per dataset, every
evaluated run (``results/runs/*/metrics.json``, the report's own input, each report already
verified against its mechanism) and the composed guarantee if all of them were published:

* central DP runs (DP-Sinkhorn, GS-WGAN sound, DP-CGAN, DP-MERF's one release): their RDP curves add up
  order by order (exact composition of Renyi DP), converted once at the ledger's delta (the smallest of
  the runs');
* local-DP runs (privatized records): basic composition, epsilon and delta add up;
* a non-private run, or one with reproducible (replayable) noise, makes the composition infinite.

A quick-scale run trains on a subset of the data; composing it as if every record were in every
run is conservative (an upper bound), never optimistic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from dpsynth.paths import RUNS
from dpsynth.privacy import accounting as acc
from dpsynth.privacy.randomness import is_reproducible
from dpsynth.io import sha256_file
from dpsynth.privacy.releases import CONFIRMED, Damaged, Release, compose, describe_damaged
from dpsynth.privacy.verify import central_rdp, neighbours
from dpsynth.report.runs import Run, fmt_number, read_run

LEDGER = "privacy_ledger"


def _runs(results: Path) -> list[Run]:
    root = Path(results) / RUNS
    out = []
    for path in sorted(root.glob("*/metrics.json")) if root.is_dir() else []:
        run = read_run(path, path.parent.name)  # verifies the privacy report against its mechanism
        if run is not None:
            out.append(run)
    return out


def _eps_cell(eps: float) -> str:
    return "∞" if math.isinf(eps) else fmt_number(eps, 2)


def _ever_made(dataset: str, ever: list[Release], damaged: list[Damaged],
               current: tuple[float, set[str]] | None = None) -> list[dict[str, str]]:
    """The release ledger's rows for ``dataset``: each release whose file no longer holds it (replaced by a
    re-run, or removed: it lives on wherever it was copied or pushed), then every release ever made, composed.

    ``current``: the dataset's current composition (its ALL row's epsilon and neighbour relations). Every
    release ever made includes the current ones, so when the ledger composes to less -- it records none or
    only some of the dataset's current releases (runs made before the ledger existed, or under another
    private root) -- the EVER MADE row says so and reads at least the current epsilon, with the current
    relations among its neighbours: never an empty cell, never a composition below what exists now."""
    mine = [r for r in ever if r.dataset == dataset]
    now_eps, now_relations = current if current is not None else (0.0, set())
    if not mine:
        return [{"Dataset": dataset, "Released model": "EVER MADE: none recorded (release ledger)",
                 "Mechanism": f"the release ledger records no release of {dataset} (runs made before it, or under "
                              "another private root): at least the current ones (ALL row)",
                 "Neighbours": ", ".join(sorted(now_relations)) or "n/a",
                 "ε (headline)": "∞" if math.isinf(now_eps) else f"≥ {_eps_cell(now_eps)}", "δ": "n/a",
                 "Noise": "-"}]
    rows = []
    for r in mine:
        path = Path(r.output)
        if r.status == CONFIRMED and path.is_file() and sha256_file(path) == r.sha256:
            continue  # current: the file still holds it
        what = (f"replaced or removed; sha256 {r.sha256[:12]}" if r.status == CONFIRMED else
                f"{r.status}: reserved, never confirmed; its noise may have been drawn, so it counts")
        rows.append({"Dataset": dataset, "Released model": f"{r.stage} {r.name} at {r.time} ({what})",
                     "Mechanism": r.mechanism or "unknown", "Neighbours": r.neighbours or "unknown",
                     "ε (headline)": fmt_number(r.epsilon, 2), "δ": f"{r.delta:g}",
                     "Noise": r.note or "secret"})
    total = compose(mine, damaged)
    relations = {r.neighbours or "unknown" for r in mine}
    eps_cell, delta_cell, how = _eps_cell(total.epsilon), "n/a" if math.isinf(total.epsilon) else f"{total.delta:g}", \
        total.how
    if total.epsilon < now_eps - 1e-9:  # the ledger lacks current releases: at least what exists now
        relations |= now_relations
        eps_cell, delta_cell = "∞" if math.isinf(now_eps) else f"≥ {_eps_cell(now_eps)}", "n/a"
        how += f"; below the current composition ({_eps_cell(now_eps)}): the ledger lacks current releases"
    rows.append({"Dataset": dataset, "Released model": f"EVER MADE {total.count} (composed, release ledger)",
                 "Mechanism": how, "Neighbours": ", ".join(sorted(relations)),
                 "ε (headline)": eps_cell, "δ": delta_cell, "Noise": "-"})
    return rows


@dataclass(frozen=True)
class RunsTogether:
    """What publishing a set of runs together guarantees (module docstring): ``epsilon`` (inf when any run gives
    no guarantee), ``delta``, ``how`` it was composed, the runs without a guarantee, the neighbouring relations."""

    epsilon: float
    delta: float
    how: str
    infinite: list[str]
    relations: set[str]


def compose_runs(runs: list[Run]) -> RunsTogether:
    """The one composition of evaluated runs, for the ledger's 'ALL' rows and a table row's R training runs."""
    rdp_total = np.zeros(len(acc.CLASSIC_ORDERS))
    deltas, local_eps, local_delta, infinite, relations = [], 0.0, 0.0, [], set()
    for run in runs:
        priv = run.privacy or {}
        head = priv.get("headline")
        eps = float((priv.get("epsilon") or {}).get(head, math.inf)) if head else math.inf
        # Reshetova et al.'s wavelet baseline: its denoiser was tuned on the clean records (the paper's
        # "only approximately private"), so it carries no guarantee the composition could add up
        approx = bool((priv.get("extra") or {}).get("approximately_private"))
        relations.add(neighbours(priv))
        rdp = central_rdp(priv, str(run.path))  # the unit verify_report accounts
        if is_reproducible(priv) or approx or math.isinf(eps):
            infinite.append(run.name)
        elif rdp is not None:
            rdp_total += rdp
            deltas.append(float(priv["delta"]))
        else:  # local DP: basic composition
            local_eps += eps
            local_delta += float(priv.get("delta") or 0.0)
    if infinite:
        return RunsTogether(math.inf, math.nan, f"not private: {', '.join(infinite)}", infinite, relations)
    delta = min(deltas) if deltas else 0.0
    central = acc.classic_epsilon(acc.CLASSIC_ORDERS, rdp_total, delta)[0] if deltas else 0.0
    how = (f"RDP composition of {len(deltas)} central run(s) at δ={delta:g}"
           + (f" + {local_eps:g} local (basic composition)" if local_eps else ""))
    if len(relations) > 1:
        how += (f"; mixes neighbouring relations ({'; '.join(sorted(relations))}): each run's ε is stated "
                "for its own relation, so this total is exact for none")
    return RunsTogether(float(central + local_eps), delta + local_delta, how, [], relations)


def build_ledger(results: Path, runs: list[Run] | None = None,
                 ever: tuple[list[Release], list[Damaged]] | None = None,
                 ledger: str = "the release ledger") -> tuple[pd.DataFrame, list[str]]:
    """One row per released run and one 'all of them' row per dataset; plus notes.

    ``runs``: the report's runs, already read and validated (``RunStore.load_all``), so the ledger
    composes exactly what the tables print; by default every ``results/runs/*/metrics.json``.
    ``ever``: the release ledger (``ReleaseLedger.read``; ``ledger``: its file, for the note): then each dataset
    also gets the releases that no current file holds and the composition of every release ever made from it,
    beside the current one."""
    by_dataset: dict[str, list[Run]] = {}
    for run in (runs if runs is not None else _runs(results)):
        by_dataset.setdefault(str(run.metrics.get("dataset") or "unknown"), []).append(run)
    ever_releases, damaged = ever if ever is not None else ([], [])
    for r in ever_releases:
        by_dataset.setdefault(r.dataset, [])
    records: list[dict[str, str]] = []
    for dataset, runs in sorted(by_dataset.items()):
        if not runs:  # releases in the ledger, no evaluated run now
            records.extend(_ever_made(dataset, ever_releases, damaged))
            continue
        for run in runs:
            priv = run.privacy or {}
            head = priv.get("headline")
            eps = float((priv.get("epsilon") or {}).get(head, math.inf)) if head else math.inf
            repro = is_reproducible(priv)
            approx = bool((priv.get("extra") or {}).get("approximately_private"))
            records.append({"Dataset": dataset, "Released model": run.name, "Mechanism": str(priv.get("mechanism")),
                            "Neighbours": neighbours(priv),
                            "ε (headline)": fmt_number(eps, 2) + (f" ({head})" if head else ""),
                            "δ": f"{float(priv.get('delta') or 0):g}",
                            "Noise": "reproducible - NOT private" if repro else
                            ("secret; parameters tuned on clean data - only approximately private, NOT private"
                             if approx else "secret")})
        together = compose_runs(runs)
        total_eps, why, relations = together.epsilon, together.how, together.relations
        total = "∞" if math.isinf(total_eps) else fmt_number(total_eps, 2)
        infinite, delta = together.infinite, together.delta
        records.append({"Dataset": dataset, "Released model": f"ALL {len(runs)} (composed)", "Mechanism": why,
                        "Neighbours": ", ".join(sorted(relations)), "ε (headline)": total, "δ": "n/a" if infinite else f"{delta:g}",
                        "Noise": "-"})
        if ever is not None:
            records.extend(_ever_made(dataset, ever_releases, damaged, current=(total_eps, relations)))
    if damaged and not by_dataset:  # a damaged line belongs to no dataset it can be trusted for: to every one
        records.append({"Dataset": "every dataset", "Released model": "EVER MADE: damaged ledger line(s)",
                        "Mechanism": "not private: " + describe_damaged(damaged), "Neighbours": "unknown",
                        "ε (headline)": "∞", "δ": "n/a", "Noise": "-"})
    if not records:  # (not "none": the tables' never-an-empty-cell rule reads it as an empty cell)
        records.append({"Dataset": "no dataset yet", "Released model": "no evaluated run yet", "Mechanism": "n/a",
                        "Neighbours": "n/a", "ε (headline)": "n/a", "δ": "n/a", "Noise": "n/a"})
    notes = [
        "Every run under results/runs is listed: publishing several models trained on one dataset composes.",
        "Composed central epsilon: the runs' RDP curves summed order by order, classic RDP-to-DP conversion.",
        "Runs on a subset of the data (quick scale) are composed as if every record were in every run: an upper bound.",
        "Non-private runs and runs with reproducible (replayable) noise give no guarantee: the composition is ∞.",
        "Runs only approximately private (Reshetova et al.'s wavelet baseline: a denoiser tuned on the clean "
        "data) give no formal guarantee either: listed with their local epsilon, composed as not private.",
        "Neighbours: the neighbouring datasets each run's epsilon is stated for (add/remove one record for "
        "Poisson-sampled training, replace one for DP-MERF's single release and fixed-size batches); the "
        "composed row lists every relation among its runs, each run's guarantee holding for its own.",
    ]
    if ever is not None:
        notes.append(f"EVER MADE: every release the release ledger ({ledger}, shared by every workspace) records "
                     "for the dataset -- privatizations, trained models, re-runs, reservations of jobs that never "
                     "confirmed included -- composed the same way; a release a re-run replaced still exists wherever "
                     "it was copied or pushed, so it still counts"
                     + (f"; damaged ledger lines ({'; '.join(str(d) for d in damaged)}) count as releases without a "
                        "guarantee" if damaged else ""))
    return pd.DataFrame.from_records(records), notes
