"""Trust no privacy report: recompute its epsilon from the mechanism it records.

A ``privacy.json`` is plain JSON next to the generator; a hand edit (epsilon 10 -> 0.5) or a
report copied from another run would otherwise flow into the synthetic sets, the metrics and
the published tables. Every downstream stage (sample, evaluate, report) calls
:func:`verify_report`, which recomputes every epsilon the report lists from its recorded
mechanism -- sigma, q, steps, sampling, delta, shards, batch size; for local DP the radius and
noise scale -- with the same accountants training used, and refuses any disagreement, naming
the file and the key.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dpsynth.errors import PrivacyError
from dpsynth.privacy import accounting as acc
from dpsynth.privacy import mechanisms
from dpsynth.privacy.mechanisms import ADD_REMOVE, LOCAL, NO_GUARANTEE, NON_PRIVATE, REPLACE_ONE, report_number

# the relations are re-exported: the ledger's readers (and its tests) name them from here
__all__ = ["ADD_REMOVE", "LOCAL", "NON_PRIVATE", "NO_GUARANTEE", "REL_TOL", "REPLACE_ONE", "central_rdp",
           "composition_unit", "neighbours", "recompute_epsilon", "verify_report"]

#: Relative tolerance: the recomputation runs the same deterministic code, so anything beyond
#: float round-off (and JSON's 17 significant digits) is a different mechanism or an edit.
REL_TOL = 1e-6


def recompute_epsilon(report: dict[str, Any], where: str) -> dict[str, float]:
    """Every epsilon ``report`` should list, recomputed by the mechanism it records (``mechanisms.for_report``)."""
    mech = report.get("mechanism")
    listed = report.get("epsilon")
    if not isinstance(mech, str) or not isinstance(listed, dict) or not listed:
        raise PrivacyError(f"{where}: not a privacy report (needs 'mechanism' and an 'epsilon' mapping)")
    found = mechanisms.for_report(report, where)
    if found is None:
        return {"non_private": math.inf}
    return found.recompute(report, where, report_number(report, "delta", where))


def composition_unit(report: dict[str, Any], where: str) -> tuple[float, float, str, int] | None:
    """A central-DP report's sound guarantee as ``(noise multiplier, q, sampling, steps)``: ``steps``
    compositions of one subsampled Gaussian (None: not central DP). What both :func:`recompute_epsilon`
    and the privacy ledger (which adds runs' RDP curves) account, so they cannot read a mechanism two
    ways; each mechanism states its own unit (``mechanisms.*.composition_unit``)."""
    found = mechanisms.for_report(report, where)
    return None if found is None else found.composition_unit(report, where)


def central_rdp(report: dict[str, Any], where: str) -> np.ndarray | None:
    """The run's total RDP over the classic orders (what the privacy ledger adds up across runs): the
    same :func:`composition_unit` :func:`recompute_epsilon` accounts; None for a report that is not
    central DP (a non-private run, local DP)."""
    if report.get("sigma") is None:
        return None
    unit = composition_unit(report, where)
    if unit is None:
        return None
    sigma, q, sampling, steps = unit
    return acc.one_step_rdp(sigma, q, sampling) * steps


def neighbours(report: dict[str, Any]) -> str:
    """The neighbouring datasets the report's epsilon is stated for (each mechanism's ``neighbours``) --
    the ledger lists it per run, since runs under different relations compose guarantees about
    different pairs of datasets:

    - Poisson-subsampled steps (DP-Sinkhorn, DP-CGAN's DP-SGD, GS-WGAN's sound account): add/remove one;
    - DP-MERF's single release over n public records, and fixed-size batches sampled without
      replacement: replace one;
    - local DP: each record is privatized alone; a non-private run: no guarantee."""
    found = mechanisms.for_report(report, "privacy report") if report.get("sigma") is not None else None
    return NO_GUARANTEE if found is None else found.neighbours(report)


def verify_report(report: Any, where: str) -> dict[str, Any]:
    """Return ``report`` if every epsilon it lists is what its mechanism gives; else PrivacyError.

    Also checks that the headline convention is listed and, when the run had a target, that the
    headline epsilon is within it."""
    if not isinstance(report, dict):
        raise PrivacyError(f"{where}: the privacy report must be a JSON object, got {type(report).__name__}")
    expected = recompute_epsilon(report, where)
    listed = report["epsilon"]
    if set(listed) != set(expected):
        raise PrivacyError(f"{where}: privacy report lists conventions {sorted(listed)}, but its mechanism "
                           f"gives {sorted(expected)}; refusing it")
    for key, want in expected.items():
        got = listed[key]
        ok = isinstance(got, (int, float)) and not isinstance(got, bool) and (
            got == want or math.isclose(float(got), want, rel_tol=REL_TOL))
        if not ok:
            raise PrivacyError(f"{where}: epsilon[{key!r}] = {got!r} but the recorded mechanism gives {want:.6g}; "
                               "the report was edited or belongs to another run -- refusing it")
    headline = report.get("headline")
    if headline not in listed:
        raise PrivacyError(f"{where}: headline {headline!r} is not one of the listed conventions")
    target = report.get("target_epsilon")
    if target is not None and float(listed[headline]) > float(target) * (1 + REL_TOL):
        raise PrivacyError(f"{where}: headline epsilon {listed[headline]:.6g} exceeds the run's target {target}")
    return report
