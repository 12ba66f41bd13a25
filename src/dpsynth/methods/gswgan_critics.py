"""GS-WGAN's many critics: shards, the batched critic step, warm start, the artifact.

The training set is split ONCE per run (from the seed) into ``N_d`` disjoint shards; critic
``k`` only ever sees shard ``k``. Warm start trains every critic non-privately together with
its OWN non-private generator: a generator shared by all critics would make each critic
depend on every shard and break the per-shard subsampling the privacy analysis rests on.
All critics (and warm-start generators) are held stacked and stepped at once
(``dpsynth.nets.gswgan``), optionally in chunks to bound memory at ``N_d = 1000``.

The warm-start artifact (``critics.pt``) holds the critics, their Adam state, the shards
and a fingerprint of the data; it is keyed by everything that shapes the critics (not by
the generator's privacy settings), so a sweep over sigma reuses one warm start.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from dpsynth.config import Experiment, ScalePreset
from dpsynth.errors import DataError, DpsynthError
from dpsynth.io import write_json
from dpsynth.methods.artifacts import torch_load, torch_save, writing_to
from dpsynth.nets.gswgan import GSWGANGenerator, StackedCritics, bernoulli_latent

PAPER_N_CRITICS = 1000  # GS-WGAN (arXiv:2006.08265): N_d = 1000 shards of 60 images
PAPER_WARMUP_STEPS = 2000  # GS-WGAN authors' code: pretrain 2,000 iterations
ARTIFACT_FORMAT = "dpsynth-gswgan-critics/1"
CRITICS_FILE = "critics.pt"
ADAM_EPS = 1e-8


# --------------------------------------------------------------------------- settings and shards


def critic_settings(exp: Experiment, preset: ScalePreset, seed: int, n_records: int) -> dict[str, Any]:
    """Everything that determines the warm-started critics (and nothing that does not)."""
    h = exp.hparams
    return {
        "dataset": exp.dataset, "n_records": int(n_records), "seed": int(seed),
        "n_critics": int(preset.n_critics or PAPER_N_CRITICS),
        "warmup_steps": int(preset.warmup_steps or PAPER_WARMUP_STEPS),
        **{k: list(getattr(h, k)) if k == "betas" else getattr(h, k) for k in exp.spec.warm_start_keys},
    }


def make_shards(n_records: int, n_critics: int, batch_size: int, seed: int) -> np.ndarray:
    """(N_d, n // N_d) disjoint record indices, fixed by the seed; the remainder is unused."""
    if n_critics > n_records:
        raise DataError(f"n_critics (N_d) = {n_critics} is larger than the dataset ({n_records} records): "
                        "every critic needs its own non-empty shard")
    size = n_records // n_critics
    if size < batch_size:
        raise DataError(f"shards of {size} records ({n_records} records / N_d = {n_critics}) are smaller than "
                        f"the batch size {batch_size}: lower n_critics or the batch size")
    perm = np.random.default_rng([seed, 0x6A5]).permutation(n_records)
    return perm[: size * n_critics].reshape(n_critics, size)


def data_fingerprint(x: np.ndarray, y: np.ndarray) -> str:
    """Which private data a warm start was trained on (so training refuses a mismatched one)."""
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(x).tobytes())
    h.update(np.ascontiguousarray(y).tobytes())
    return h.hexdigest()


# --------------------------------------------------------------------------- optimiser


