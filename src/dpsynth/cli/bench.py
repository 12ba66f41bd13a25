"""`dpsynth bench dp-sinkhorn`: the command line of the DP-Sinkhorn step benchmark.

Only the arguments live here; the harness -- the contenders (the published code's step, the
fast step, the generator-only floor), the interleaved timing, the batched sweep (``--sweep``,
methods/dp_sinkhorn/sweep.py), what is printed and the JSON -- is :mod:`dpsynth.bench.dp_sinkhorn`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dpsynth.bench.settings import MNIST
from dpsynth.errors import ConfigError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("bench", help="time training steps against a plain reference")
    sub = p.add_subparsers(dest="bench_target", metavar="<target>")
    sub.required = True
    q = sub.add_parser("dp-sinkhorn", help="DP-Sinkhorn step: fast vs published-style reference")
    q.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    q.add_argument("--steps", type=int, default=5, help="steps per trial per contender")
    q.add_argument("--trials", type=int, default=5, help="interleaved trials (median reported)")
    q.add_argument("--warmup", type=int, default=2, help="untimed steps per contender first")
    q.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    q.add_argument("--sweep", type=int, default=0, help="also time a batched sweep of this many configurations")
    q.add_argument("--sweep-mode", default="auto", choices=["auto", "vmap", "loop"],
                   help="batched sweep's generator forward (auto: vmap on CUDA, loop on CPU)")
    q.add_argument("--sweep-ks", default="", metavar="K1,K2,...",
                   help="also time packed sweeps of each of these sizes and fit T(K) = a + bK (e.g. 1,2,4,8,16)")
    q.add_argument("--sweep-modes", default="vmap,loop", metavar="M1,M2",
                   help="forward modes of the --sweep-ks packing (vmap, loop; default both)")
    q.add_argument("--records", type=int, default=MNIST["records"], help="synthetic MNIST-shaped records")
    q.add_argument("--levers", default="", metavar="L1,L2|all",
                   help="also time the fast step with these GPU levers added one at a time (cumulative), and the "
                        "floor with all of them: cudnn_benchmark, channels_last, fused_adam, bf16, or all")
    q.add_argument("--json", type=Path, default=None, help="write the results here")
    q.set_defaults(func=run_dp_sinkhorn)
    o = sub.add_parser("ops", help="DP-Sinkhorn step: dispatcher ops per path (the suite's guard) and, on a GPU, "
                                   "the graphed step's kernels by class")
    o.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    o.add_argument("--steps", type=int, default=50, help="graph replays profiled per path (CUDA)")
    o.add_argument("--json", type=Path, default=None, help="write the results here")
    o.set_defaults(func=run_ops)


def run_ops(args: argparse.Namespace) -> int:
    from dpsynth.bench.kernel_profile import bench_ops
    from dpsynth.io import write_json

    if args.steps < 1:
        raise ConfigError(f"bench ops: --steps must be >= 1, got {args.steps}")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ConfigError("bench ops: --device cuda but no CUDA device is available")
    out = bench_ops(args.device, args.steps)
    for name, c in out["op_counts"].items():
        print(f"{name}: {c['per_step']} per step ({c['ops']} dispatcher ops + {c['fused_kernels']} fused kernels; "
              f"{c['host_ops']} host ops outside the graph)")
    for p in out.get("graphed_step_profile", []):
        top = ", ".join(f"{k} {v['kernels_per_step']:.0f}/{v['us_per_step']:.0f} us" for k, v in p["classes"].items())
        print(f"graphed step fused={p['fused']} floor={p['floor']}: {p['kernels_per_step']:.0f} kernels, "
              f"{p['device_us_per_step']:.0f} us of device time per step ({top})")
    if args.json is not None:
        write_json(args.json, out)
    return 0


def run_dp_sinkhorn(args: argparse.Namespace) -> int:
    from dpsynth.bench.dp_sinkhorn import bench_and_report

    from dpsynth.methods.dp_sinkhorn.tuning import LEVERS

    levers = LEVERS if args.levers == "all" else tuple(v.strip() for v in args.levers.split(",") if v.strip())
    try:
        ks = tuple(int(v) for v in args.sweep_ks.split(",") if v.strip())
    except ValueError:
        raise ConfigError(f"bench: --sweep-ks takes integers separated by commas, got {args.sweep_ks!r}") from None
    modes = tuple(v.strip() for v in args.sweep_modes.split(",") if v.strip())
    bad = [m for m in modes if m not in ("vmap", "loop")]
    if bad or not modes:
        raise ConfigError(f"bench: --sweep-modes takes vmap and/or loop, got {args.sweep_modes!r}")
    bench_and_report(args.device, args.steps, args.trials, args.warmup, args.threads, args.sweep, args.records,
                     sweep_mode=args.sweep_mode, json_path=args.json, levers=levers, sweep_ks=ks, sweep_modes=modes)
    return 0
