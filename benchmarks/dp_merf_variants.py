"""Why is our DP-MERF row above the published one? A measurement of the generator variants.

The ICLR DP-Sinkhorn table's DP-MERF row (66/63/63 on MNIST, 59/56/64 on Fashion-MNIST) comes from
Chen et al.'s 2020 run of the first DP-MERF release (Harder, Adamczewski, Park, arXiv:2002.11603 v1),
which generated each image's label *jointly* with the image; the release we follow
(``ParkLabML/DP-MERF`` ``code_balanced/``) conditions a convolutional generator on a given label. The
2020 code is not public; its label-emitting generator survives, commented out, as ``FCLabelGen`` in
``code_balanced/models_gen.py``: an MLP with an image head (sigmoid) and a label head (softmax). This
script trains, against ONE release of the same noisy label-conditional mean embedding:

- ``conv_cond``: the pipeline's generator (``nets.merf.MERFConvGenerator``), labels given -- the control;
- ``fc_cond``: an MLP generator with the label given (the release's ``FCCondGen`` layout);
- ``fc_joint``: the MLP with a softmax label head; the generated embedding is
  ``mean_k phi(x_k) (x) softmax_k``, and a synthetic record's label is the argmax of its head.

Each is trained as ``methods.dp_merf`` trains (5 epochs of n // 100 steps of batch 100, Adam lr 0.01
x 0.9 per epoch), 10,000 records are generated, and the project's classifiers (quick-scale settings:
at most 3 epochs) are trained on them and scored on the real test split. ``agreement`` is how often a
CNN trained on the real data (the real-data row's, from its cache) gives a generated image its
generated label. MLP widths (200, 500) are our choice: the 2020 widths are not published.

Not a pipeline stage: a measurement for docs/deviations.md row 15. The release's noise comes from OS
entropy (secret, as everywhere); the embedding is released once per dataset per invocation.

    python benchmarks/dp_merf_variants.py mnist --out benchmarks/results/dp_merf_variants_mnist.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from dpsynth.data import load_processed
from dpsynth.evaluate.classifier_is import ISClassifierCache
from dpsynth.evaluate.classifiers import predict, train_and_score
from dpsynth.methods.dp_merf import RandomFourierFeatures
from dpsynth.nets.merf import MERFConvGenerator
from dpsynth.paths import is_classifier_dir
from dpsynth.privacy import accounting as acc
from dpsynth.privacy.sanitizers import MeanEmbeddingSanitizer

BANDWIDTH_SQ = {"mnist": 105.0, "fashion_mnist": 127.0}  # the authors' constants (deviations row 12)
CODE, HIDDEN, BATCH, EPOCHS, LR, DECAY, FEATURES = 5, (200, 500), 100, 5, 0.01, 0.9, 10_000


class MLPGenerator(nn.Module):
    """FC generator: [z (, one-hot label)] -> 200 -> BN/ReLU -> 500 -> BN/ReLU -> 784 sigmoid (+ 10 softmax)."""

    def __init__(self, k: int, joint: bool) -> None:
        super().__init__()
        self.k, self.joint = k, joint
        self.body = nn.Sequential(nn.Linear(CODE + (0 if joint else k), HIDDEN[0]), nn.BatchNorm1d(HIDDEN[0]),
                                  nn.ReLU(), nn.Linear(HIDDEN[0], HIDDEN[1]), nn.BatchNorm1d(HIDDEN[1]), nn.ReLU())
        self.image = nn.Linear(HIDDEN[1], 784)
        self.label = nn.Linear(HIDDEN[1], k) if joint else None

    def forward(self, z: torch.Tensor, y: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.body(z if self.joint else torch.cat([z, nn.functional.one_hot(y, self.k).float()], 1))
        probs = self.label(h).softmax(1) if self.label is not None else nn.functional.one_hot(y, self.k).float()
        return torch.sigmoid(self.image(h)).reshape(-1, 1, 28, 28), probs


def release(data, features: RandomFourierFeatures, sigma: float) -> tuple[torch.Tensor, dict]:
    noise = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little"))
    san = MeanEmbeddingSanitizer(sigma, len(data.x_train), data.num_classes, noise)
    for s in range(0, len(data.x_train), 500):
        xb = torch.from_numpy(data.x_train[s:s + 500]).float().div(255.0)
        san.add(features(xb), torch.from_numpy(data.y_train[s:s + 500].astype(np.int64)))
    emb = san.release()
    return emb, {"noise_norm": san.last.noise_norm, "released_norm": san.last.released_norm}


def train_variant(name: str, emb: torch.Tensor, features: RandomFourierFeatures, n: int, k: int,
                  gen: torch.Generator) -> tuple[nn.Module, float, float]:
    G: nn.Module = MERFConvGenerator(CODE, k) if name == "conv_cond" else MLPGenerator(k, joint=name == "fc_joint")
    opt = torch.optim.Adam(G.parameters(), lr=LR)
    steps_per_epoch, t0, loss = n // BATCH, time.perf_counter(), torch.tensor(math.nan)
    for step in range(EPOCHS * steps_per_epoch):
        for g in opt.param_groups:
            g["lr"] = LR * DECAY ** (step // steps_per_epoch)
        z = torch.randn(BATCH, CODE, generator=gen)
        y = torch.randint(k, (BATCH,), generator=gen)
        if name == "conv_cond":
            x, probs = G(z, y), nn.functional.one_hot(y, k).float()
        else:
            x, probs = G(z, y)
        gen_emb = probs.T @ features(x) / BATCH  # (k, D): mean of phi(x) (x) label
        loss = ((emb - gen_emb) ** 2).sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return G.eval(), float(loss.detach()), time.perf_counter() - t0


@torch.no_grad()
def synthesize(name: str, G: nn.Module, n: int, k: int, gen: torch.Generator) -> tuple[np.ndarray, np.ndarray]:
    y = torch.arange(n) % k
    z = torch.randn(n, CODE, generator=gen)
    if name == "conv_cond":
        x = G(z, y)
    else:
        x, probs = G(z, y)
        if name == "fc_joint":
            y = probs.argmax(1)  # the label the generator drew with its image
    return (x.clamp(0, 1) * 255).round().to(torch.uint8).numpy(), y.numpy().astype(np.int64)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset", choices=sorted(BANDWIDTH_SQ))
    ap.add_argument("--variants", nargs="+", default=["conv_cond", "fc_cond", "fc_joint"])
    ap.add_argument("--epsilon", type=float, default=10.0)
    ap.add_argument("--n-synthetic", type=int, default=10_000)
    ap.add_argument("--private", default="private", help="private root holding the real row's CNN cache")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    data = load_processed(Path("data/processed") / f"{a.dataset}.npz")
    n, k = len(data.x_train), data.num_classes
    sigma = acc.calibrate_sigma(1.0, 1, 1e-5, a.epsilon)
    features = RandomFourierFeatures(784, FEATURES, BANDWIDTH_SQ[a.dataset], 0, torch.device("cpu"))
    emb, stats = release(data, features, sigma)
    judge, _ = ISClassifierCache(data, is_classifier_dir(a.private), max_epochs=3, train_subset=10_000).get()
    out = {"dataset": a.dataset, "epsilon": a.epsilon, "sigma": sigma, "release": stats, "variants": {}}
    for name in a.variants:
        gen = torch.Generator().manual_seed(1)
        G, loss, secs = train_variant(name, emb, features, n, k, gen)
        x, y = synthesize(name, G, a.n_synthetic, k, gen)
        row = {"final_loss": loss, "train_seconds": round(secs, 1),
               "label_counts": np.bincount(y, minlength=k).tolist(),
               "agreement": float(np.mean(predict(judge, x) == y))}
        for kind in ("logreg", "mlp", "cnn"):
            row[kind] = train_and_score(kind, x, y, data.x_test, data.y_test, num_classes=k, seed=0,
                                        max_epochs=3)["accuracy"]
        out["variants"][name] = row
        print(f"{a.dataset} {name}: LogReg/MLP/CNN {100 * row['logreg']:.1f}/{100 * row['mlp']:.1f}/"
              f"{100 * row['cnn']:.1f}, agreement {row['agreement']:.3f}, labels {row['label_counts']}, "
              f"loss {loss:.4g}, {secs:.0f} s", flush=True)
    if a.out:
        a.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
