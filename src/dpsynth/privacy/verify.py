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
from dpsynth.privacy.local import gaussian_epsilon_eq5
from dpsynth.privacy.report import flatten_epsilon

#: Relative tolerance: the recomputation runs the same deterministic code, so anything beyond
#: float round-off (and JSON's 17 significant digits) is a different mechanism or an edit.
REL_TOL = 1e-6
NON_PRIVATE = "none (non-private)"


def _num(report: dict[str, Any], key: str, where: str) -> float:
    v = report.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
        raise PrivacyError(f"{where}: privacy report field {key!r} must be a finite number, got {v!r}")
    return float(v)


def recompute_epsilon(report: dict[str, Any], where: str) -> dict[str, float]:
    """Every epsilon ``report`` should list, recomputed from its recorded mechanism."""
    mech = report.get("mechanism")
    listed = report.get("epsilon")
    if not isinstance(mech, str) or not isinstance(listed, dict) or not listed:
        raise PrivacyError(f"{where}: not a privacy report (needs 'mechanism' and an 'epsilon' mapping)")
    if mech == NON_PRIVATE:
        return {"non_private": math.inf}
    delta = _num(report, "delta", where)
    if mech.startswith("local_"):
        local = (report.get("extra") or {}).get("local") or {}
        radius, scale = _num(local, "radius", where), _num(local, "noise_scale", where)
        if mech == "local_laplace":
            return {"sound": 2.0 * radius / scale, "paper_convention": radius / scale}
        if mech == "local_gaussian":
            return {"sound": gaussian_epsilon_eq5(scale, delta, 2.0 * radius),
                    "paper_convention": gaussian_epsilon_eq5(scale, delta, radius)}
        raise PrivacyError(f"{where}: unknown local mechanism {mech!r}")
    sigma = _num(report, "sigma", where)
    pld = any(k.endswith("pld") for k in listed)
    unit_sigma, q, sampling, steps = composition_unit(report, where)
    if mech == "gs_wgan":
        return flatten_epsilon(acc.gswgan_epsilon(sigma, report["shards"], report["batch_size"], steps, delta, pld=pld))
    if mech == "gaussian_release":  # one release over every record (DP-MERF)
        return flatten_epsilon(acc.gaussian_release_epsilon(sigma, delta, pld=pld))
    return flatten_epsilon(acc.epsilon(unit_sigma, q, steps, delta, sampling=sampling, pld=pld))


def composition_unit(report: dict[str, Any], where: str) -> tuple[float, float, str, int]:
    """A central-DP report's sound guarantee as ``(noise multiplier, q, sampling, steps)``: ``steps``
    compositions of one subsampled Gaussian. What both :func:`recompute_epsilon` and the privacy
    ledger (which adds runs' RDP curves) account, so they cannot read a mechanism two ways.

    GS-WGAN: one step is a Gaussian of ``sigma / sqrt(batch_size)`` at rate ``1 / shards``
    (``accounting.gswgan_sound_step``); DP-MERF's single release: the plain Gaussian (q = 1, one
    step); DP-SGD-style runs: their recorded sigma, q and sampling."""
    mech = report.get("mechanism")
    sigma = _num(report, "sigma", where)
    steps = report.get("steps")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise PrivacyError(f"{where}: privacy report field 'steps' must be a non-negative integer, got {steps!r}")
    if mech == "gs_wgan":
        shards, batch = report.get("shards"), report.get("batch_size")
        if not isinstance(shards, int) or not isinstance(batch, int):
            raise PrivacyError(f"{where}: a GS-WGAN report needs integer 'shards' and 'batch_size'")
        if not math.isclose(_num(report, "q", where), 1.0 / shards, rel_tol=1e-12):
            raise PrivacyError(f"{where}: q={report['q']} is not 1/shards (shards={shards})")
        return (*acc.gswgan_sound_step(sigma, shards, batch), "poisson", steps)
    if mech == "gaussian_release":
        if steps != 1 or _num(report, "q", where) != 1.0:
            raise PrivacyError(f"{where}: a single Gaussian release has steps 1 and q 1, got steps={steps!r}, "
                               f"q={report.get('q')!r}")
        return sigma, 1.0, "poisson", 1
    q, sampling = _num(report, "q", where), report.get("sampling")
    if sampling not in acc.SAMPLINGS:
        raise PrivacyError(f"{where}: privacy report field 'sampling' must be one of {acc.SAMPLINGS}, got {sampling!r}")
    return sigma, q, str(sampling), steps


def central_rdp(report: dict[str, Any], where: str) -> np.ndarray | None:
    """The run's total RDP over the classic orders (what the privacy ledger adds up across runs): the
    same :func:`composition_unit` :func:`recompute_epsilon` accounts; None for a report that is not
    central DP (a non-private run, local DP)."""
    mech = report.get("mechanism")
    if report.get("sigma") is None or mech == NON_PRIVATE or str(mech).startswith("local_"):
        return None
    sigma, q, sampling, steps = composition_unit(report, where)
    return acc.one_step_rdp(sigma, q, sampling) * steps


#: The neighbouring relations a report's guarantee can be stated for (``neighbours``).
# (not "none": the tables' never-an-empty-cell rule reads "none" as an empty cell)
ADD_REMOVE, REPLACE_ONE, LOCAL, NO_GUARANTEE = ("add/remove one", "replace one", "each record (local)",
                                                 "no guarantee (non-private run)")


def neighbours(report: dict[str, Any]) -> str:
    """The neighbouring datasets the report's epsilon is stated for -- the ledger lists it per run, since
    runs under different relations compose guarantees about different pairs of datasets:

    - Poisson-subsampled steps (DP-Sinkhorn, DP-CGAN's DP-SGD, GS-WGAN's sound account): add/remove one;
    - DP-MERF's single release over n public records, and fixed-size batches sampled without
      replacement: replace one;
    - local DP: each record is privatized alone; a non-private run: no guarantee."""
    mech = report.get("mechanism")
    if report.get("sigma") is None or mech == NON_PRIVATE:
        return NO_GUARANTEE
    if str(mech).startswith("local_"):
        return LOCAL
    if mech == "gaussian_release" or report.get("sampling") == "without_replacement":
        return REPLACE_ONE
    return ADD_REMOVE


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
