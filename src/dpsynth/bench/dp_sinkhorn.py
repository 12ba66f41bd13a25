"""The DP-Sinkhorn step benchmark (``dpsynth bench dp-sinkhorn``): time the DP-Sinkhorn training
step against a plain reference.

Everything runs in ONE process on the same data, at the paper's MNIST settings (batch 50,
p = 0.2, eps = 0.05, alpha_c = 15, C = 0.5, sigma = 1.1, DCGAN 28x28, Adam lr 1e-5 wd 2e-5),
with trials of the contenders INTERLEAVED (their order alternates) and the median over
trials reported, because the machine may be shared. Contenders:

* ``reference`` -- :class:`~dpsynth.bench.reference.ReferenceStep`, the published code's step
  (nv-tlabs/DP-Sinkhorn_code, sinkhorn_poisson.py):
  ``SamplesLoss("sinkhorn", p=2, blur=sqrt(eps), scaling=0.5 (default), debias=False,
  backend="tensorized", cost=<its default cost ||x-y||^2 = x2 - 2xy + y2>)`` called twice per
  step (``2 W(X, Y) - W(X, X[n':])``), a tensor hook that clips the whole image gradient with
  ``x.norm().item()`` and adds CPU-drawn noise, ``.item()`` for the logged losses, the Poisson
  batch taken as is (no padding), plain ``G(z, labels)``. Deviation from the published code:
  one generator forward of ``n + n'`` (as our trainer does, methods/dp_sinkhorn/step.py), not two.
* ``fast`` -- :class:`dpsynth.methods.dp_sinkhorn.step.FastStep`, THE step ``dpsynth train``
  runs for every DP-Sinkhorn variant (CUDA graph on a GPU).
* ``fast_eager`` (CUDA only) -- the same FastStep without the CUDA graph, so the graph's own
  share of the speed-up is measured, not assumed. ``paths`` in the JSON says which path each
  contender ran (``cuda_graph`` or ``eager``), read from the step objects themselves.
* ``generator_floor`` -- :class:`~dpsynth.bench.timing.GeneratorFloor`, only the part every
  contender shares: the generator forward
  (:func:`~dpsynth.methods.dp_sinkhorn.step.fast_forward`) on the same ``n + n'`` latents, a
  backward from a trivial loss, and the Adam step -- no OT loss, no sanitizer. No step with
  this generator can run faster, so ``floor / reference`` bounds any speed-up of the step
  (Amdahl). The convolutions' arithmetic (counted from the layer shapes) over the floor's time,
  beside a large matmul's rate in the same process, says how close to the device's peak the
  floor itself is: on a CPU the step is compute-bound, on a GPU it is overhead-bound.

``--sweep K`` also times K configurations (seeds 0..K-1, alternating m in {0, 1}) trained
by :class:`~dpsynth.methods.dp_sinkhorn.sweep.BatchedSweep` (the same step class with K members)
against the same K trained one after another with FastStep (its K = 1). Writes JSON with steps/s, ratios, the load average and the settings.
"""

from __future__ import annotations

import math
import os
import platform
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpsynth.bench.reference import ReferenceStep
from dpsynth.bench.settings import DCGAN_MNIST, MNIST, PAPER_STEPS
from dpsynth.bench.timing import GeneratorFloor, conv_flops, interleaved, matmul_rate
from dpsynth.errors import ConfigError, DpsynthError

if TYPE_CHECKING:  # imported where used: importing the harness does not pay for torch
    import torch


def _settings() -> dict[str, Any]:
    s = dict(MNIST)
    s["q"] = s["batch_size"] / s["records"]
    return s


def _setup(dev: torch.device, seed: int, capturable: bool = False, fused: bool = False
           ) -> tuple[torch.nn.Module, torch.optim.Optimizer, dict[str, torch.Generator]]:
    import torch

    from dpsynth.methods.optim import make_optimizer
    from dpsynth.methods.dp_sinkhorn.plan import latent_generator
    from dpsynth.nets import build_seeded_generator

    s = MNIST
    G = build_seeded_generator(DCGAN_MNIST, seed, dev)
    opt = make_optimizer(G.parameters(), "adam", lr=s["lr"], weight_decay=s["weight_decay"], capturable=capturable,
                         fused=fused)
    gens = {"model": latent_generator(seed, dev),
            **{k: torch.Generator(device=dev).manual_seed(seed * 1000 + i) for i, k in ((2, "data"), (3, "noise"))}}
    gens["noise_cpu"] = torch.Generator().manual_seed(seed * 1000 + 4)
    return G, opt, gens


