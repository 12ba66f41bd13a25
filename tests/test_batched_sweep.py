"""Batched sweeps: each member of a K-wide sweep equals the same member trained alone."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dpsynth.errors import ConfigError, PrivacyError
from dpsynth.methods import dp_sinkhorn
from dpsynth.methods.dp_sinkhorn.sweep import BatchedSweep, SweepMember, SweepShared, train_one

ARCH = {"name": "dcgan", "kwargs": {"latent_dim": 12, "num_classes": 10, "embed_dim": 4, "out_channels": 1,
                                    "image_size": 28}}


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    x = dp_sinkhorn.records_to_float(rng.integers(0, 256, (200, 1, 28, 28), dtype=np.uint8)).double()
    return x, torch.from_numpy(rng.integers(0, 10, 200))


def _shared(**kw) -> SweepShared:
    base = dict(arch=ARCH, n=10, n_extra=2, q=10 / 200, lr=1e-3, weight_decay=2e-5, dtype=torch.float64,
                target_epsilon=10.0)
    base.update(kw)
    return SweepShared(**base)


@pytest.mark.parametrize("mode", ["vmap", "loop"])
def test_each_member_equals_its_one_at_a_time_run(data, mode):
    """Both forward strategies (grouped convolutions / member by member on views); 2 DCGAN members differing in seed, cost weight m, clip and sigma (the non-private member
    is covered by the MLP test below),
    2 steps batched vs each alone (FastStep, itself held to tests/reference_dp_sinkhorn.py): float64, weights and
    BN statistics to 1e-9 (observed ~1e-12; vmap's grouped convolutions only reorder sums)."""
    x, y = data
    shared = _shared()
    members = [SweepMember(seed=0), SweepMember(seed=1, m=1.0, sigma=0.8, clip=0.3)]
    sweep = BatchedSweep(shared, members, x, y, forward_mode=mode)
    assert sweep.forward_mode == mode
    losses = [sweep.step() for _ in range(2)]
    assert all(torch.isfinite(v).all() for v in losses)
    for i, mem in enumerate(members):
        alone = train_one(shared, mem, x, y, 2).state_dict()
        batched = sweep.generator(i).state_dict()
        for k, ref in alone.items():
            assert torch.allclose(batched[k].double(), ref.double(), rtol=0, atol=1e-9), (i, k)
    # members really differ (their own seeds/noise): a mix-up would make two of them equal
    w0, w1 = sweep.generator(0).state_dict(), sweep.generator(1).state_dict()
    assert not torch.allclose(w0["net.0.weight"], w1["net.0.weight"])


MLP = {"name": "mlp", "kwargs": {"latent_dim": 2, "output_dim": 2, "hidden": [32, 32],
                                  "latent_dist": "uniform_symmetric"}}


@pytest.mark.parametrize("mode", ["vmap", "loop"])
def test_each_member_has_its_own_accountant(mode):
    """Spent epsilon follows each member's sigma (smaller sigma, larger epsilon; non-private is
    inf), and a member whose budget is exhausted stops the sweep before the step is taken.
    (A small unconditional MLP on 2-D points: also covers the label-free path.) The MLP sweep
    equals its one-at-a-time runs too (float64, 1e-9)."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(300, 2, generator=g, dtype=torch.float64), torch.zeros(300, dtype=torch.int64)
    sweep = BatchedSweep(_shared(arch=MLP, n=20, n_extra=4, q=20 / 300, eps=0.05), [SweepMember(seed=0, sigma=1.5), SweepMember(seed=1, sigma=0.9),
                                     SweepMember(seed=2, sigma=None)], x, y, forward_mode=mode)
    sweep.step()
    sweep.step()
    for i, mem in enumerate(sweep.sweep_members):
        alone = train_one(sweep.shared, mem, x, y, 2).state_dict()
        assert all(torch.allclose(sweep.generator(i).state_dict()[k], v, rtol=0, atol=1e-9) for k, v in alone.items())
    e = sweep.epsilons()
    assert 0 < e[0] < e[1] < math.inf and e[2] == math.inf
    tight = BatchedSweep(_shared(arch=MLP, n=20, n_extra=4, q=20 / 300, target_epsilon=0.01),
                         [SweepMember(seed=0, sigma=1.1)], x, y)
    before = tight.member_params[0]["net.0.weight"].detach().clone()
    with pytest.raises(PrivacyError, match="budget"):
        tight.step()
    assert torch.equal(tight.member_params[0]["net.0.weight"], before)


def test_an_empty_sweep_and_an_unknown_forward_mode_are_refused(data):
    with pytest.raises(ConfigError, match="at least one member"):
        BatchedSweep(_shared(), [], *data)
    with pytest.raises(ConfigError, match="forward_mode must be one of.*'grouped'"):
        BatchedSweep(_shared(), [SweepMember(seed=0)], *data, forward_mode="grouped")
    assert BatchedSweep(_shared(), [SweepMember(seed=0)], *data).forward_mode == "loop"  # auto on a CPU


def test_a_cuda_graph_needs_cuda_tensors(data):
    """The graphed sweep (every member's step in one CUDA graph; checked against the eager sweep on a GPU
    in tests/test_fast_step.py) refuses CPU tensors instead of failing inside the capture."""
    x, y = data
    with pytest.raises(ConfigError, match="cuda_graph=True needs CUDA tensors"):
        BatchedSweep(_shared(), [SweepMember(seed=0)], x, y, cuda_graph=True)
    assert BatchedSweep(_shared(), [SweepMember(seed=0)], x, y).cuda_graph is False  # default: on CUDA only


@pytest.mark.parametrize("mode", ["vmap", "loop"])
def test_an_optimizer_by_learning_rate_grid_packs_into_one_sweep(data, mode):
    """ICLR Table 4's grid (optimizer x lr) in ONE batched sweep: each member steps its own optimizer
    over its own parameters, and equals its one-at-a-time run (float64, weights and BN statistics
    to 1e-9, as above). Before, the sweep stepped one shared Adam and refused any other optimizer."""
    x, y = data
    shared = _shared()
    members = [SweepMember(seed=0, optimizer="adam", lr=1e-3), SweepMember(seed=1, optimizer="adam", lr=1e-4),
               SweepMember(seed=2, optimizer="rmsprop", lr=1e-4), SweepMember(seed=3, optimizer="sgd", lr=1e-2)]
    sweep = BatchedSweep(shared, members, x, y, forward_mode=mode)
    assert [type(o).__name__ for o in sweep.opts] == ["Adam", "Adam", "RMSprop", "SGD"]
    assert [o.param_groups[0]["lr"] for o in sweep.opts] == [1e-3, 1e-4, 1e-4, 1e-2]
    for _ in range(2):
        sweep.step()
    for i, mem in enumerate(members):
        alone = train_one(shared, mem, x, y, 2).state_dict()
        batched = sweep.generator(i).state_dict()
        for k, ref in alone.items():
            assert torch.allclose(batched[k].double(), ref.double(), rtol=0, atol=1e-9), (i, k)


@pytest.mark.parametrize("mode", ["vmap", "loop"])
def test_the_packed_sweep_runs_under_the_runs_gpu_levers(data, mode):
    """The batched step takes the one run's levers (tuning.py; issue 42: the packed sweep ignored
    them). bf16 -- the one lever that changes numbers, applicable on a CPU too -- reaches the
    member-by-member forward: the first step's losses move (bf16 rounds the generator's forward) but
    stay within test_fast_step's bound for one run (2e-3 relative), and the images the sanitizers clip
    are float32. Under vmap autocast does not reach functorch's batched convolutions, so the sweep
    drops bf16 (and channels_last) and says so in its tuning rather than claim a lever that changed
    nothing. fused_adam builds every Adam member's optimizer fused in both."""
    from dpsynth.methods.dp_sinkhorn.tuning import StepTuning

    x, y = data[0].float(), data[1]
    shared = _shared(dtype=torch.float32)
    members = [SweepMember(seed=0), SweepMember(seed=1, m=1.0, sigma=0.8, clip=0.3)]
    plain = BatchedSweep(shared, members, x, y, forward_mode=mode).step()
    tuned = BatchedSweep(shared, members, x, y, forward_mode=mode, tuning=StepTuning.of(["bf16"]))
    seen = []
    for san in tuned.sanitizers:
        attach = san.attach
        san.attach = lambda imgs, attach=attach: (seen.append(imgs.dtype), attach(imgs))[1]
    levered = tuned.step()
    assert seen == [torch.float32, torch.float32]
    if mode == "loop":
        assert tuned.tuning.levers == ("bf16",)
        assert not torch.equal(plain, levered), "the bf16 lever did not reach the batched forward"
        assert torch.allclose(levered, plain, rtol=2e-3, atol=0), (levered, plain)
    else:
        assert tuned.tuning.levers == () and torch.equal(plain, levered)
    fused = BatchedSweep(shared, members, x, y, forward_mode=mode, tuning=StepTuning.of(["fused_adam"]))
    assert all(opt.defaults.get("fused") for opt in fused.opts)


