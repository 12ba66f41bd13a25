"""The softmin per device and the fused (compiled) Sinkhorn solve, held to the eager reference on the CPU.

Tolerances: both comparisons are float32 computations of the same formulas in another order. ``torch.logsumexp``
vs the floored composite differ in how the row's terms are summed (and the floor adds at most n * e^-80
relatively: nothing a float holds); Inductor reorders the same reductions and fuses the pointwise work. Each
of the 30 iterations can move a potential by a few float32 ulps of its own size (~2e-7 relative) and the
loop carries them on, so potentials agree to ~1e-5 relative (measured: 2.5e-5 at worst on the (2, 50, 144)
step problem); the bounds below are 1e-4 relative (4x that), and 1e-3 on gradients, whose entries are
differences of potentials and lose a digit to cancellation.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from dpsynth.ot import sinkhorn as sk
from dpsynth import compiling as sm
from dpsynth.ot.costs import squared_distances
from dpsynth.ot.losses import semi_debiased_loss
from dpsynth.ot import softmin
from dpsynth.ot.softmin import exp_floor, floors_exp

RTOL = 1e-4


def _problem(seed: int = 0, n: int = 50, m: int = 144, d: int = 794, dead: int = 0):
    g = torch.Generator().manual_seed(seed)
    x, y = torch.rand(2, n, d, generator=g), torch.rand(2, m, d, generator=g)
    c = squared_distances(x, y)
    a = torch.full((2, n), 1.0 / n)
    b = torch.full((2, m), 1.0 / (m - dead))
    if dead:
        b[:, m - dead:] = 0.0  # zero-weight padding, as a Poisson batch is padded to its capacity
    return c, a, b


def _close(got: torch.Tensor, ref: torch.Tensor, rtol: float = RTOL) -> float:
    """Largest difference relative to the reference's scale; asserts it is within ``rtol``."""
    err = float((got - ref).abs().max() / ref.abs().max().clamp_min(1e-12))
    assert err <= rtol, f"relative difference {err:.2e} > {rtol:.0e}"
    return err


def test_the_floor_is_the_cpus_and_can_be_forced_either_way():
    cpu, meta = torch.zeros(2), torch.zeros(2, device="meta")
    assert floors_exp(cpu) and not floors_exp(meta)  # meta stands for any device but the CPU (CUDA's choice)
    with exp_floor(False):
        assert not floors_exp(cpu)
        with exp_floor(True):
            assert floors_exp(meta)
        assert not floors_exp(cpu)
    assert floors_exp(cpu) and not floors_exp(meta)


@pytest.mark.parametrize("dead", [0, 30])
def test_floored_and_logsumexp_softmins_give_the_same_solve(dead):
    c, a, b = _problem(dead=dead)
    with exp_floor(True):
        f1, g1 = sk.sinkhorn_potentials(c, a, b, 0.05, n_iter=30)
    with exp_floor(False):
        f2, g2 = sk.sinkhorn_potentials(c, a, b, 0.05, n_iter=30)
    _close(f2, f1)
    live = b > 0
    _close(g2[live], g1[live])


def test_the_gpu_path_softmin_is_one_logsumexp_and_the_cpus_the_floored_composite():
    """What the op-count guard rests on: which softmin each path dispatches (counted, not timed)."""
    from torch.profiler import ProfilerActivity, profile

    from dpsynth.bench.op_count import outermost_ops

    c, _, b = _problem()
    h = torch.log(b)
    names = {}
    for floor in (True, False):
        with exp_floor(floor), profile(activities=[ProfilerActivity.CPU]) as prof:
            softmin._softmin(0.05, c, h)
        names[floor] = outermost_ops(prof)
    assert names[False]["aten::logsumexp"] == 1 and "aten::clamp_min_" not in names[False]
    assert "aten::logsumexp" not in names[True] and names[True]["aten::clamp_min_"] == 1
    assert sum(names[False].values()) < sum(names[True].values()) - 5  # the composite's extra ops


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none in CI / this machine)")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
@pytest.mark.parametrize("floor", [True, False])
def test_fused_solve_equals_the_eager_loop(floor, device):
    """On the CPU in CI (Inductor's C++ backend); on a GPU, where there is one, Triton's kernels."""
    c, a, b = (t.to(device) for t in _problem(dead=20))
    with exp_floor(floor):
        f_e, g_e = sk.sinkhorn_potentials(c, a, b, 0.05, n_iter=30)
        f_f, g_f = sk.sinkhorn_potentials(c, a, b, 0.05, n_iter=30, fused=True)
    assert sm._failed is None, sm._failed  # it really ran compiled
    _close(f_f, f_e)
    live = b > 0
    _close(g_f[live], g_e[live])


