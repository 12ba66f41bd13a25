"""``dpsynth bench ops``: what one DP-Sinkhorn step launches -- the dispatcher ops counted on any device
(:mod:`dpsynth.bench.op_count`, the suite's guard) and, on a GPU, the kernels of one graphed step replay,
profiled, by class and time.

Why both: the count is the guard a CPU can run; the profile is what it stands for on the device (kernels per
step, and where the time goes: the generator's convolutions and GEMMs, the Sinkhorn solve's fused or
unfused kernels, Adam, the sanitizer). Each path is profiled as production runs it -- the step captured in a
CUDA graph -- fused (the default), unfused, and unfused with the CPU's floored softmin (the path commit
267f004 put on the GPU), so the JSON says what each choice costs in kernels and microseconds.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

__all__ = ["kernel_class", "profile_graphed_step", "bench_ops"]

#: Kernel name patterns -> class, first match wins (cuDNN/cuBLAS/Triton/ATen kernel names).
_CLASSES = (
    ("sinkhorn (fused, Triton)", re.compile(r"^triton_")),
    ("convolution", re.compile(r"conv|cudnn|implicit_gemm|dgrad|wgrad|fprop", re.I)),
    ("gemm", re.compile(r"gemm|cutlass|sm\d+_xmma|ampere_|hopper_|cublas", re.I)),
    ("adam", re.compile(r"adam|multi_tensor_apply", re.I)),
    ("reduction", re.compile(r"reduce|logsumexp|norm|softmax", re.I)),
    ("random", re.compile(r"philox|normal|uniform|bernoulli|random", re.I)),
    ("elementwise", re.compile(r"elementwise|vectorized|unrolled|copy|fill", re.I)),
)


def kernel_class(name: str) -> str:
    """The class of a CUDA kernel by its name (``_CLASSES``; "other" when none matches)."""
    for label, rx in _CLASSES:
        if rx.search(name):
            return label
    return "other"


def profile_graphed_step(fused: bool, floor: bool | None, steps: int = 50, seed: int = 0) -> dict[str, Any]:
    """Profile ``steps`` replays of the paper-MNIST FastStep's CUDA graph (after its capture and a few
    untimed replays): kernels per step, and per kernel class the kernels and device microseconds per step."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from dpsynth.bench.dp_sinkhorn import _data, _settings, _setup, _with_floor
    from dpsynth.methods.dp_sinkhorn.step import FastStep, StepSpec

    dev = torch.device("cuda")
    s = _settings()
    n, ne = s["batch_size"], int(s["p"] * s["batch_size"] + 1e-9)
    spec = StepSpec(n=n, n_extra=ne, num_classes=10, alpha_c=s["alpha_c"], eps=s["eps"], n_iter=s["n_iter"],
                    scaling=s["scaling"], m=0.0, clip=s["clip"], sigma=s["sigma"], q=s["q"])
    x_all, y_all = _data(s["records"], dev)
    G, opt, gens = _setup(dev, seed, capturable=True)
    step = _with_floor(FastStep(G, opt, x_all, y_all, spec, gens, fused_solve=fused), floor)
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    count: dict[str, int] = defaultdict(int)
    micros: dict[str, float] = defaultdict(float)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA and not ev.name.startswith(("Memcpy", "Memset")):
            label = kernel_class(ev.name)
            count[label] += 1
            micros[label] += ev.device_time_total if hasattr(ev, "device_time_total") else ev.cuda_time_total
    total = sum(count.values())
    return {"fused": fused, "floor": floor, "steps": steps, "kernels_per_step": total / steps,
            "device_us_per_step": sum(micros.values()) / steps,
            "classes": {k: {"kernels_per_step": count[k] / steps, "us_per_step": micros[k] / steps}
                        for k in sorted(count, key=lambda k: -micros[k])},
            "note": "" if total else "the profiler recorded no kernel inside the graph replays (CUPTI without "
                                     "graph kernel records): count the eager step instead"}


def bench_ops(device: str = "cpu", steps: int = 50) -> dict[str, Any]:
    """The op counts of every path (on the CPU, as the guard counts them) and, on CUDA, the kernel profile
    of the graphed step fused, unfused, and unfused with the floored softmin."""
    from dpsynth.bench.op_count import count_step_ops

    import datetime

    import torch

    out: dict[str, Any] = {"device": device, "date": datetime.date.today().isoformat(), "torch": torch.__version__,
                           "op_counts": {
        "fused (CUDA default)": count_step_ops(fused=True, floor=False),
        "unfused, torch.logsumexp": count_step_ops(fused=False, floor=False),
        "unfused, floored (the CPU's softmin)": count_step_ops(fused=False, floor=True)}}
    if device == "cuda":
        out["graphed_step_profile"] = [profile_graphed_step(f, fl, steps) for f, fl in
                                       ((True, None), (False, None), (False, True))]
    return out