def test_one_member_is_the_single_run_bit_for_bit(data):
    """The packed step of ONE member is exactly a run's step (issue 42: one step class, K = 1 is today's
    run): two float32 private steps with the mixed cost equal, bit for bit (torch.equal), the run's
    sequence written out here from its plain pieces -- Poisson batch, latents then n labels (the n' extra
    images take the first n' of them), the forward,
    the member's WholeBatchSanitizer, the unbatched solve, backward, Adam. (A member axis of size one in
    the solve would round the gradient differently: ~6e-8 in float32, measured.) A sweep of one built
    from the sweep's settings is that same run."""
    from dpsynth.methods.dp_sinkhorn.batch import poisson_batch
    from dpsynth.methods.dp_sinkhorn.step import Member, PackedStep, embed_points, fast_forward, step_loss
    from dpsynth.methods.dp_sinkhorn.sweep import member_setup
    from dpsynth.ot.costs import MixedL2L1Cost
    from dpsynth.privacy.sanitizers import WholeBatchSanitizer

    x, y = data[0].float(), data[1]
    shared = _shared(dtype=torch.float32)
    mem = SweepMember(seed=3, m=1.0, sigma=0.9, clip=0.4)
    spec = mem.spec(shared, 10)

    G, opt, gens = member_setup(shared, mem, x.device)
    san = WholeBatchSanitizer(spec.clip, spec.sigma, spec.n, gens["noise"])
    cost, plain = MixedL2L1Cost(spec.m), []
    for _ in range(2):
        xs, ys, w, _ = poisson_batch(x, y, spec.q, gens["data"])
        z = G.sample_latent(spec.n + spec.n_extra, gens["model"])
        labels = G.sample_labels(spec.n, gens["model"])
        labels = torch.cat([labels, labels[:spec.n_extra]])  # the n' extra images: the first n' labels
        imgs = san.attach(fast_forward(G, z, labels))
        loss = step_loss(spec, cost, embed_points(imgs, labels, 10, spec.alpha_c), embed_points(xs, ys, 10, spec.alpha_c), w)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
        plain.append(loss.detach())

    G1, opt1, gens1 = member_setup(shared, mem, x.device)
    packed = PackedStep([Member(G1, opt1, spec, gens1)], x, y)
    losses = [packed()[0] for _ in range(2)]
    assert all(torch.equal(a.reshape(1), b) for a, b in zip(plain, losses))
    assert all(torch.equal(a, b) for a, b in zip(G.state_dict().values(), G1.state_dict().values()))
    one = BatchedSweep(shared, [mem], x, y)
    one.step()
    one.step()
    assert all(torch.equal(a, b) for a, b in zip(G.state_dict().values(), one.generator(0).state_dict().values()))


