"""``kind: wavelet`` tables: Reshetova, Chen, Ozgur, "Training generative models from privatized data via
entropic optimal transport" (ISIT 2024, arXiv:2306.09547), Figs. 2 and 8 -- MNIST privatized by a local
mechanism, then the unregularized p-WGAN, wavelet denoising + WGAN-GP and the entropic p-WGAN, a row per
(mechanism, epsilon). The table holds each run's W2 to the clean test split and its privacy; the wavelet
runs are labelled ONLY APPROXIMATELY PRIVATE (the paper's words: their denoiser was tuned on the clean
images). The six-column figure is ``dpsynth.report.wavelet_figure``, drawn from :attr:`BuiltTable.panels`.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from dpsynth.config import Experiment, Params, Table
from dpsynth.privacy.randomness import APPROXIMATE_LABEL, privacy_label
from dpsynth.report.published import paper_table
from dpsynth.report.runs import NOT_REPORTED, PLOT_ONLY, Run, RunStore, scale_cell
from dpsynth.report.tables.common import BuiltTable, _members
from dpsynth.report.tables.manifold import mechanism_label, trained_on
from dpsynth.report.tables.notes import _ours, _scale_notes
from dpsynth.report.claims import Estimate
from dpsynth.report.tables.w2 import w2_cell, w2_estimate
from dpsynth.report.tables.w2_claims import lowest_claim

#: The generator columns left to right as the paper draws them (Fig. 2 columns d, e, f).
COLUMNS = ("exact", "wavelet", "entropic")
COLUMN_TITLES = {"exact": "unregularized p-WGAN", "wavelet": "wavelet denoising + WGAN-GP",
                 "entropic": "entropic p-WGAN"}
#: The label every wavelet run carries in the table, its notes and the ledger.
APPROXIMATELY_PRIVATE = "approximately private: denoiser tuned on the clean images"
CLAIM = ("wavelet denoising does not recover the privatized images, and neither the unregularized p-WGAN nor "
         "WGAN-GP on the denoised images learns the digits; the entropic p-WGAN does (closest to the clean data)")


def column_of(exp: Experiment) -> str:
    """Which of the three generator columns an experiment fills, read from its method's spec (never its name):
    an approximately private method (the wavelet baseline), or a noise-matched loss's column by that loss."""
    if exp.spec.approximately_private:
        return "wavelet"
    loss = getattr(exp.hparams, "loss", None)
    if not exp.spec.noise_matched_loss or loss not in ("exact", "entropic"):
        raise ValueError(f"a kind: wavelet table takes approximately private runs ({_methods('approximately_private')}) "
                         f"and runs with a noise-matched loss exact or entropic ({_methods('noise_matched_loss')}), "
                         f"not {exp.method} with loss {loss!r}")
    return str(loss)


def _methods(prop: str) -> str:
    from dpsynth.config.methods import METHOD_SPECS

    return ", ".join(n for n, spec in METHOD_SPECS.items() if getattr(spec, prop))


def row_key(exp: Experiment) -> tuple[str, float, float | None]:
    assert exp.local is not None
    return exp.local.mechanism, exp.local.epsilon, exp.local.delta


def paper_epsilon(run: Run | None, exp: Experiment) -> str:
    """The epsilon the paper would print for this noise (sensitivity R) beside ours (2R), from the run's report."""
    eps = (run.privacy or {}).get("epsilon") if run is not None else None
    if isinstance(eps, dict) and "paper_convention" in eps:
        return f"{float(eps['paper_convention']):.4g} (ours, 2R: {float(eps['sound']):.4g})"
    assert exp.local is not None
    return f"ours (2R): {exp.local.epsilon:g}"


def _wavelet_table(name: str, table: Table, params: Params, store: RunStore) -> BuiltTable:
    paper = paper_table(table.published, f"tables.{name}") if table.published else None
    paper_cell = PLOT_ONLY if paper is not None and paper.plot_only else NOT_REPORTED
    experiments = params.all_experiments()
    rows: dict[tuple[str, float, float | None], dict[str, str]] = {}
    for e in _members(params, table):
        exp = experiments[e]
        rows.setdefault(row_key(exp), {})[column_of(exp)] = e
    records: list[dict[str, str]] = []
    panels: list[dict[str, Any]] = []
    runs: list[Run | None] = []
    claim_levels: dict[str, dict[str, Estimate]] = {}
    for r, (key, cols) in enumerate(rows.items()):
        w2s: dict[str, Estimate] = {}
        for c, col in enumerate(COLUMNS):
            e = cols.get(col)
            if e is None:
                continue
            exp = experiments[e]
            reps = [store.experiment(x) for x in params.replicates_of(e)]  # the cell's training runs
            run = next((x for x in reps if x is not None), None)
            runs.append(run)
            if (est := w2_estimate(reps)).n > 0:
                w2s[col] = est
            # a run's label is its report's (privacy_label), never its method's name; before it runs, what it will be
            label = privacy_label(run.privacy) if run is not None else \
                APPROXIMATE_LABEL if exp.spec.approximately_private else None
            privacy = "local DP (privatized records only)" if label is None else \
                APPROXIMATELY_PRIVATE if label == APPROXIMATE_LABEL else label
            records.append({"Mechanism": mechanism_label(exp), "Paper's epsilon": paper_epsilon(run, exp),
                            "Generator": COLUMN_TITLES[col], "Run": e, "Privacy": privacy,
                            "Scale": scale_cell(run, params.scale), "Trained on": trained_on(run),
                            "W2 to clean data ours": w2_cell(reps), "W2 paper": paper_cell})
        panels.append({"row": r, "mechanism": mechanism_label(experiments[next(iter(cols.values()))]),
                       "runs": dict(cols), "w2": {c: w2_cell([store.experiment(x) for x in params.replicates_of(e)])
                                                  for c, e in cols.items()}})
        claim_levels[str(panels[-1]["mechanism"])] = w2s
    notes = ([f"{paper.source}: {n}" for n in paper.notes] if paper else []) + _ours(table)
    notes.append("The wavelet-denoising rows are ONLY APPROXIMATELY PRIVATE, as the paper says (Sec. 4.3): the "
                 "denoiser's wavelet, level and threshold were chosen to minimise the error to the CLEAN training "
                 "images under the noise instance, a non-private function of the data. Their local epsilon holds "
                 "for the privatized records alone; the privacy ledger composes these runs as not private.")
    notes.append("The paper's epsilon uses the sensitivity R (the largest norm of an image in [-1, 1]^784: l1 784, "
                 "l2 28); ours uses the ball's diameter 2R, so the same noise reads twice (Laplace) or more "
                 "(Gaussian, eq. (5)) the paper's number. Each run of a row trained on its own privatized copy.")
    notes.append("Ours: W2 to clean data = the exact W2 between generated images and the clean test split "
                 "(`dpsynth evaluate`).")
    notes.append(lowest_claim(claim_levels, figure=paper.table if paper is not None else name, claim=CLAIM,
                              levels_name="mechanism rows"))
    notes += _scale_notes(runs)
    frame = pd.DataFrame.from_records(records, columns=["Mechanism", "Paper's epsilon", "Generator",
                                                        "W2 to clean data ours", "W2 paper", "Run", "Privacy",
                                                        "Scale", "Trained on"])
    return BuiltTable(name, table.title, table.paper, frame, notes, ours=sum(r is not None for r in runs),
                      wavelet_panels=panels)
