"""Sanitizers: bounded releases whatever the private batch, exactly-once, no NaN release."""

from __future__ import annotations

import pytest
import torch

from dpsynth.errors import PrivacyError
from dpsynth.privacy.sanitizers import ParamGradSanitizer, PerSampleSanitizer, WholeBatchSanitizer, clip_rows

EXTREMES = [1e30, 1e20, 1.0, 1e-30, 1e-45, 0.0]  # huge, ordinary, tiny, subnormal, zero (float32)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("scale", EXTREMES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_clip_never_exceeds_bound(scale: float, dtype: torch.dtype) -> None:
    g = torch.randn(16, 300, generator=_gen(1), dtype=torch.float64).to(dtype) * scale
    g[0] = scale  # a constant row, the worst case for rounding
    clipped, norms = clip_rows(g, 0.5)
    assert torch.isfinite(clipped).all()
    assert (torch.linalg.vector_norm(clipped.double(), dim=1) <= 0.5).all()  # exact, no slack
    if scale <= 1e-30:
        assert torch.equal(clipped, g)  # below the bound nothing changes


def _sinkhorn_like_step(private_target: torch.Tensor, clip: float, sigma: float) -> tuple[torch.Tensor, WholeBatchSanitizer]:
    """One generator update through the whole-batch barrier; returns the parameter change."""
    torch.manual_seed(0)
    gen_net = torch.nn.Linear(4, 6)
    z = torch.rand(5, 4, generator=_gen(2))
    san = WholeBatchSanitizer(clip, sigma, n_private=3, generator=_gen(3))
    x = san.attach(gen_net(z))
    # loss touches private data only through x[:3]; x[3:] meets generated data only
    loss = ((x[:3] - private_target) ** 2).sum() + (x[3:] ** 2).sum() * 1e6
    loss.backward()
    return torch.cat([p.grad.reshape(-1) for p in gen_net.parameters()]), san


@pytest.mark.parametrize("scale", [1e30, 1e10, 1.0, 1e-30])
def test_whole_batch_update_bounded_whatever_private_batch(scale: float) -> None:
    """Noise off, tiny bound: the generator gradient is at most ||J|| * (C + C) for any data."""
    clip = 1e-6
    target = torch.full((3, 6), scale)
    grad, san = _sinkhorn_like_step(target, clip, sigma=0.0)
    assert san.releases == 1
    assert san.last is not None and san.last.clipped_norm <= clip and san.last.noise_norm == 0.0
    # d loss / d theta = J^T g with ||g_private|| <= C and ||g_extra|| <= C; ||J|| here is <= ~10
    assert torch.linalg.vector_norm(grad) <= 2 * clip * 10


def test_whole_batch_noise_only_on_private_part() -> None:
    san = WholeBatchSanitizer(0.5, 1.1, n_private=3, generator=_gen(0))
    g = torch.randn(1, 5, 7, generator=_gen(1)) * 100
    out = san.release_batch(g)
    extra = out[0, 3:]
    # extra images: clipped, NOT noised -> exactly the scaled-down input
    assert torch.linalg.vector_norm(extra) <= 0.5
    assert torch.allclose(extra / torch.linalg.vector_norm(extra), g[0, 3:] / torch.linalg.vector_norm(g[0, 3:]), atol=1e-6)
    assert san.last is not None and san.last.clean_norm > 0.5 and san.last.clipped
    assert san.noise_std == pytest.approx(2 * 0.5 * 1.1)


def test_noise_std_matches_parameters() -> None:
    # 200k noise draws: sample std within 1% of 2*C*sigma (relative sd of the estimate ~0.16%)
    san = WholeBatchSanitizer(0.5, 1.1, n_private=1, generator=_gen(0))
    out = san.release_batch(torch.zeros(1, 1, 200_000))
    assert out.std().item() == pytest.approx(1.1, rel=0.01)
    ps = PerSampleSanitizer(1.0, 1.07, batch_size=32, generator=_gen(0))
    out = ps.release_batch(torch.zeros(1, 32, 6250))
    assert out.std().item() == pytest.approx(2 * (1 / 32) * 1.07, rel=0.01)


def test_hook_fires_exactly_once_and_refuses_second_backward() -> None:
    san = WholeBatchSanitizer(0.5, 1.0, n_private=2, generator=_gen(0))
    w = torch.nn.Parameter(torch.ones(2, 3))
    x = san.attach(w * 2)
    loss = (x**2).sum()
    loss.backward(retain_graph=True)
    assert san.releases == 1
    with pytest.raises(PrivacyError, match="twice"):
        loss.backward()
    assert san.releases == 1