def test_fused_loss_and_its_gradient_equal_the_eager_ones():
    g = torch.Generator().manual_seed(3)
    x = torch.rand(60, 794, generator=g).requires_grad_()
    y = torch.rand(70, 794, generator=g)
    kw = dict(n=50, n_extra=10, eps=0.05, n_iter=30, scaling=0.5, validate=False)
    out = {}
    for fused in (False, True):
        loss = semi_debiased_loss(x, y, fused=fused, **kw)
        (grad,) = torch.autograd.grad(loss, x)
        out[fused] = (loss.detach(), grad)
    _close(out[True][0], out[False][0])
    _close(out[True][1], out[False][1], rtol=1e-3)


def test_a_failed_compile_warns_once_and_runs_the_eager_solve(monkeypatch):
    c, a, b = _problem(seed=5)
    ref = sk.sinkhorn_potentials(c, a, b, 0.05, n_iter=10)

    def broken(*args, **kwargs):
        raise RuntimeError("no C++ compiler found")

    monkeypatch.setattr(sm, "_compiled", {})
    monkeypatch.setattr(sm, "_failed", None)
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: broken)
    with pytest.warns(RuntimeWarning, match="torch.compile failed .*no C\\+\\+ compiler"):
        got = sk.sinkhorn_potentials(c, a, b, 0.05, n_iter=10, fused=True)
    assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second call neither compiles nor warns again
        again = sk.sinkhorn_potentials(c, a, b, 0.05, n_iter=10, fused=True)
    assert torch.equal(again[1], ref[1])


def test_fused_needs_a_fixed_length_loop():
    from dpsynth.errors import ConfigError

    c, a, b = _problem()
    with pytest.raises(ConfigError, match="fixed n_iter"):
        sk.sinkhorn_potentials(c, a, b, 0.05, n_iter=30, tol=1e-3, fused=True)


def test_a_fused_step_trains_as_the_eager_step():
    """FastStep with the compiled solve against the eager one, three steps from the same state: every
    record in every batch (q = 1), so each step's problem has one shape and compiles once."""
    from dpsynth.methods.dp_sinkhorn.step import FastStep, StepSpec
    from dpsynth.methods.optim import make_optimizer
    from dpsynth.nets import build_seeded_generator

    arch = {"name": "dcgan", "kwargs": {"latent_dim": 12, "num_classes": 10, "embed_dim": 4, "out_channels": 1,
                                        "image_size": 28, "channels": (32, 16, 8)}}
    g = torch.Generator().manual_seed(0)
    x_all, y_all = torch.rand(40, 1, 28, 28, generator=g) * 2 - 1, torch.randint(0, 10, (40,), generator=g)
    spec = StepSpec(n=20, n_extra=4, num_classes=10, alpha_c=15.0, eps=0.05, n_iter=30, scaling=0.5, m=0.0,
                    clip=0.5, sigma=1.1, q=1.0)
    runs = {}
    for fused in (False, True):
        G = build_seeded_generator(arch, 0, torch.device("cpu"))
        opt = make_optimizer(G.parameters(), "adam", lr=1e-3)
        gens = {k: torch.Generator().manual_seed(i) for i, k in enumerate(("model", "data", "noise"))}
        step = FastStep(G, opt, x_all, y_all, spec, gens, fused_solve=fused)
        losses = torch.stack([step()[0] for _ in range(3)])
        runs[fused] = (losses.detach(), torch.cat([p.detach().flatten() for p in G.parameters()]))
    assert sm._failed is None, sm._failed
    _close(runs[True][0], runs[False][0])
    _close(runs[True][1], runs[False][1])


def test_dpsynth_no_compile_runs_the_eager_solve(monkeypatch):
    """The way out where a platform's compiler misbehaves: $DPSYNTH_NO_COMPILE=1 compiles nothing (no graph, no
    warning) and the fused solve is the eager loop, bit for bit."""
    c, a, b = _problem(seed=7)
    ref = sk.sinkhorn_potentials(c, a, b, 0.05, n_iter=10)
    monkeypatch.setenv(sm.OFF_VAR, "1")
    monkeypatch.setattr(sm, "_compiled", {})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = sk.sinkhorn_potentials(c, a, b, 0.05, n_iter=10, fused=True)
    assert sm._compiled == {} and sm._failed is None
    assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])
