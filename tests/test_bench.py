"""`dpsynth bench dp-sinkhorn` end to end (tiny: one timed step per contender)."""

from __future__ import annotations

import json

import pytest
import torch

from dpsynth.cli import main
from dpsynth.bench.timing import conv_flops
from dpsynth.nets import build_generator


def test_conv_flops_counts_the_dcgan_layers():
    """The MNIST DCGAN at batch 60, by hand: ConvT(16->256, k7) on 1x1, ConvT(256->128, k4 s2) on
    7x7, ConvT(128->64, k4 s2) on 14x14, ConvT(64->1, k3) on 28x28; 2 FLOP per multiply-add."""
    G = build_generator("dcgan", latent_dim=12, num_classes=10, embed_dim=4, out_channels=1, image_size=28)
    g = torch.Generator().manual_seed(0)
    by_hand = 2 * 60 * (16 * 256 * 49 + 256 * 49 * 128 * 16 + 128 * 196 * 64 * 16 + 64 * 784 * 1 * 9)
    assert conv_flops(G, G.sample_latent(60, g), G.sample_labels(60, g)) == by_hand


def test_bench_writes_every_number_it_prints(tmp_path, capsys):
    out = tmp_path / "bench.json"
    threads = torch.get_num_threads()
    rc = main(["bench", "dp-sinkhorn", "--steps", "1", "--trials", "1", "--warmup", "0", "--records", "400",
               "--threads", "1", "--sweep", "2", "--levers", "cudnn_benchmark,fused_adam", "--json", str(out)])
    assert rc == 0
    assert torch.get_num_threads() == threads  # --threads does not leak into the caller's process
    res = json.loads(out.read_text())
    # the GPU levers, added one at a time (bf16 is left out here: ~10 s a step under the CPU's autocast)
    tuned = ["fast+cudnn_benchmark", "fast+cudnn_benchmark+fused_adam"]
    assert set(res["steps"]) == {"reference", "fast", "generator_floor", *tuned,
                                 "generator_floor+cudnn_benchmark+fused_adam",
                                 "fast_logsumexp"}  # the CPU's step with torch.logsumexp instead of the floor
    assert res["levers"]["order"] == ["cudnn_benchmark", "fused_adam"]
    assert res["levers"]["over_fast"] == {k: pytest.approx(res["steps"][k]["steps_per_s"] /
                                                            res["steps"]["fast"]["steps_per_s"]) for k in tuned}
    assert set(res["paths"].values()) == {"eager"}  # a CUDA graph only on CUDA, floor included
    assert all(v["steps_per_s"] > 0 for v in res["steps"].values())
    assert res["ratio_fast_over_reference"] == pytest.approx(
        res["steps"]["fast"]["steps_per_s"] / res["steps"]["reference"]["steps_per_s"])
    fl = res["floor"]
    by_hand = 2 * 60 * (16 * 256 * 49 + 256 * 49 * 128 * 16 + 128 * 196 * 64 * 16 + 64 * 784 * 9)
    assert fl["conv_gflop_per_step"] == pytest.approx(3 * by_hand / 1e9)  # forward + 2 backward
    assert fl["matmul_gflops"] > 0 and fl["conv_gflops_at_floor"] > 0
    sw = res["sweep"]
    assert sw["configs"] == 2 and sw["forward_mode"] == "loop"  # auto on a CPU
    assert sw["ratio_batched_over_sequential"] > 0
    printed = capsys.readouterr().out
    assert "fast/reference" in printed and "floor:" in printed and "sweep of 2" in printed
    assert "levers (cumulative): fast+cudnn_benchmark " in printed


def test_bench_refuses_bad_arguments(capsys):
    assert main(["bench", "dp-sinkhorn", "--steps", "0"]) == 2
    assert "--steps and --trials must be >= 1" in capsys.readouterr().err
    assert main(["bench", "dp-sinkhorn", "--levers", "cudnn_benchmark,turbo"]) == 2
    assert "unknown GPU lever(s) 'turbo'; known: cudnn_benchmark" in capsys.readouterr().err
    assert main(["bench", "dp-sinkhorn", "--device", "cuda"] if not torch.cuda.is_available()
                else ["bench", "dp-sinkhorn", "--threads", "0"]) == 2