def test_the_loop_charges_each_packed_members_guard_before_the_step():
    """Driven by the one loop (methods/loop.py::drive, as the pipeline's train-sweep job does), the packed
    step keeps no accountant: the loop charges every member's guard first, so a member past its target
    refuses (PrivacyError) before any member's weights move."""
    from types import SimpleNamespace

    from dpsynth.methods.dp_sinkhorn.sweep import member_guard
    from dpsynth.methods.loop import drive

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(300, 2, generator=g, dtype=torch.float64), torch.zeros(300, dtype=torch.int64)
    shared = _shared(arch=MLP, n=20, n_extra=4, q=20 / 300, target_epsilon=0.01)
    members = [SweepMember(seed=0, sigma=50.0), SweepMember(seed=1, sigma=1.1)]
    sweep = BatchedSweep(_shared(arch=MLP, n=20, n_extra=4, q=20 / 300, target_epsilon=None), members, x, y)
    assert sweep.guards == [None, None]  # the loop's to keep
    guards = [member_guard(shared, m) for m in members]
    before = [{k: v.detach().clone() for k, v in p.items()} for p in sweep.member_params]
    lead = SimpleNamespace(name="t", max_steps_this_run=None, checkpoint_every=100)
    with pytest.raises(PrivacyError, match="budget"):
        drive(lead, sweep, sweep.check, step=0, total_steps=3, log_every=1, logs=[], rows=lambda stats: [],
              epsilons=lambda: [], guards=guards, save=lambda at: None)
    for b, p in zip(before, sweep.member_params):
        assert all(torch.equal(v, p[k]) for k, v in b.items())


@pytest.mark.parametrize("mode", ["vmap", "loop"])
def test_a_sweep_whose_second_member_is_exhausted_refuses_before_any_weight_moves(mode):
    """BatchedSweep.step charges EVERY member's guard before the step: member 0 (sigma 5) has budget for
    hundreds of steps, member 1 (sigma 0.5) for none at epsilon 1, so the step refuses (PrivacyError) and no
    member's weights, nor member 0's, move. (Charging member 0's guard alone -- scripts/privacy-mutations.py -- would let member 1
    step past its target.)"""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(300, 2, generator=g, dtype=torch.float64), torch.zeros(300, dtype=torch.int64)
    shared = _shared(arch=MLP, n=20, n_extra=4, q=20 / 300, target_epsilon=1.0)
    alone = BatchedSweep(shared, [SweepMember(seed=0, sigma=5.0)], x, y, forward_mode=mode)
    alone.step()  # member 0 by itself may step: the refusal below is member 1's
    sweep = BatchedSweep(shared, [SweepMember(seed=0, sigma=5.0), SweepMember(seed=1, sigma=0.5)], x, y,
                         forward_mode=mode)
    before = [{k: v.detach().clone() for k, v in p.items()} for p in sweep.member_params]
    with pytest.raises(PrivacyError, match="budget"):
        sweep.step()
    for b, p in zip(before, sweep.member_params):
        assert all(torch.equal(v, p[k]) for k, v in b.items())
    assert sweep.steps == 0
