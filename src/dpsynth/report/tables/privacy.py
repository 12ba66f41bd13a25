"""``kind: privacy`` tables: every run's privacy accounting in every epsilon convention (the
papers' RDP conversion, the tighter one, GS-WGAN's published and sound accounting), beside
the privacy claims the papers make (published.yaml)."""

from __future__ import annotations

import math

import pandas as pd

from dpsynth.config import Params, Table
from dpsynth.errors import ConfigError
from dpsynth.privacy.randomness import privacy_label
from dpsynth.report.published import load_published
from dpsynth.report.runs import (
    NOT_APPLICABLE,
    NOT_REPORTED,
    NOT_RUN,
    RunStore,
    fmt_number,
    ordered_conventions,
    scale_cell,
    sigma_cell,
)
from dpsynth.report.tables.common import BuiltTable, _members
from dpsynth.report.tables.notes import _ours


def _privacy_rows(params: Params, table: Table) -> list[str]:
    members = _members(params, table)
    if members:
        return members
    out = list(params.pipeline.experiments)
    for t in params.tables.values():
        if t.kind != "privacy":
            out += [r.experiment for r in t.rows if r.experiment] + _members(params, t)
    return list(dict.fromkeys(out))


def _privacy_table(name: str, table: Table, params: Params, store: RunStore) -> BuiltTable:
    _, claims = load_published()
    experiments = params.all_experiments()
    names = _privacy_rows(params, table)
    if not names:
        raise ConfigError(f"tables.{name}: no runs to list (no targets, no experiments in any table)")
    runs = {e: store.experiment(e) for e in names}
    conventions = set().union(*(set(r.epsilons()) for r in runs.values() if r is not None))
    conventions |= {"rdp_classic", "rdp_modern"}
    for e in names:  # a method's own conventions (GS-WGAN's published and sound accounting)
        conventions |= set(experiments[e].spec.epsilon_conventions)
    conventions.discard("non_private")
    conv = ordered_conventions(conventions)
    records = []
    for e in names:
        exp, run = experiments[e], runs[e]
        priv = (run.privacy or {}) if run else {}
        eps = run.epsilons() if run else {}
        rec: dict[str, str] = {"Run": e, "Method": exp.method, "Dataset": exp.dataset,
                               "Scale": scale_cell(run, params.scale)}
        if run is None:
            rec.update({k: NOT_RUN for k in ("Mechanism", "σ", "q", "Steps", "δ", "Target ε", "Headline")})
        else:
            def val(key: str, fmt: str = "{}") -> str:
                v = priv.get(key)
                return NOT_APPLICABLE if v is None else fmt.format(v)

            rec.update({"Mechanism": val("mechanism"), "σ": sigma_cell(run), "q": val("q", "{:.4g}"),
                        "Steps": val("steps"), "δ": val("delta", "{:g}"), "Target ε": val("target_epsilon", "{:g}"),
                        "Headline": val("headline")})
        for c in conv:
            if run is None:
                rec[f"ε {c}"] = NOT_RUN
            elif set(eps) == {"non_private"}:
                rec[f"ε {c}"] = "∞ (non-private)"
            else:
                label = privacy_label(priv)  # read from the report: replayable noise, only approximately private
                rec[f"ε {c}"] = NOT_APPLICABLE if c not in eps else fmt_number(eps[c], 2) if label is None else \
                    f"{fmt_number(eps[c], 2)} [{label}]"
        claim = claims.get(f"{exp.method}/{exp.dataset}")
        if not exp.privacy.enabled and exp.local is None:
            claim = {"epsilon": "∞ (non-private)", "source": "non-private run"}
        for col, key in (("Paper ε", "epsilon"), ("Paper δ", "delta"), ("Paper σ", "sigma"), ("Paper steps", "steps")):
            rec[col] = claim.get(key, NOT_REPORTED) if claim else NOT_REPORTED
        if claim and "sigma" in claim and exp.privacy.sigma is not None and \
                not math.isclose(float(claim["sigma"]), exp.privacy.sigma):
            # A sweep cell at another sigma: the paper's main-results sigma/steps do not describe it.
            rec["Paper σ"] = rec["Paper steps"] = f"{NOT_REPORTED} (main setting: σ {claim['sigma']})"
        rec["Paper source"] = claim.get("source", NOT_REPORTED) if claim else NOT_REPORTED
        records.append(rec)
    notes = ["GS-WGAN: 'as_published.*' counts every per-sample release as subsampled at 1/N_d (the paper's "
             "accounting, comparable with its epsilon 10); 'sound.*' counts a step as one release of the shard "
             "(the real guarantee, docs/deviations.md row 8). rdp_classic is the papers' RDP-to-DP conversion, "
             "rdp_modern the tighter one.", *_ours(table)]
    return BuiltTable(name, table.title, table.paper, pd.DataFrame.from_records(records), notes,
                      ours=sum(run is not None for run in runs.values()))