def test_stale_forward_is_refused() -> None:
    san = PerSampleSanitizer(1.0, 1.0, batch_size=2, generator=_gen(0))
    w = torch.nn.Parameter(torch.ones(2, 3))
    old = san.attach(w * 1)
    new = san.attach(w * 2)
    (new.sum()).backward()
    with pytest.raises(PrivacyError):
        old.sum().backward()
    assert san.releases == 1


def test_autograd_path_equals_release_batch() -> None:
    """The audit drives release_batch; the hook must run the very same computation."""
    g = torch.randn(4, 3, generator=_gen(5)) * 10
    san_a = PerSampleSanitizer(1.0, 0.7, batch_size=4, generator=_gen(9))
    w = torch.nn.Parameter(torch.zeros(4, 3))
    (san_a.attach(w) * g).sum().backward()
    san_b = PerSampleSanitizer(1.0, 0.7, batch_size=4, generator=_gen(9))
    assert torch.allclose(w.grad, san_b.release_batch(g[None])[0])


@pytest.mark.parametrize("scale", [1e30, 1.0, 1e-30])
def test_per_sample_each_sample_bounded(scale: float) -> None:
    san = PerSampleSanitizer(1.0, 0.0, batch_size=8, generator=_gen(0))
    g = torch.randn(1, 8, 10, generator=_gen(1)) * scale
    out = san.release_batch(g)
    assert (torch.linalg.vector_norm(out[0].double(), dim=1) <= 1.0 / 8).all()


def test_per_sample_rejects_wrong_batch() -> None:
    san = PerSampleSanitizer(1.0, 1.0, batch_size=8, generator=_gen(0))
    with pytest.raises(PrivacyError, match="batch_size"):
        san.attach(torch.zeros(7, 3, requires_grad=True))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_gradients_are_never_released(bad: float) -> None:
    for san in (
        WholeBatchSanitizer(0.5, 1.0, n_private=2, generator=_gen(0)),
        PerSampleSanitizer(1.0, 1.0, batch_size=3, generator=_gen(0)),
    ):
        w = torch.nn.Parameter(torch.ones(3, 2))
        x = san.attach(w * 1)
        with pytest.raises(PrivacyError, match="non-finite"):
            (x * torch.tensor([[1.0, bad], [1.0, 1.0], [1.0, 1.0]])).sum().backward()
        assert w.grad is None  # nothing reached the generator
    lin = torch.nn.Linear(2, 1)
    ps = ParamGradSanitizer(list(lin.parameters()), 1.0, 1.0, _gen(0))
    (lin(torch.tensor([[bad, 1.0]]))).sum().backward()
    with pytest.raises(PrivacyError, match="non-finite"):
        ps.sanitize_()


def test_param_grad_sanitizer_bounded_and_exactly_once() -> None:
    lin = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Linear(7, 2))
    ps = ParamGradSanitizer(list(lin.parameters()), 1e-3, 0.0, _gen(0))
    (lin(torch.full((4, 5), 1e15)) ** 2).sum().backward()
    stats = ps.sanitize_()
    total = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in lin.parameters()))
    assert total <= 1e-3 and stats.clean_norm > 1e3 and ps.releases == 1
    with pytest.raises(PrivacyError, match="fresh backward"):
        ps.sanitize_()  # no second release without a new backward
    lin.zero_grad()
    loss = lin(torch.ones(1, 5)).sum()
    loss.backward(retain_graph=True)
    with pytest.raises(PrivacyError, match="second backward"):
        loss.backward()  # two private gradients under one clip


def test_param_grad_noise_reproducible_with_generator() -> None:
    outs = []
    for _ in range(2):
        lin = torch.nn.Linear(3, 3)
        torch.nn.init.zeros_(lin.weight), torch.nn.init.zeros_(lin.bias)
        ps = ParamGradSanitizer(list(lin.parameters()), 1.0, 1.0, _gen(42))
        lin(torch.ones(1, 3)).sum().backward()
        ps.sanitize_()
        outs.append(torch.cat([p.grad.reshape(-1) for p in lin.parameters()]))
    assert torch.equal(outs[0], outs[1]) and outs[0].abs().sum() > 0


@pytest.mark.parametrize("kw", [dict(clip=0.0), dict(clip=-1.0), dict(sigma=-0.1), dict(clip=float("nan"))])
def test_bad_parameters_raise(kw: dict) -> None:
    args = dict(clip=0.5, sigma=1.0) | kw
    with pytest.raises(PrivacyError):
        WholeBatchSanitizer(args["clip"], args["sigma"], n_private=1, generator=_gen(0))
    with pytest.raises(PrivacyError):
        WholeBatchSanitizer(0.5, 1.0, n_private=1, generator=None)  # type: ignore[arg-type]
