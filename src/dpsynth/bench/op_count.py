"""How much work one DP-Sinkhorn step asks of the device, counted without a GPU: the regression guard of
the path a GPU runs (``tests/test_op_count.py``) and ``dpsynth bench ops``.

Why count instead of time: on a GPU the step is a chain of small kernels whose cost is launch latency
(~1.5-2.5 us each inside a CUDA graph), so the number of ops the step dispatches is what its speed follows
-- and it does not depend on the device the sequence is built on. A CPU-only change once replaced
``torch.logsumexp`` with a 15-op composite in the one softmin: the eager step went from 956 to 2,004
dispatcher ops and the graphed H200 step from 335.5 to 286.3 steps/s, and nothing in the suite noticed.
Counted here on the CPU, exactly as the CUDA graph is captured (``PackedStep._capture``): the paper's MNIST
settings, one member, a fixed-capacity Poisson batch (``poisson_fixed``), the softmins as CUDA takes them
(``ot.softmin.exp_floor(False)``: ``torch.logsumexp``), the solve fused as CUDA runs it
(``fused_solve=True``), then ``_loss_backward`` and the optimizer's step -- what one replay launches. The
draws a graphed step makes outside the graph (Poisson mask, latents, labels: host-side ops) are counted
apart; the sanitizer's noise, which a graphed step draws outside too (into its buffer), is drawn inside the
step on the CPU, so it is counted in the replay -- one op (a ``randn``) on the replay's side of the line.

What is counted: every OUTERMOST ATen op the profiler records (an op called from inside another op is
part of it), forward and backward (the autograd engine runs a CPU backward on the calling thread), plus,
for the fused solve, each compiled iteration as the kernels Inductor generated for it
(``torch._inductor.metrics.generated_kernel_count`` over the graphs compiled, read while compiling with
the caches off: a cached graph generates nothing). On the CPU that is Inductor's C++ backend, which
counts each fused loop group of the iteration (12: per half-step a max, a sum of exponentials and an
epilogue, each vectorised); Triton on a GPU may fuse a row's max and sum into one kernel, so this bounds
the GPU's kernels for that region from above -- they are measurable only on a GPU (``benchmarks/gpu.sh``
profiles them). Views (``aten::view``, ``select``, ``unsqueeze``...) launch no kernel on a GPU; they are
counted anyway, as the dispatcher sees them (``ops_launching`` leaves them out).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING, Any

from dpsynth.bench.settings import DCGAN_MNIST, MNIST

if TYPE_CHECKING:
    from torch.profiler import profile

__all__ = ["count_step_ops", "outermost_ops", "VIEW_OPS", "CPU_ONLY_OPS"]

#: Host reads the CPU's Adam makes of its step counters (one per parameter and step): CUDA's capturable Adam
#: keeps the counter on the device and never reads it, and torch refuses ``capturable`` on the CPU, so the
#: count leaves them out (``cpu_adam_host_reads`` reports them). A host read added to the step elsewhere
#: fails the CUDA graph's capture (tests/test_fast_step.py, on a GPU).
CPU_ONLY_OPS = ("aten::item", "aten::_local_scalar_dense")

#: Ops that only make a view (no kernel on a GPU); ``ops_launching`` leaves them out.
VIEW_OPS = frozenset(f"aten::{n}" for n in ("view", "unsqueeze", "squeeze", "select", "slice", "expand", "transpose",
                                            "t", "as_strided", "unbind", "permute", "alias", "detach", "_unsafe_view",
                                            "split", "narrow", "chunk", "view_as", "expand_as", "unflatten"))


def outermost_ops(prof: profile) -> Counter[str]:
    """The outermost ATen ops of a profile, by name (an op inside another op is part of that op)."""
    out: Counter[str] = Counter()
    for ev in prof.events():
        if not ev.name.startswith("aten::"):
            continue
        parent = ev.cpu_parent
        while parent is not None and not parent.name.startswith("aten::"):
            parent = parent.cpu_parent
        if parent is None:
            out[ev.name] += 1
    return out


def _compiled_regions(prof: profile) -> int:
    """Calls into compiled code in a profile (Dynamo's cache lookups: one per compiled softmin call)."""
    return sum(1 for ev in prof.events() if ev.name == "TorchDynamo Cache Lookup")


def count_step_ops(*, fused: bool = True, floor: bool = False, records: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Count one graph-equivalent DP-Sinkhorn step (module docstring) on the CPU.

    ``fused``: the compiled solve (CUDA's default); ``floor``: the floored softmin (the CPU's) instead of
    ``torch.logsumexp`` (CUDA's). ``records``: the size of the synthetic private set (the counts do not
    depend on it beyond the batch capacity's shape). Returns ``ops`` (outermost ATen ops of the replayed
    part, less the CPU Adam's host reads), ``ops_launching`` (those that are not views), ``fused_kernels``
    (the kernels Inductor generated per compiled iteration x compiled calls; 0 unfused), ``per_step``
    (their sum: the figure the guard bounds), ``host_ops`` (the draws made outside the graph), the top
    ops by count and the settings."""
    import torch
    import torch._inductor.config as inductor_config
    import torch._inductor.metrics as inductor_metrics
    from torch._dynamo.utils import counters
    from torch.profiler import ProfilerActivity, profile

    from dpsynth.bench.dp_sinkhorn import _data, _setup
    from dpsynth.methods.dp_sinkhorn.batch import poisson_capacity, poisson_fixed
    from dpsynth.methods.dp_sinkhorn.step import FastStep, StepSpec
    from dpsynth.ot.softmin import exp_floor

    s = MNIST
    dev = torch.device("cpu")
    q = s["batch_size"] / records
    n, ne = s["batch_size"], int(math.floor(s["p"] * s["batch_size"] + 1e-9))
    spec = StepSpec(n=n, n_extra=ne, num_classes=s["num_classes"], alpha_c=s["alpha_c"], eps=s["eps"],
                    n_iter=s["n_iter"], scaling=s["scaling"], m=0.0, clip=s["clip"], sigma=s["sigma"], q=q)
    x_all, y_all = _data(records, dev)
    G, _, gens = _setup(dev, seed)
    # CUDA's Adam: the multi-tensor (foreach) update, as torch picks it for CUDA parameters (the CPU's
    # default is one small update per parameter, which a graphed GPU step never runs)
    opt = torch.optim.Adam(G.parameters(), lr=s["lr"], weight_decay=s["weight_decay"], foreach=True)
    step = FastStep(G, opt, x_all, y_all, spec, gens, cuda_graph=False, fused_solve=fused)
    cap = poisson_capacity(records, q)

    def draw() -> tuple[Any, ...]:
        xs, ys, w, _, _ = poisson_fixed(x_all, y_all, q, gens["data"], cap)
        z, labels = step._draw(0)
        return [z], [labels], xs.unsqueeze(0), ys.unsqueeze(0), w.unsqueeze(0)

    def replay(args: tuple[Any, ...]) -> None:
        step._loss_backward(*args)
        step._optimizer_step()

    with exp_floor(floor):
        kernels_before = inductor_metrics.generated_kernel_count
        graphs_before = counters["stats"]["unique_graphs"]
        with inductor_config.patch(fx_graph_cache=False, force_disable_caches=True):
            if fused:
                torch._dynamo.reset()  # compile afresh, so the kernels are generated (and counted) here
                graphs_before = counters["stats"]["unique_graphs"]
            replay(draw())  # warm-up: compiles the fused iteration, creates Adam's state
        generated = inductor_metrics.generated_kernel_count - kernels_before
        graphs = counters["stats"]["unique_graphs"] - graphs_before
        args = draw()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            replay(args)
        with profile(activities=[ProfilerActivity.CPU]) as host:
            draw()
    ops = outermost_ops(prof)
    host_reads = sum(ops.pop(k, 0) for k in CPU_ONLY_OPS)
    launching = sum(v for k, v in ops.items() if k not in VIEW_OPS)
    calls = _compiled_regions(prof)
    per_call = generated / graphs if graphs else 0.0
    fused_kernels = int(round(per_call * calls))
    total = sum(ops.values())
    return {"ops": total, "ops_launching": launching, "fused_kernels": fused_kernels, "per_step": total + fused_kernels,
            "compiled_calls": calls, "kernels_per_compiled_call": per_call,
            "host_ops": sum(outermost_ops(host).values()), "cpu_adam_host_reads": host_reads,
            "top_ops": dict(ops.most_common(8)),
            "settings": {"fused": fused, "floor": floor, "n_iter": s["n_iter"], "batch": n, "n_extra": ne,
                         "capacity": cap, "generator": DCGAN_MNIST["name"], "torch": torch.__version__}}
