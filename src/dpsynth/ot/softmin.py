"""The softmin of a log-domain Sinkhorn iteration, ``-eps log sum_j exp(h_j - C_ij / eps)``, per device.

Every exponential of a cost matrix goes through :func:`logsumexp_floored` / :func:`exp_floored`: terms more than
``EXP_FLOOR`` (80) below a row's largest are counted as ``exp(-80)`` or zero. At an entropic
temperature most entries of ``-C / eps`` lie hundreds below the row's maximum, and the CPU's
vectorised ``exp`` takes a scalar slow path for every argument whose result would be subnormal
(measured with torch 2.14 on an AVX-512 EPYC: 40,000 arguments in [-150, 0] take 12x as long as
in [-20, 0]); flooring them changes no representable result (see ``logsumexp_floored``).
That floor is a CPU fix: on CUDA ``exp`` has no slow path, and the floored composite costs ~15
kernels where ``torch.logsumexp`` costs a few (it took the graphed GPU step from 335.5 to 286.3
steps/s on an H200), so the softmin floors where its tensors live on the CPU and calls
``torch.logsumexp`` elsewhere (:func:`floors_exp`; :func:`exp_floor` forces either, for tests and
benchmarks).

**The fused solve.** With a fixed ``n_iter`` and no ``tol`` the loop is a fixed chain of ~20 small
ops per half-step (1,200-2,500 per solve) whose cost on a GPU is launch latency, not arithmetic.
``fused=True`` runs the SAME loop (``sinkhorn.sinkhorn_loop``) with each iteration -- both half-steps
over this module's :func:`_softmin` -- compiled once per shape by ``torch.compile(fullgraph=True)``
(``dpsynth.compiling.compiled``): Inductor fuses each half-step into a few kernels, which a CUDA graph then captures
like any other. The eager loop stays the
reference; tests hold the two within float32 rounding.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch
from torch import Tensor


__all__ = ["EXP_FLOOR", "logsumexp_floored", "exp_floored", "floors_exp", "exp_floor", "softmin_logsumexp",
           "CachedKernelSoftmin"]

EXP_FLOOR = -80.0


def logsumexp_floored(a: Tensor, dim: int = -1) -> Tensor:
    """``log sum exp(a)`` over ``dim`` with every term more than 80 below the largest raised to
    ``exp(-80)`` relative to it (its gradient there is zero), instead of ``torch.logsumexp``.

    Why: the terms of a Sinkhorn softmin span hundreds of units, and the CPU's ``exp`` is ~12x
    slower on arguments whose result is subnormal (module docstring); clamping at -80 keeps every
    ``exp`` on the fast path (the softmin 7x faster at 200 x 200). Why it changes nothing: the
    largest term contributes exactly 1, so the sum is >= 1 and floored terms add at most
    ``n * exp(-80) = n * 1.8e-35`` to it -- below half a float64 ulp (1.1e-16) for any n under
    10^18, so the rounded sum and its log are those of the unfloored sum up to summation order.
    A zero-weight column (``-inf``) adds that much too: as absent as in ``torch.logsumexp``.
    A slice that is ``-inf`` throughout gives ``-inf`` (as ``torch.logsumexp``).
    """
    m = a.detach().amax(dim, keepdim=True)
    finite = torch.isfinite(m)
    m = torch.where(finite, m, torch.zeros_like(m))
    d = a - m
    if torch.is_grad_enabled() and a.requires_grad:
        s = d.clamp_min(EXP_FLOOR).exp().sum(dim)  # out of place: autograd keeps what it saved
    else:
        s = d.clamp_min_(EXP_FLOOR).exp_().sum(dim)
    out = s.log() + m.squeeze(dim)
    return torch.where(finite.squeeze(dim), out, torch.full_like(out, -math.inf))


def exp_floored(log_p: Tensor) -> Tensor:
    """``exp(log_p)`` with arguments at or below ``EXP_FLOOR`` giving exactly 0 (a transport plan:
    entries below 1.8e-35 carry no mass a float can hold beside the plan's total of 1), on the
    fast path of ``exp`` (see ``logsumexp_floored``)."""
    return log_p.clamp_min(EXP_FLOOR).exp().masked_fill(log_p <= EXP_FLOOR, 0.0)


_FORCED_FLOOR: ContextVar[bool | None] = ContextVar("dpsynth_exp_floor", default=None)


def floors_exp(t: Tensor) -> bool:
    """Whether a softmin over ``t`` floors its exponentials: on the CPU yes (the subnormal slow path of
    its vectorised ``exp``, module docstring), elsewhere no (``torch.logsumexp``: a few kernels instead of
    ~15) -- unless :func:`exp_floor` forces one path."""
    forced = _FORCED_FLOOR.get()
    return t.device.type == "cpu" if forced is None else forced


@contextmanager
def exp_floor(enabled: bool | None) -> Iterator[None]:
    """Within the block, every softmin floors (True) or calls ``torch.logsumexp`` (False) on any device;
    None restores the per-device choice. For the tests (both paths on the CPU; the op-count guard of the
    GPU's path) and the benchmark (floored vs logsumexp on a GPU). The two agree to float rounding."""
    token = _FORCED_FLOOR.set(enabled)
    try:
        yield
    finally:
        _FORCED_FLOOR.reset(token)


def softmin_logsumexp(a: Tensor, dim: int = -1, floor: bool | None = None) -> Tensor:
    """``log sum exp(a)`` over ``dim`` the way this device's softmin takes it: :func:`logsumexp_floored`
    where :func:`floors_exp` says so (``floor`` overrides), else ``torch.logsumexp``."""
    if floor if floor is not None else floors_exp(a):
        return logsumexp_floored(a, dim)
    return torch.logsumexp(a, dim)


def _softmin(eps: Tensor | float, c: Tensor, h: Tensor, floor: bool | None = None) -> Tensor:
    """``-eps * log sum_j exp(h_j - C_ij / eps)`` over the last dim (h = log w + g / eps).

    ``eps`` is a float or a tensor broadcastable to the potentials' shape (..., 1); ``floor``: see
    :func:`softmin_logsumexp`.
    """
    eps_mat = eps.unsqueeze(-1) if isinstance(eps, Tensor) else eps
    return -eps * softmin_logsumexp(h.unsqueeze(-2) - c / eps_mat, dim=-1, floor=floor)


class CachedKernelSoftmin:
    """``_softmin(e, c, h)`` over the last axis of ``c``, from a kernel computed once and reused
    while the temperature stays put and ``h`` stays within ``DRIFT`` of where it was computed.

    Why: at a fixed temperature (no eps-scaling: Reshetova et al.'s L = 200 iterations at
    lambda = 2 s^2) every log-domain softmin exponentiates the whole (N, M) matrix again. With
    ``h0`` and ``f0 = softmin(h0)`` the kernel ``K0_ij = exp(h0_j - C_ij / e + f0_i / e)`` has
    rows that sum to one, and for any later ``h``

        softmin(h)_i = f0_i - e * log sum_j K0_ij exp(h_j - h0_j)

    exactly -- a matrix-vector product instead of N x M exponentials (Schmitzer's absorption,
    arXiv:1610.06519, in our potentials). Stability: while ``|h - h0| <= DRIFT`` (30) every row
    sum lies in [e^-30, e^30], so nothing overflows, and the kernel entries ``exp_floored`` sets
    to zero (below e^-80) would add at most e^-50 relative to it -- below float32's resolution.
    Past that, or when ``e`` changes, the kernel is recomputed from the current ``h`` (that call
    is the log-domain softmin itself). Reads the host once per call (the drift check): for CPU
    solves, not CUDA graphs or ``vmap``.
    """

    DRIFT = 30.0

    def __init__(self, c: Tensor) -> None:
        self.c = c
        self.e0: Tensor | None = None

    def __call__(self, e: Tensor | float, h: Tensor) -> Tensor:
        e_t = e if isinstance(e, Tensor) else torch.tensor(e, dtype=h.dtype, device=h.device)
        if self.e0 is not None and torch.equal(e_t, self.e0):
            d = h - self.h0
            if self.dead is not None:
                d = d.masked_fill(self.dead, 0.0)
            if float(d.abs().amax()) <= self.DRIFT:
                s = (self.k @ d.exp().unsqueeze(-1)).squeeze(-1)
                return self.f0 - e_t * s.log()
        # (re)compute the kernel at this h: the log-domain softmin, then its normalised exponent
        eps_mat = e_t.unsqueeze(-1) if e_t.ndim else e_t
        arg = h.unsqueeze(-2) - self.c / eps_mat
        lse = logsumexp_floored(arg, dim=-1)
        self.k = exp_floored(arg - lse.unsqueeze(-1))
        dead = ~torch.isfinite(h)  # zero-weight columns: -inf in h and h0, a zero column of K0
        self.dead = dead if bool(dead.any()) else None
        self.h0 = h if self.dead is None else h.masked_fill(dead, 0.0)
        self.e0, self.f0 = e_t.clone(), -e_t * lse
        return self.f0