def _data(records: int, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """MNIST-shaped synthetic records (timing does not depend on pixel values), in [-1, 1]."""
    import numpy as np
    import torch

    from dpsynth.data.dataset import images_to_signed

    rng = np.random.default_rng(0)
    x = torch.from_numpy(images_to_signed(rng.integers(0, 256, (records, 1, 28, 28), dtype=np.uint8), np.float32))
    y = torch.from_numpy(rng.integers(0, 10, records))
    return x.to(dev), y.to(dev)


def bench_dp_sinkhorn(device: str = "cpu", steps: int = 5, trials: int = 5, warmup: int = 2,
                      threads: int | None = None, sweep: int = 0, records: int = MNIST["records"],
                      sweep_mode: str = "auto", levers: Sequence[str] = (), sweep_ks: Sequence[int] = (),
                      sweep_modes: Sequence[str] = ("vmap", "loop")) -> dict[str, Any]:
    """Run the benchmark and return the results (see module docstring)."""
    import torch

    if min(steps, trials) < 1 or warmup < 0:
        raise ConfigError(f"bench: --steps and --trials must be >= 1 and --warmup >= 0, got {steps}, {trials}, {warmup}")
    if device == "cuda" and not torch.cuda.is_available():
        raise DpsynthError("bench: --device cuda but no CUDA device is available")
    if threads is not None and threads < 1:
        raise ConfigError(f"bench: --threads must be >= 1, got {threads}")
    from dpsynth.methods.dp_sinkhorn.tuning import StepTuning

    StepTuning.of(levers)  # an unknown lever fails here, before any timing
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _bench(device, steps, trials, warmup, sweep, records, sweep_mode, tuple(levers), tuple(sweep_ks),
                      tuple(sweep_modes))
    finally:  # a caller in the same process (tests) keeps its own thread count
        torch.set_num_threads(before)


def _with_floor(step: Callable[[], Any], floor: bool | None) -> Callable[[], Any]:
    """``step`` with its softmins floored (True) or not (False) whatever the device (None: the device's
    choice); a graphed step keeps what its capture -- its first call -- dispatched."""
    from dpsynth.ot.softmin import exp_floor

    def call() -> Any:
        with exp_floor(floor):
            return step()

    return call


def _bench(device: str, steps: int, trials: int, warmup: int, sweep: int, records: int,
           sweep_mode: str, levers: tuple[str, ...] = (), sweep_ks: Sequence[int] = (),
           sweep_modes: Sequence[str] = ("vmap", "loop")) -> dict[str, Any]:
    import torch

    from dpsynth.methods.dp_sinkhorn.step import FastStep, StepSpec
    from dpsynth.methods.dp_sinkhorn.tuning import StepTuning

    dev = torch.device(device)
    s = _settings()
    s["records"] = records
    s["q"] = s["batch_size"] / records
    x_all, y_all = _data(records, dev)
    n, ne = s["batch_size"], int(math.floor(s["p"] * s["batch_size"] + 1e-9))
    spec = StepSpec(n=n, n_extra=ne, num_classes=10, alpha_c=s["alpha_c"], eps=s["eps"], n_iter=s["n_iter"],
                    scaling=s["scaling"], m=0.0, clip=s["clip"], sigma=s["sigma"], q=s["q"])

    G_r, opt_r, gens_r = _setup(dev, 0)
    ref = ReferenceStep(G_r, opt_r, x_all, y_all, s, gens_r)
    G_f, opt_f, gens_f = _setup(dev, 0, capturable=dev.type == "cuda")
    fast = FastStep(G_f, opt_f, x_all, y_all, spec, gens_f)
    # the floor runs as production does: in a CUDA graph on a GPU (the fast step's path)
    G_0, opt_0, gens_0 = _setup(dev, 0, capturable=dev.type == "cuda")
    floor = GeneratorFloor(G_0, opt_0, n + ne, gens_0["model"], cuda_graph=fast.cuda_graph)
    contenders: dict[str, Callable[[], Any]] = {"reference": ref, "fast": fast, "generator_floor": floor}
    graph_or_eager = "cuda_graph" if fast.cuda_graph else "eager"
    paths = {"reference": "eager", "fast": graph_or_eager, "generator_floor": graph_or_eager}
    steps_to_check = []  # every FastStep timed here, its release flags read once the timing is done
    for i in range(len(levers)):  # the levers added one at a time, each contender on its own generator
        tuning = StepTuning.of(levers[: i + 1])
        name = "fast+" + "+".join(tuning.levers)
        G_t, opt_t, gens_t = _setup(dev, 0, capturable=dev.type == "cuda", fused=tuning.fused_adam)
        steps_to_check.append(FastStep(G_t, opt_t, x_all, y_all, spec, gens_t, tuning=tuning))
        contenders[name], paths[name] = steps_to_check[-1], graph_or_eager
    if levers:  # the floor with every lever: what the levers leave for the step's own work
        all_levers = StepTuning.of(levers)
        G_l, opt_l, gens_l = _setup(dev, 0, capturable=dev.type == "cuda", fused=all_levers.fused_adam)
        name = "generator_floor+" + "+".join(all_levers.levers)
        contenders[name] = GeneratorFloor(G_l, opt_l, n + ne, gens_l["model"], cuda_graph=fast.cuda_graph,
                                          tuning=all_levers)
        paths[name] = graph_or_eager
    # The solve's two choices (issue 68 items 1-2), each beside the default path of this device: on CUDA the
    # graphed step unfused, and unfused with the CPU's floored softmin (the path 267f004 put on the GPU); on
    # the CPU the eager step with torch.logsumexp (the unfloored softmin the floor replaced there).
    variants = ({"fast_unfused": (False, None), "fast_unfused_floored": (False, True)} if dev.type == "cuda"
                else {"fast_logsumexp": (False, False)})
    for name, (fused, floor) in variants.items():
        G_v, opt_v, gens_v = _setup(dev, 0, capturable=dev.type == "cuda")
        st = FastStep(G_v, opt_v, x_all, y_all, spec, gens_v, fused_solve=fused)
        contenders[name], paths[name] = _with_floor(st, floor), graph_or_eager
        steps_to_check.append(st)
    paths["fast"] = f"{graph_or_eager}{'+fused' if fast.fused_solve else ''}"
    fast_eager = None
    if dev.type == "cuda":  # the graph's share of the fast step's speed, measured beside it
        G_e, opt_e, gens_e = _setup(dev, 0)
        fast_eager = FastStep(G_e, opt_e, x_all, y_all, spec, gens_e, cuda_graph=False)
        contenders["fast_eager"] = fast_eager
        paths["fast_eager"] = "eager"
    load_before = os.getloadavg()
    res = interleaved(contenders, steps, trials, warmup, dev)
    for checked in (fast, fast_eager, *steps_to_check):
        if checked is not None:
            checked.check()
    out: dict[str, Any] = {
        "device": device, "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor()
        or platform.machine(), "torch": torch.__version__, "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(), "settings": {k: v for k, v in s.items()}, "steps_per_trial": steps,
        "trials": trials, "warmup": warmup, "steps": res, "paths": paths, "fast_path": paths["fast"],
        "ratio_fast_over_reference": res["fast"]["steps_per_s"] / res["reference"]["steps_per_s"],
        "reference_settings": "geomloss.SamplesLoss('sinkhorn', p=2, blur=sqrt(eps), scaling=0.5, debias=False, "
                              "backend='tensorized', cost=||x-y||^2 (published default)), called twice per step; "
                              "hook sanitizer with .item(); one generator forward of n+n'",
    }
    fl = res["generator_floor"]["steps_per_s"]
    zf = G_0.sample_latent(n + ne, gens_0["model"])
    flops = 3.0 * conv_flops(G_0, zf, G_0.sample_labels(n + ne, gens_0["model"]))  # forward + 2 backward
    peak = matmul_rate(dev)
    out["floor"] = {
        "bound_over_reference": fl / res["reference"]["steps_per_s"],
        "fast_share_of_floor": res["fast"]["steps_per_s"] / fl,
        "conv_gflop_per_step": flops / 1e9,
        "conv_gflops_at_floor": flops * fl / 1e9,
        "matmul_gflops": peak / 1e9,
        "note": "bound_over_reference = the largest fast/reference ratio any step with this generator can reach "
                "here (its forward, backward and Adam alone); conv GFLOP/s at the floor vs a 2048^2 matmul's "
                "rate says whether the floor is compute (near the matmul rate) or overhead (far below)",
    }
    if "fast_eager" in res:
        out["ratio_cuda_graph_over_eager"] = res["fast"]["steps_per_s"] / res["fast_eager"]["steps_per_s"]
    if levers:
        out["levers"] = {"order": list(levers), "over_fast": {
            k: v["steps_per_s"] / res["fast"]["steps_per_s"] for k, v in res.items() if k.startswith("fast+")},
            "note": "each fast+... contender adds one lever to the one before (methods/dp_sinkhorn/tuning.py); "
                    "bf16 changes the numbers within the bound tests/test_fast_step.py states"}
    out["projected_paper_run_hours"] = {k: PAPER_STEPS / v["steps_per_s"] / 3600 for k, v in res.items()}
    if sweep:
        out["sweep"] = _bench_sweep(sweep, dev, x_all, y_all, s, steps, trials, warmup, sweep_mode, levers)
    if sweep_ks:
        out["packing"] = bench_packing(sweep_ks, sweep_modes, dev, x_all, y_all, s, steps, trials, warmup)
    load_after = os.getloadavg()
    out["loadavg_before"], out["loadavg_after"] = list(load_before), list(load_after)
    return out


def _bench_sweep(k: int, dev: torch.device, x_all: torch.Tensor, y_all: torch.Tensor, s: dict[str, Any],
                 steps: int, trials: int, warmup: int, mode: str = "auto", levers: Sequence[str] = ()) -> dict[str, Any]:
    """The batched sweep of ``k`` against ``k`` eager runs one after another; ``levers``: the GPU levers
    the batched step runs with (on CUDA; as a run with those ``gpu_levers`` would)."""
    from dpsynth.methods.dp_sinkhorn.step import FastStep
    from dpsynth.methods.dp_sinkhorn.sweep import BatchedSweep, SweepMember, SweepShared, member_setup
    from dpsynth.methods.dp_sinkhorn.tuning import StepTuning

    if k < 1:
        raise ConfigError(f"bench: --sweep must be >= 1, got {k}")
    arch = DCGAN_MNIST
    n = s["batch_size"]
    shared = SweepShared(arch=arch, n=n, n_extra=int(math.floor(s["p"] * n + 1e-9)), q=s["q"], alpha_c=s["alpha_c"],
                         eps=s["eps"], n_iter=s["n_iter"], scaling=s["scaling"], lr=s["lr"],
                         weight_decay=s["weight_decay"])
    members = [SweepMember(seed=i, m=float(i % 2), sigma=s["sigma"], clip=s["clip"]) for i in range(k)]
    tuning = StepTuning.for_run(levers, dev)
    batched = BatchedSweep(shared, members, x_all, y_all, forward_mode=mode, tuning=tuning)
    singles = []
    for mem in members:
        G, opt, gens = member_setup(shared, mem, dev)
        singles.append(FastStep(G, opt, x_all, y_all, mem.spec(shared, 10), gens, cuda_graph=False))

    def one_after_another() -> None:
        for st in singles:
            st()

    res = interleaved({"batched": batched.step, "sequential": one_after_another}, steps, trials, warmup, dev)
    # Each call advances all k configurations by one step: configuration-steps/s = k * calls/s.
    thr = {name: k * v["steps_per_s"] for name, v in res.items()}
    return {"configs": k, "forward_mode": batched.forward_mode, "gpu_levers": list(tuning.levers),
            "config_steps_per_s": thr, "trials": res,
            "paths": {"batched": "cuda_graph" if getattr(batched, "cuda_graph", False) else "eager",
                      "sequential": "cuda_graph" if any(st.cuda_graph for st in singles) else "eager"},
            "ratio_batched_over_sequential": thr["batched"] / thr["sequential"],
            "members": [{"seed": m.seed, "m": m.m, "sigma": m.sigma, "clip": m.clip} for m in members]}


def bench_packing(ks: Sequence[int], modes: Sequence[str], dev: torch.device, x_all: torch.Tensor,
                  y_all: torch.Tensor, s: dict[str, Any], steps: int, trials: int, warmup: int) -> dict[str, Any]:
    """Packed sweeps of K members for every K in ``ks`` and forward mode in ``modes`` (vmap: one grouped
    forward; loop: member by member), timed interleaved; per mode the fit ``T(K) = a + b K`` (ms per packed
    step, least squares over the Ks) that ``dpsynth workflow budget`` prices a packed job with."""
    import numpy as np

    from dpsynth.methods.dp_sinkhorn.sweep import BatchedSweep, SweepMember, SweepShared

    if not ks or min(ks) < 1:
        raise ConfigError(f"bench: --sweep-ks must be integers >= 1, got {list(ks)}")
    n = s["batch_size"]
    shared = SweepShared(arch=DCGAN_MNIST, n=n, n_extra=int(math.floor(s["p"] * n + 1e-9)), q=s["q"],
                         alpha_c=s["alpha_c"], eps=s["eps"], n_iter=s["n_iter"], scaling=s["scaling"], lr=s["lr"],
                         weight_decay=s["weight_decay"])
    contenders = {}
    for mode in modes:
        for k in ks:
            members = [SweepMember(seed=i, m=float(i % 2), sigma=s["sigma"], clip=s["clip"]) for i in range(k)]
            contenders[f"{mode}_K{k}"] = BatchedSweep(shared, members, x_all, y_all, forward_mode=mode).step
    res = interleaved(contenders, steps, trials, warmup, dev)
    thr = {mode: {k: k * res[f"{mode}_K{k}"]["steps_per_s"] for k in ks} for mode in modes}
    fits = {}
    for mode in modes:
        if len(ks) >= 2:
            ms = [1000.0 / res[f"{mode}_K{k}"]["steps_per_s"] for k in ks]
            b, a = np.polyfit(np.asarray(ks, dtype=float), np.asarray(ms), 1)
            fits[mode] = {"a_ms": float(a), "b_ms": float(b), "ceiling_config_steps_per_s": 1000.0 / float(b)
                          if b > 0 else None}
    return {"ks": list(ks), "modes": list(modes), "config_steps_per_s": thr, "fit_T_of_K": fits, "trials": res,
            "note": "T(K) = a + b K milliseconds per packed step of K members; config-steps/s = K / T(K)"}


def print_summary(out: dict[str, Any]) -> None:
    """The benchmark's results (:func:`bench_dp_sinkhorn`) as a few lines on stdout."""
    r = out["steps"]
    line = ", ".join(f"{k} {v['steps_per_s']:.3f} steps/s" for k, v in r.items())
    print(f"[{out['device']}, {out['threads']} threads, load {out['loadavg_before'][0]:.2f}] {line}; "
          f"fast/reference = {out['ratio_fast_over_reference']:.2f}x (fast: {out['fast_path']})")
    if "ratio_cuda_graph_over_eager" in out:
        print(f"CUDA graph: fast {r['fast']['steps_per_s']:.1f} vs the same step eager "
              f"{r['fast_eager']['steps_per_s']:.1f} steps/s = {out['ratio_cuda_graph_over_eager']:.2f}x")
    fl = out["floor"]
    print(f"floor: generator alone bounds fast/reference at {fl['bound_over_reference']:.2f}x; fast reaches "
          f"{fl['fast_share_of_floor']:.0%} of the floor; convolutions {fl['conv_gflop_per_step']:.2f} GFLOP/step at "
          f"{fl['conv_gflops_at_floor']:.0f} GFLOP/s vs matmul {fl['matmul_gflops']:.0f} GFLOP/s")
    if "levers" in out:
        print("levers (cumulative): " + ", ".join(f"{k} {r[k]['steps_per_s']:.1f} steps/s ({v:.2f}x)"
                                                  for k, v in out["levers"]["over_fast"].items()))
    if "packing" in out:
        pk = out["packing"]
        for mode, per_k in pk["config_steps_per_s"].items():
            fit = pk["fit_T_of_K"].get(mode)
            print(f"packed ({mode}): " + ", ".join(f"K={k} {v:.1f}" for k, v in per_k.items()) + " config-steps/s"
                  + (f"; T(K) = {fit['a_ms']:.3f} + {fit['b_ms']:.3f} K ms" if fit else ""))
    if "sweep" in out:
        sw = out["sweep"]
        print(f"sweep of {sw['configs']} ({sw['forward_mode']}): batched {sw['config_steps_per_s']['batched']:.3f} vs one-after-another "
              f"{sw['config_steps_per_s']['sequential']:.3f} config-steps/s = {sw['ratio_batched_over_sequential']:.2f}x")


def bench_and_report(device: str, steps: int, trials: int, warmup: int, threads: int | None, sweep: int,
                     records: int, sweep_mode: str = "auto", json_path: Path | None = None,
                     levers: Sequence[str] = (), sweep_ks: Sequence[int] = (),
                     sweep_modes: Sequence[str] = ("vmap", "loop")) -> dict[str, Any]:
    """``dpsynth bench dp-sinkhorn``: run the benchmark, print its summary and write the results
    to ``json_path`` (when given); returns them."""
    from dpsynth.io import write_json

    out = bench_dp_sinkhorn(device, steps, trials, warmup, threads, sweep, records, sweep_mode=sweep_mode,
                            levers=levers, sweep_ks=sweep_ks, sweep_modes=sweep_modes)
    print_summary(out)
    if json_path is not None:
        write_json(json_path, out)
    return out