class StackedAdam:
    """Adam over stacked parameters with a step counter PER COPY.

    In training only the chosen critic steps, so its bias correction must use its own
    count (as the published per-critic optimisers do). Same formula as ``torch.optim.Adam``.
    """

    def __init__(self, params: dict[str, Tensor], copies: int, lr: float, betas: tuple[float, float]) -> None:
        self.lr, self.betas = lr, (float(betas[0]), float(betas[1]))
        self.m = {k: torch.zeros_like(p) for k, p in params.items()}
        self.v = {k: torch.zeros_like(p) for k, p in params.items()}
        self.steps = torch.zeros(copies, dtype=torch.float64)

    @torch.no_grad()
    def step(self, params: dict[str, torch.nn.Parameter]) -> None:
        b1, b2 = self.betas
        self.steps += 1
        bc1 = (1 - b1 ** self.steps).float()
        bc2_sqrt = (1 - b2 ** self.steps).sqrt().float()
        for k, p in params.items():
            if p.grad is None:
                continue
            g, m, v = p.grad, self.m[k], self.v[k]
            m.lerp_(g, 1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            shape = (-1, *([1] * (p.dim() - 1)))
            denom = (v.sqrt() / bc2_sqrt.to(p.device).view(shape)).add_(ADAM_EPS)
            p.addcdiv_(m, denom * bc1.to(p.device).view(shape), value=-self.lr)

    def state_dict(self) -> dict[str, Any]:
        return {"m": self.m, "v": self.v, "steps": self.steps}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.m = {k: t.clone() for k, t in d["m"].items()}
        self.v = {k: t.clone() for k, t in d["v"].items()}
        self.steps = d["steps"].clone()


class CriticBank:
    """All ``N_d`` critics + their Adam state; ``take``/``put`` move a slice to a small working bank."""

    def __init__(self, critics: StackedCritics, lr: float, betas: tuple[float, float]) -> None:
        self.critics = critics
        self.opt = StackedAdam(dict(critics.named_parameters()), critics.copies, lr, betas)

    @property
    def copies(self) -> int:
        return self.critics.copies

    def take(self, start: int, stop: int) -> CriticBank:
        """A bank of critics [start, stop) (copies of the tensors: steps on it do not touch self)."""
        c = self.critics
        sub = StackedCritics(stop - start, c.num_classes, c.model_dim, c.in_channels, c.spectral_norm, empty=True).to(self.device)
        sub.load_state_dict({k: v[start:stop].clone() for k, v in c.state_dict().items()})
        bank = CriticBank(sub, self.opt.lr, self.opt.betas)
        bank.opt.load_state_dict({"m": {k: t[start:stop] for k, t in self.opt.m.items()},
                                  "v": {k: t[start:stop] for k, t in self.opt.v.items()},
                                  "steps": self.opt.steps[start:stop]})
        return bank

    @torch.no_grad()
    def put(self, start: int, bank: CriticBank) -> None:
        stop = start + bank.copies
        own = self.critics.state_dict()
        for k, v in bank.critics.state_dict().items():
            own[k][start:stop].copy_(v)
        for k in self.opt.m:
            self.opt.m[k][start:stop].copy_(bank.opt.m[k])
            self.opt.v[k][start:stop].copy_(bank.opt.v[k])
        self.opt.steps[start:stop] = bank.opt.steps

    @property
    def device(self) -> torch.device:
        return self.critics.conv1_w.device

    def reset_optimizer(self) -> None:
        """Fresh Adam moments and step counts (the weights stay): the published code builds new
        critic optimisers after loading the warm-started critics."""
        self.opt = StackedAdam(dict(self.critics.named_parameters()), self.critics.copies, self.opt.lr,
                               self.opt.betas)

    def state_dict(self) -> dict[str, Any]:
        return {"critics": self.critics.state_dict(), "adam": self.opt.state_dict()}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.critics.load_state_dict(d["critics"])
        self.opt.load_state_dict({k: ({kk: t.to(self.device) for kk, t in v.items()} if isinstance(v, dict) else v)
                                  for k, v in d["adam"].items()})


# --------------------------------------------------------------------------- one critic step


def real_batch(x_u8: Tensor, y: Tensor, shards: Tensor, batch_size: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """``batch_size`` records per shard without replacement: (k, B, C, H, W) in [0, 1], (k, B) labels."""
    k, size = shards.shape
    pick = torch.rand((k, size), generator=gen, device=gen.device).argsort(dim=1)[:, :batch_size].to(shards.device)
    idx = torch.gather(shards, 1, pick)
    return x_u8[idx].float() / 255.0, y[idx]


def critic_step(
    bank: CriticBank, real: Tensor, real_y: Tensor, fake: Tensor, gp_weight: float, drift: float, gen: torch.Generator,
    alpha: Tensor | None = None,
) -> dict[str, float]:
    """One WGAN-GP critic update of every critic in ``bank`` (critic k on row k of the batches).

    Loss per critic: ``mean D(fake) - mean D(real) + gp (||grad D(interp)|| - 1)^2 + drift D(real)^2``;
    summing over critics gives each critic exactly its own gradient.
    """
    c = bank.critics
    w = c.weights()
    d_real = c(real, real_y, w)
    d_fake = c(fake, real_y, w)
    if alpha is None:  # interpolation weights of the gradient penalty, U(0, 1) per sample
        alpha = torch.rand((*real.shape[:2], 1, 1, 1), generator=gen, device=gen.device).to(real.device)
    interp = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    d_int = c(interp, real_y, w)
    (grad,) = torch.autograd.grad(d_int.sum(), interp, create_graph=True)
    gnorm = grad.flatten(2).norm(dim=2)
    gp = ((gnorm - 1) ** 2).mean(dim=1)
    wdist = d_real.mean(dim=1) - d_fake.mean(dim=1)
    loss = -wdist + gp_weight * gp + drift * (d_real ** 2).mean(dim=1)
    for p in c.parameters():
        p.grad = None
    loss.sum().backward()
    bank.opt.step(dict(c.named_parameters()))
    return {"d_loss": float(loss.mean().detach()), "wasserstein": float(wdist.mean().detach())}


# --------------------------------------------------------------------------- warm start


def _warm_chunk(
    bank: CriticBank, gens: GSWGANGenerator, x_u8: Tensor, y: Tensor, shards: Tensor, settings: dict[str, Any],
    steps: int, gen: torch.Generator, on_step: Callable[[int], None] | None = None,
) -> dict[str, float]:
    """Warm-start a chunk of critics, each against its own generator copy, for ``steps`` iterations."""
    k, b, nc = bank.copies, settings["batch_size"], bank.critics.num_classes
    opt_g = torch.optim.Adam(gens.parameters(), lr=settings["lr"], betas=tuple(settings["betas"]))
    stats: dict[str, float] = {}
    for it in range(steps):
        for _ in range(settings["critic_steps"]):
            real, ry = real_batch(x_u8, y, shards, b, gen)
            with torch.no_grad():
                z = bernoulli_latent((k, b, gens.latent_dim), gen, real.device)
                fake = gens.forward_stacked(z, ry)
            stats = critic_step(bank, real, ry, fake, settings["gp_weight"], settings["drift"], gen)
        # Each warm-start generator steps against ITS critic only (per-copy losses summed).
        z = bernoulli_latent((k, b, gens.latent_dim), gen, real.device)
        fy = torch.randint(0, nc, (k, b), generator=gen, device=gen.device).to(real.device)
        fake = gens.forward_stacked(z, fy)
        g_loss = -bank.critics(fake, fy, bank.critics.weights(detach=True, power_iteration=False)).mean(dim=1).sum()
        opt_g.zero_grad(set_to_none=True)
        g_loss.backward()
        opt_g.step()
        if on_step is not None:
            on_step(it)
    return stats


#: The key of ``warm_start``'s info holding the last step's critic losses: computed on the private shards
#: without noise, so a private diagnostic -- kept in warmstart.json under the private root, never
#: printed to the job's output or log (``stages.warmstart``).
PRIVATE_INFO = "last"


def warm_start(
    x_u8: np.ndarray, y: np.ndarray, num_classes: int, settings: dict[str, Any], device: torch.device,
    *, chunk: int | None = None, steps: int | None = None, progress: Callable[[int], None] | None = None,
) -> tuple[CriticBank, dict[str, Any]]:
    """Train all ``N_d`` critics non-privately on their shards, ``chunk`` critics at a time (all by default).

    Initial weights and randomness are drawn per chunk from ``(seed, chunk start)``, so a given
    chunking is reproducible; the chunk size is recorded in the artifact.
    """
    if x_u8.ndim != 4 or tuple(x_u8.shape[2:]) != (28, 28):
        raise DataError(f"GS-WGAN needs 28x28 images (N, C, 28, 28), got {tuple(x_u8.shape)}")
    n_d, b = settings["n_critics"], settings["batch_size"]
    shards_np = make_shards(len(x_u8), n_d, b, settings["seed"])
    steps = settings["warmup_steps"] if steps is None else steps
    chunk = n_d if chunk is None else max(1, min(int(chunk), n_d))
    d, c_in = settings["model_dim"], int(x_u8.shape[1])
    xt, yt = torch.from_numpy(x_u8).to(device), torch.from_numpy(y.astype(np.int64)).to(device)
    shards = torch.from_numpy(shards_np).to(device)
    bank = CriticBank(StackedCritics(n_d, num_classes, d, c_in, empty=True).to(device), settings["lr"], tuple(settings["betas"]))
    t0 = time.perf_counter()
    last: dict[str, float] = {}
    for start in range(0, n_d, chunk):
        stop = min(n_d, start + chunk)
        k = stop - start
        seeds = [settings["seed"], 0xC817, start]
        sub = CriticBank(StackedCritics(k, num_classes, d, c_in, empty=True).to(device), settings["lr"], tuple(settings["betas"]))
        sub.critics.reset_parameters(torch.Generator().manual_seed(int(np.random.SeedSequence(seeds).generate_state(1)[0])))
        sub.critics.to(device)
        gens = GSWGANGenerator(num_classes=num_classes, model_dim=d, out_channels=c_in, copies=k,
                               init_seed=int(np.random.SeedSequence([*seeds, 1]).generate_state(1)[0])).to(device)
        gens.train()
        gen = torch.Generator(device=device).manual_seed(int(np.random.SeedSequence([*seeds, 2]).generate_state(1)[0]))
        last = _warm_chunk(sub, gens, xt, yt, shards[start:stop], settings, steps, gen,
                           on_step=(lambda it, k=k: progress(k)) if progress else None)
        bank.put(start, sub)
    elapsed = time.perf_counter() - t0
    info = {"seconds": round(elapsed, 3), "chunk": chunk, "steps": steps,
            "per_critic_step_ms": round(1e3 * elapsed / max(1, n_d * steps), 3), PRIVATE_INFO: last}
    return bank, info


def compare_batched_vs_loop(
    x_u8: np.ndarray, y: np.ndarray, num_classes: int, settings: dict[str, Any], device: torch.device,
    steps: int = 3, critics: int | None = None,
) -> dict[str, float]:
    """Per-critic-step wall time of the stacked design vs one critic at a time, same process and data.

    One untimed step each first (allocator and kernel warm-up); then ``steps`` timed iterations
    of ``critics`` critics (default min(N_d, 20)) batched, and the same critics one by one.
    """
    k = min(settings["n_critics"], 20) if critics is None else min(critics, settings["n_critics"])
    sub = dict(settings, n_critics=k)
    x_small, y_small = x_u8, y
    # Enough records that k shards of >= batch_size exist: use the data as is.
    warm_start(x_small, y_small, num_classes, sub, device, steps=1)
    warm_start(x_small, y_small, num_classes, sub, device, chunk=1, steps=1)
    t = time.perf_counter()
    warm_start(x_small, y_small, num_classes, sub, device, steps=steps)
    batched = (time.perf_counter() - t) / (k * steps)
    t = time.perf_counter()
    warm_start(x_small, y_small, num_classes, sub, device, chunk=1, steps=steps)
    loop = (time.perf_counter() - t) / (k * steps)
    return {"critics": k, "steps": steps, "batched_ms_per_critic_step": round(1e3 * batched, 2),
            "loop_ms_per_critic_step": round(1e3 * loop, 2), "speedup": round(loop / batched, 2),
            "torch_threads": torch.get_num_threads()}


# --------------------------------------------------------------------------- artifact


def save_critics(directory: Path, bank: CriticBank, shards: np.ndarray, settings: dict[str, Any],
                 fingerprint: str, info: dict[str, Any]) -> Path:
    path = Path(directory) / CRITICS_FILE
    blob = {"format": ARTIFACT_FORMAT, "settings": settings, "fingerprint": fingerprint,
            "shards": torch.from_numpy(shards), "bank": bank.state_dict(), "info": info,
            "arch": {"num_classes": bank.critics.num_classes, "model_dim": bank.critics.model_dim,
                     "in_channels": bank.critics.in_channels, "spectral_norm": bank.critics.spectral_norm}}
    torch_save(blob, path)  # atomic; a full disk names the file
    with writing_to(Path(directory) / "warmstart.json"):
        write_json(Path(directory) / "warmstart.json", {"settings": settings, "fingerprint": fingerprint, **info})
    return path


def load_critics(directory: Path, settings: dict[str, Any], fingerprint: str, device: torch.device,
                 experiment: str) -> tuple[CriticBank, np.ndarray]:
    """Load a warm start and check it is the one this run needs (same settings, same data)."""
    path = Path(directory) / CRITICS_FILE
    if not path.is_file():
        raise DpsynthError(f"{path}: warm-started critics not found; run `dpsynth warmstart {experiment}` "
                           "(with the same --params/--scale/--seed/--private-out) before `dpsynth train`")
    blob = torch_load(path, "GS-WGAN warm-start artifact", f"rerun `dpsynth warmstart {experiment}`", device=device)
    if not isinstance(blob, dict) or blob.get("format") != ARTIFACT_FORMAT:
        raise DpsynthError(f"{path}: not a GS-WGAN warm-start artifact")
    if blob["settings"] != settings:
        diff = sorted(k for k in set(settings) | set(blob["settings"]) if settings.get(k) != blob["settings"].get(k))
        raise DpsynthError(f"{path}: warm start was made with different settings ({', '.join(diff)}); "
                           f"rerun `dpsynth warmstart {experiment}`")
    if blob["fingerprint"] != fingerprint:
        raise DpsynthError(f"{path}: warm start was trained on different data; rerun `dpsynth warmstart {experiment}`")
    shards = blob["shards"].cpu().numpy()
    expect = make_shards(settings["n_records"], settings["n_critics"], settings["batch_size"], settings["seed"])
    if not np.array_equal(shards, expect):
        raise DpsynthError(f"{path}: shards differ from this run's (seed {settings['seed']}); rerun the warm start")
    a = blob["arch"]
    bank = CriticBank(StackedCritics(settings["n_critics"], a["num_classes"], a["model_dim"], a["in_channels"],
                                     a["spectral_norm"], empty=True).to(device), settings["lr"], tuple(settings["betas"]))
    bank.load_state_dict(blob["bank"])
    return bank, shards


def check_finite(value: float, what: str) -> None:
    if not math.isfinite(value):
        raise DpsynthError(f"GS-WGAN: {what} became {value} (training diverged); lower the learning rate")
