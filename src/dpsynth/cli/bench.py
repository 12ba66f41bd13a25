"""`dpsynth bench dp-sinkhorn`: the command line of the DP-Sinkhorn step benchmark.

Only the arguments live here; the harness -- the contenders (the published code's step, the
fast step, the generator-only floor), the interleaved timing, the batched sweep (``--sweep``,
methods/dp_sinkhorn/sweep.py), what is printed and the JSON -- is :mod:`dpsynth.bench.dp_sinkhorn`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dpsynth.bench.settings import MNIST


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
    q.add_argument("--records", type=int, default=MNIST["records"], help="synthetic MNIST-shaped records")
    q.add_argument("--levers", default="", metavar="L1,L2|all",
                   help="also time the fast step with these GPU levers added one at a time (cumulative), and the "
                        "floor with all of them: cudnn_benchmark, channels_last, fused_adam, bf16, or all")
    q.add_argument("--json", type=Path, default=None, help="write the results here")
    q.set_defaults(func=run_dp_sinkhorn)


def run_dp_sinkhorn(args: argparse.Namespace) -> int:
    from dpsynth.bench.dp_sinkhorn import bench_and_report

    from dpsynth.methods.dp_sinkhorn.tuning import LEVERS

    levers = LEVERS if args.levers == "all" else tuple(v.strip() for v in args.levers.split(",") if v.strip())
    bench_and_report(args.device, args.steps, args.trials, args.warmup, args.threads, args.sweep, args.records,
                     sweep_mode=args.sweep_mode, json_path=args.json, levers=levers)
    return 0
