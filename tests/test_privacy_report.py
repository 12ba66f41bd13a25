"""Privacy report round trip and the budget guard (stop before exceeding, count resumed steps)."""

from __future__ import annotations

import json

import pytest

from dpsynth.errors import PrivacyError
from dpsynth.privacy import accounting as acc
from dpsynth.privacy.gswgan_accounting import gswgan_sound_sigma
from dpsynth.privacy.report import BudgetGuard, PrivacyReport, dp_sgd_report, gaussian_release_report, gswgan_report


def test_dp_sgd_report_round_trip(tmp_path) -> None:
    rep = dp_sgd_report(mechanism="dp_sinkhorn", sigma=1.1, batch_size=50, dataset_size=60000,
                        steps=3_460_000, delta=1e-5, clip=0.5, target_epsilon=10.0)
    assert rep.headline == "rdp_classic" and 9.9 < rep.headline_epsilon <= 10.0
    assert rep.epsilon["rdp_modern"] < rep.epsilon["rdp_classic"]
    assert set(rep.versions) == {"dpsynth", "dp-accounting", "torch"}
    path = tmp_path / "gen" / "privacy.json"
    rep.write(path)
    data = json.loads(path.read_text())
    assert data["q"] == pytest.approx(50 / 60000) and data["steps"] == 3_460_000
    assert PrivacyReport.from_dict(data) == rep


def test_gswgan_report_headline_is_sound() -> None:
    rep = gswgan_report(sigma=1.07, shards=1000, batch_size=32, steps=20000, delta=1e-5, dataset_size=60000)
    assert rep.headline == "sound.rdp_classic" and rep.headline_epsilon > 300
    assert 9 < rep.epsilon["as_published.rdp_classic"] < 10.5


def test_report_rejects_unknown_headline() -> None:
    with pytest.raises(PrivacyError):
        PrivacyReport(mechanism="x", sigma=1.0, delta=1e-5, epsilon={"a": 1.0}, headline="b")


def test_budget_guard_stops_before_exceeding_target() -> None:
    q, target = 0.01, 2.0
    guard = BudgetGuard(1.0, q, 1e-5, target)
    budget = acc.max_steps(1.0, q, 1e-5, target)
    assert guard.budget == budget > 0
    for _ in range(budget):
        guard.step()
    assert guard.remaining == 0 and guard.epsilon_spent() <= target
    with pytest.raises(PrivacyError, match="exhausted"):
        guard.step()
    assert guard.spent == budget  # the refused step is not counted


def test_budget_guard_counts_steps_before_resume() -> None:
    guard = BudgetGuard(1.0, 0.01, 1e-5, 2.0)
    for _ in range(10):
        guard.step()
    resumed = BudgetGuard.from_state_dict(json.loads(json.dumps(guard.state_dict())))
    assert resumed.spent == 10 and resumed.remaining == guard.remaining
    with pytest.raises(PrivacyError, match="already spent"):
        BudgetGuard(1.0, 0.01, 1e-5, 2.0, steps_spent=resumed.budget + 1)


def test_budget_guard_gswgan_uses_sound_accounting() -> None:
    sigma = gswgan_sound_sigma(1000, 32, 20000, 1e-5, 10.0)
    guard = BudgetGuard.for_gswgan(sigma, 1000, 32, 1e-5, 10.0)
    assert guard.budget >= 20000
    assert BudgetGuard.for_gswgan(1.07, 1000, 32, 1e-5, 10.0).budget < 20000


@pytest.mark.parametrize("kw", [dict(target_eps=0.0), dict(delta=1.0), dict(q=0.0), dict(sigma=-1.0)])
def test_budget_guard_bad_inputs(kw: dict) -> None:
    args = dict(sigma=1.0, q=0.01, delta=1e-5, target_eps=1.0) | kw
    with pytest.raises(PrivacyError):
        BudgetGuard(**args)


def test_within_target_refuses_a_report_over_its_target_and_passes_one_at_it() -> None:
    """The check a one-release method (DP-MERF) and a fixed-schedule one (DP-CGAN) put on their report."""
    sigma = 0.6  # near DP-MERF's calibrated 0.5679 at (10, 1e-5): headline epsilon 9.39
    at = gaussian_release_report(sigma=sigma, dataset_size=60_000, delta=1e-5, bound=1.0, target_epsilon=10.0)
    assert at.within_target("merf") is at
    over = gaussian_release_report(sigma=sigma, dataset_size=60_000, delta=1e-5, bound=1.0, target_epsilon=9.0)
    with pytest.raises(PrivacyError, match=r"merf: 1 step\(s\) spend epsilon 9\.38.* > target 9\.0"):
        over.within_target("merf")
    untargeted = gaussian_release_report(sigma=sigma, dataset_size=60_000, delta=1e-5, bound=1.0)
    assert untargeted.within_target("merf") is untargeted
