"""One-step Monte-Carlo audit of every sanitizer: empirical epsilon <= claimed epsilon.

Each audit: 20,000 releases per neighbouring dataset (the class moments: 100,000), 95% joint confidence
(Clopper-Pearson), delta = 1e-5. The claim is the EXACT one-step Gaussian epsilon
(Balle & Wang), the tightest an accountant could claim. A second set of runs
mis-claims sigma (4x too large) and must be caught, so the audit has teeth.
"""

from __future__ import annotations

import pytest

from dpsynth.privacy import accounting as acc
from dpsynth.privacy import audit

AUDITS = list(audit.AUDITS.values())


@pytest.mark.parametrize("run", AUDITS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("sigma", [0.5, 1.1])
def test_audit_never_exceeds_claim(run, sigma: float) -> None:
    res = run(sigma, seed=3)
    assert res.passed, res.to_dict()
    # power: with 20k trials the bound reaches a good part of the claim (not a vacuous 0)
    assert res.eps_lower > 0.3 * res.eps_claimed or res.eps_lower > 3.0


@pytest.mark.parametrize("run", AUDITS, ids=lambda f: f.__name__)
def test_audit_catches_an_overclaim(run) -> None:
    res = run(2.0, claimed_sigma=8.0, seed=4)
    assert not res.passed, res.to_dict()


def test_exact_one_step_claim_is_below_rdp_one_step() -> None:
    """Why the exact Gaussian bound is the one to test against: the RDP one-step epsilon is looser."""
    rdp = acc.epsilon(1.1, 1.0, 1, 1e-5)["rdp_modern"]
    assert acc.gaussian_epsilon_exact(1 / 1.1, 1e-5) < rdp


def test_clopper_pearson_upper() -> None:
    assert audit.clopper_pearson_upper(0, 100, 0.05) == pytest.approx(1 - 0.05 ** (1 / 100))
    assert audit.clopper_pearson_upper(100, 100, 0.05) == 1.0


def test_every_training_barrier_is_an_audited_sanitizer() -> None:
    """The sanitizer objects the training paths build (the fast step, the batched sweep) are
    instances of exactly the classes audited above -- not a private copy of their math."""
    import torch

    from dpsynth.methods.dp_sinkhorn.sweep import BatchedSweep, SweepMember, SweepShared
    from dpsynth.methods.dp_sinkhorn.step import FastStep, StepSpec
    from dpsynth.nets import build_generator

    arch = {"name": "mlp", "kwargs": {"latent_dim": 2, "output_dim": 2, "hidden": [8]}}
    x, y = torch.randn(40, 2), torch.zeros(40, dtype=torch.int64)
    G = build_generator(arch["name"], **arch["kwargs"])
    gens = {k: torch.Generator().manual_seed(i) for i, k in enumerate(("model", "data", "noise"))}
    spec = StepSpec(n=4, n_extra=1, num_classes=None, alpha_c=1.0, eps=0.1, n_iter=3, scaling=None, m=0.0,
                    clip=0.5, sigma=1.0, q=0.1)
    fast = FastStep(G, torch.optim.Adam(G.parameters()), x, y, spec, gens)
    fast()
    sweep = BatchedSweep(SweepShared(arch=arch, n=4, n_extra=1, q=0.1, n_iter=3, scaling=None),
                         [SweepMember(seed=0, sigma=1.0), SweepMember(seed=1, sigma=None)], x, y)
    sweep.step()
    barriers = [fast.sanitizer, *(s for s in sweep.sanitizers if s is not None)]
    assert barriers and all(type(b) in audit.AUDITS for b in barriers)
    assert all(b.releases == 1 for b in barriers)  # and each of them released this step's gradient
