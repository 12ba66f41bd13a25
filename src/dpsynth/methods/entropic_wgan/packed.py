"""The packed entropic-WGAN trainer: K MLP generators, each with its own weights, Adam moments, seed,
privatized records and temperature, advanced in ONE step -- the fast member of a reference/fast pair
whose reference is ``fit.EWGANTrainer`` (one run), as Opacus keeps its fast optimizer beside the
reference one.

Why: Reshetova et al.'s MNIST figures (arXiv:2306.09547, Figs. 5 and 11; section 4.5's MLP
2 -> 500 -> 500 -> 784, batch 200, L = 200 Sinkhorn iterations at a fixed temperature) need ~5 M
member-steps at 10 runs per cell; one run's step is far too small to fill a GPU (or to amortise Python
on a CPU). Here the K members' layers are stacked -- weight (K, out, in), bias (K, out) -- and every
layer is one ``baddbmm``; the loss is :func:`loss.ewgan_losses` on the (K, B, M) pack with one
temperature per member (the same code as the per-run trainer: one path per behaviour); one Adam over the
stacked tensors is exactly K Adams (Adam is elementwise and the members step in lock-step).

Randomness (``CounterDraws``): each member's latents and batch indices are a hash of (its seed, the step or
epoch, the position) computed on the device -- no ``torch.randperm(60000)`` on the host per step, no
per-member ``torch.Generator`` launches, the same draws on a CPU and a GPU and whatever the pack, and nothing
to checkpoint but the step. Batches are slices of a per-epoch shuffle (without replacement, every record once
per epoch). ``TorchDraws`` replays the per-run trainer's own streams instead: the equivalence tests use it to
hold the pack to ``EWGANTrainer`` member by member.

Privacy: the trainer sees only the members' privatized records (post-processing, Reshetova et al.
Remark 1); the clean records never reach it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from dpsynth.config import EntropicWGANHparams
from dpsynth.errors import ConfigError, DataError
from dpsynth.methods.entropic_wgan.fit import generator_arch
from dpsynth.methods.entropic_wgan.loss import EXACT_MAX_ENTRIES, LossSpec, ewgan_losses
from dpsynth.methods.optim import make_optimizer
from dpsynth.nets import build_seeded_generator
from dpsynth.nets.base import Generator

__all__ = ["Member", "PackedMLP", "CounterDraws", "TorchDraws", "PackedEWGAN", "hash32"]

_MASK = 0xFFFFFFFF


def hash32(x: Tensor) -> Tensor:
    """A 32-bit integer mix (Mueller's ``hash32``: two multiply-xorshift rounds) on int64 tensors holding
    values in [0, 2^32). Its multiplier is below 2^31, so no product leaves int64: the same bits on every
    device."""
    x = ((x >> 16) ^ x) * 0x45D9F3B & _MASK
    x = ((x >> 16) ^ x) * 0x45D9F3B & _MASK
    return (x >> 16) ^ x


@dataclass(frozen=True)
class Member:
    """One run of a pack: its seed (initial weights and draws), its privatized records (N, D) (several
    members may share one array) and its temperature lambda = p s^p."""

    name: str
    seed: int
    records: Tensor
    temperature: float


class PackedMLP:
    """K ``MLPGenerator`` s of one architecture as stacked tensors; member k's initial weights are those
    ``build_seeded_generator(arch, seed_k)`` gives its own run."""

    def __init__(self, arch: dict[str, Any], seeds: Sequence[int], device: torch.device | str) -> None:
        if arch["name"] != "mlp":
            raise ConfigError(f"the packed trainer stacks MLP generators; hparams.generator is {arch['name']!r}")
        gens = [build_seeded_generator(arch, s, device) for s in seeds]
        self.arch, self.template = arch, gens[0]
        self.layers = [(i, m) for i, m in enumerate(self.template.net)]  # type: ignore[attr-defined]
        self.linear = [i for i, m in self.layers if isinstance(m, nn.Linear)]
        nets: list[nn.Sequential] = [g.net for g in gens]  # type: ignore[attr-defined]
        self.weights = [torch.stack([net[i].weight.detach() for net in nets]).requires_grad_() for i in self.linear]
        self.biases = [torch.stack([net[i].bias.detach() for net in nets]).requires_grad_() for i in self.linear]

    @property
    def k(self) -> int:
        return self.weights[0].shape[0]

    def parameters(self) -> list[Tensor]:
        """In ``MLPGenerator.parameters()``'s order (weight, bias per layer): Adam's state lines up."""
        return [t for w, b in zip(self.weights, self.biases) for t in (w, b)]

    def __call__(self, z: Tensor) -> Tensor:
        """(K, B, latent) -> (K, B, out): every member's forward in one batched matmul per layer."""
        h, j = z, 0
        for i, m in self.layers:
            if i in self.linear:
                h = torch.baddbmm(self.biases[j].unsqueeze(1), h, self.weights[j].transpose(1, 2))
                j += 1
            else:
                h = m(h)  # ReLU / tanh / identity: elementwise
        return h

    def member_state(self, k: int) -> dict[str, Tensor]:
        """Member k's weights under ``MLPGenerator.state_dict()``'s keys."""
        out: dict[str, Tensor] = {}
        for i, w, b in zip(self.linear, self.weights, self.biases):
            out[f"net.{i}.weight"], out[f"net.{i}.bias"] = w[k].detach().clone(), b[k].detach().clone()
        return out

    def load_member(self, k: int, state: dict[str, Tensor]) -> None:
        with torch.no_grad():
            for i, w, b in zip(self.linear, self.weights, self.biases):
                w[k].copy_(state[f"net.{i}.weight"])
                b[k].copy_(state[f"net.{i}.bias"])

    def generator(self, k: int) -> Generator:
        """Member k as a standalone generator (eval mode): what its own run would have released."""
        gen = build_seeded_generator(self.arch, 0, self.weights[0].device)
        gen.load_state_dict(self.member_state(k))
        return gen.eval()


class CounterDraws:
    """Latents and batch indices from a counter-based hash of (member seed, step or epoch, position), on the device.

    Batches: each member's records are shuffled once per epoch (``n // b`` steps) -- a permutation sorted by the
    hash of (seed, epoch, index) -- and the epoch's batches are consecutive slices of it: every batch is drawn
    without replacement and every record is seen once per epoch (the usual shuffled epoch; ``randperm(n)[:b]``
    per step draws i.i.d. batches instead). A step costs O(b) per member, the shuffle O(n log n) per epoch."""

    def __init__(self, seeds: Sequence[int], sizes: Sequence[int], batch: int, latent: tuple[int, str],
                 device: torch.device | str) -> None:
        self.device = torch.device(device)
        self.batch, (self.latent_dim, self.latent_dist) = batch, latent
        if self.latent_dist not in ("uniform", "uniform_symmetric"):
            raise ConfigError(f"the packed trainer draws uniform latents; the generator's are {self.latent_dist!r}")
        seeds_t = torch.tensor([int(s) & _MASK for s in seeds], dtype=torch.int64, device=self.device)
        self.keys = [hash32(hash32(seeds_t) ^ (0x9E3779B9 * (stream + 1) & _MASK)) for stream in range(2)]
        self.sizes = [int(n) for n in sizes]
        self.full = all(n <= batch for n in self.sizes)
        self.epoch_len = [max(1, n // batch) for n in self.sizes]
        self.epoch_len_t = torch.tensor(self.epoch_len, dtype=torch.int64, device=self.device)
        self.perm = torch.zeros((len(self.sizes), max(self.sizes)), dtype=torch.int64, device=self.device)
        self.perm_epoch = [-1] * len(self.sizes)
        self.pos_z = torch.arange(batch * self.latent_dim, dtype=torch.int64, device=self.device)
        self.pos_b = torch.arange(batch, dtype=torch.int64, device=self.device)

    def _bits(self, key: Tensor, counter: int, pos: Tensor) -> Tensor:
        base = hash32(key ^ (int(counter) * 0x632BE5AB & _MASK))
        return hash32(base[..., None] ^ (pos * 0x2C1B3C6D & _MASK))

    def _shuffle(self, k: int, epoch: int) -> None:
        n = self.sizes[k]
        pos = torch.arange(n, dtype=torch.int64, device=self.device)
        self.perm[k, :n] = torch.argsort(self._bits(self.keys[1][k], epoch, pos), stable=True)
        self.perm_epoch[k] = epoch

    def __call__(self, step: int) -> tuple[Tensor | None, Tensor]:
        """``(indices (K, b) into each member's records or None for a full batch, latents (K, b, latent))``."""
        u = (self._bits(self.keys[0], step, self.pos_z) >> 8).to(torch.float32) * (1.0 / (1 << 24))
        z = u.reshape(-1, self.batch, self.latent_dim)
        if self.latent_dist == "uniform_symmetric":
            z = 2.0 * z - 1.0
        if self.full:
            return None, z
        for k, length in enumerate(self.epoch_len):  # host arithmetic: no device read
            if self.perm_epoch[k] != step // length:
                self._shuffle(k, step // length)
        start = torch.remainder(torch.full_like(self.epoch_len_t, step), self.epoch_len_t) * self.batch
        return self.perm.gather(1, start[:, None] + self.pos_b[None, :]), z


class TorchDraws:
    """The per-run trainer's own streams, member by member (``EWGANTrainer``: latents from a generator on the
    device seeded ``seed``, indices ``randperm(n)[:b]`` from a host generator seeded ``seed + 1``). For the
    equivalence tests: K host draws per step."""

    def __init__(self, seeds: Sequence[int], sizes: Sequence[int], batch: int, latent: tuple[int, str],
                 device: torch.device | str) -> None:
        self.device, self.sizes, self.batch = torch.device(device), [int(n) for n in sizes], batch
        self.latent_dim, self.latent_dist = latent
        self.g_latent = [torch.Generator(device=self.device).manual_seed(int(s)) for s in seeds]
        self.g_batch = [torch.Generator().manual_seed(int(s) + 1) for s in seeds]

    def __call__(self, step: int) -> tuple[Tensor | None, Tensor]:
        idx = None
        if any(n > self.batch for n in self.sizes):
            idx = torch.stack([torch.randperm(n, generator=g)[: self.batch]
                               for n, g in zip(self.sizes, self.g_batch)]).to(self.device)
        z = torch.stack([torch.rand((self.batch, self.latent_dim), generator=g, device=self.device)
                         for g in self.g_latent])
        return idx, (2.0 * z - 1.0 if self.latent_dist == "uniform_symmetric" else z)


DRAWS = {"counter": CounterDraws, "torch": TorchDraws}


class PackedEWGAN:
    """K entropic-WGAN runs in lock-step (see the module docstring). ``step()`` returns the K losses (a
    (K,) tensor on the device: reading it is the caller's host sync)."""

    def __init__(self, members: Sequence[Member], record_shape: tuple[int, ...], spec: LossSpec,
                 hp: EntropicWGANHparams, device: torch.device | str = "cpu", draws: str = "counter") -> None:
        if not members:
            raise ConfigError("a pack needs at least one member")
        if spec.dct_shape is not None:
            raise ConfigError("local.dct: the packed trainer has no DCT records; train this run alone")
        self.device = torch.device(device)
        self.members, self.spec = list(members), spec
        self.record_shape = tuple(int(s) for s in record_shape)
        dim = int(np.prod(self.record_shape))
        sizes = []
        slots: dict[int, int] = {}
        stores: list[Tensor] = []
        for m in self.members:
            r = m.records
            if r.ndim != 2 or r.shape[0] == 0 or r.shape[1] != dim:
                raise DataError(f"{m.name}: training records must be a non-empty (N, {dim}) array, got "
                                f"{tuple(r.shape)}")
            if id(r) not in slots:  # members sharing one array share its storage
                slots[id(r)] = len(stores)
                stores.append(r.to(self.device, torch.float32))
            sizes.append(r.shape[0])
        offsets = np.cumsum([0] + [s.shape[0] for s in stores])
        self.records = torch.cat(stores) if len(stores) > 1 else stores[0]
        self.offset = torch.tensor([int(offsets[slots[id(m.records)]]) for m in self.members], device=self.device)
        self.batch = min(int(hp.batch_size), min(sizes))
        if any(min(int(hp.batch_size), n) != self.batch for n in sizes):
            raise ConfigError("a pack's members must share one batch size (a member with fewer records than "
                              "hparams.batch_size trains full-batch): train it in another pack")
        if spec.loss == "exact" and self.batch * self.batch > EXACT_MAX_ENTRIES:
            raise ConfigError(f"hparams.batch_size: {hp.batch_size} is too large for the exact loss")
        self.arch = generator_arch(hp.generator, self.record_shape)
        self.model = PackedMLP(self.arch, [m.seed for m in self.members], self.device)
        self.opt = make_optimizer(self.model.parameters(), hp.optimizer, lr=hp.lr, betas=hp.betas,
                                  weight_decay=hp.weight_decay)
        kw = self.arch["kwargs"]
        self.draws = DRAWS[draws]([m.seed for m in self.members], sizes, self.batch,
                                  (int(kw["latent_dim"]), str(kw["latent_dist"])), self.device)
        self.draws_kind = draws
        self.temperature = torch.tensor([float(m.temperature) for m in self.members], device=self.device)
        if not bool(torch.isfinite(self.temperature).all()) or bool((self.temperature <= 0).any()):
            raise ConfigError("every member's temperature must be a finite number > 0")
        self.steps_done = 0

    @property
    def k(self) -> int:
        return len(self.members)

    def step(self) -> Tensor:
        """One step of every member: draw, generate, the K losses on their K minibatches, one backward, Adam."""
        idx, z = self.draws(self.steps_done)
        if idx is None:
            y = self.records.unsqueeze(0) if self.k == 1 else torch.stack(
                [self.records[o:o + self.batch] for o in self.offset.tolist()])
        else:
            y = self.records[idx + self.offset[:, None]]
        x = self.model(z)
        losses = ewgan_losses(x, y, self.spec, self.temperature)
        self.opt.zero_grad(set_to_none=True)
        losses.sum().backward()
        self.opt.step()
        self.steps_done += 1
        return losses.detach()

    def run(self, steps: int, *, save_seconds: float | None = None, folder: Path | None = None,
            on_step: Callable[[], Any] | None = None) -> None:
        """Step until ``steps`` (from wherever the pack is), saving every member's checkpoint into ``folder``
        every ``save_seconds`` of wall time and at the end (a K-member save writes K files: by time, not by
        step count, so a fast device does not spend its time writing). A non-finite loss names its member and
        stops; the losses are read on the host only then (one sync per save, none per step)."""
        last = time.perf_counter()
        while self.steps_done < steps:
            losses = self.step()
            if on_step is not None:
                on_step()
            now = time.perf_counter()
            if self.steps_done == steps or (save_seconds is not None and now - last >= save_seconds):
                last = now
                bad = [m.name for m, v in zip(self.members, losses.tolist()) if not math.isfinite(v)]
                if bad:
                    raise DataError(f"{', '.join(bad)}: loss became non-finite by step {self.steps_done}; "
                                    "lower hparams.lr")
                if folder is not None:
                    self.save(folder)

    # ------------------------------------------------------------------ per-member state

    def member_state(self, k: int) -> dict[str, Any]:
        """Member k's own checkpoint: weights, Adam moments, the step (its draws are a function of it)."""
        moments = {}
        for j, p in enumerate(self.model.parameters()):
            st = self.opt.state.get(p, {})
            moments[j] = {key: (v[k].detach().clone() if torch.is_tensor(v) and v.ndim else v) for key, v in st.items()}
        return {"name": self.members[k].name, "seed": self.members[k].seed, "step": self.steps_done,
                "temperature": self.members[k].temperature, "draws": self.draws_kind,
                "model": self.model.member_state(k), "moments": moments}

    def load_member_state(self, k: int, state: dict[str, Any]) -> None:
        if int(state["seed"]) != self.members[k].seed or state.get("draws") != self.draws_kind:
            raise DataError(f"{self.members[k].name}: its checkpoint is another run's (seed or draws differ)")
        self.model.load_member(k, state["model"])
        params = self.model.parameters()
        for j, st in state["moments"].items():
            p = params[int(j)]
            own = self.opt.state[p]
            for key, v in st.items():
                if torch.is_tensor(v) and v.ndim:
                    if key not in own:
                        own[key] = torch.zeros_like(p)
                    own[key][k].copy_(v)
                else:
                    own[key] = v.clone() if torch.is_tensor(v) else v

    def save(self, folder: Path) -> None:
        """Every member's checkpoint, ``folder/<member name>.pt`` (written atomically)."""
        from dpsynth.methods.artifacts import torch_save

        for k in range(self.k):
            torch_save(self.member_state(k), Path(folder) / f"{self.members[k].name}.pt")

    def resume(self, folder: Path) -> int:
        """Load every member's checkpoint from ``folder``; all must exist at one step, or none (a fresh pack).
        Returns the step resumed from."""
        from dpsynth.methods.artifacts import torch_load

        paths = [Path(folder) / f"{m.name}.pt" for m in self.members]
        found = [p.is_file() for p in paths]
        if not any(found):
            return 0
        states = [torch_load(p, "packed-trainer checkpoint", "delete it to train that run again", weights_only=False)
                  if ok else None for p, ok in zip(paths, found)]
        steps = {int(s["step"]) for s in states if s is not None}
        if not all(found) or len(steps) != 1:
            raise DataError(f"{folder}: the pack's member checkpoints are at different steps ({sorted(steps)}) or "
                            "missing; a pack resumes from one step (delete them to start it again)")
        for k, st in enumerate(states):
            assert st is not None
            self.load_member_state(k, st)
        self.steps_done = steps.pop()
        return self.steps_done
