"""GS-WGAN networks (Chen et al., NeurIPS 2020, arXiv:2006.08265; the authors' code): ResNet generator and DCGAN critic, STACKED.

Both networks hold ``copies`` independent sets of parameters with a leading copy axis and
compute all copies at once with grouped convolutions (``groups=copies``) and batched
matmuls. GS-WGAN needs ``N_d`` critics (1,000 at paper scale), each warm-started with its
own non-private generator on its own shard; 1,000 Python modules stepped in a loop would
pay the per-kernel overhead 1,000 times. A copy only ever sees its own inputs (grouped
conv, per-(copy, channel) batch norm), so copy ``k`` of a stacked run equals a lone
network with copy ``k``'s parameters (tests check this).

Layouts (28x28, ``model_dim`` d = 64 as published):

- Generator (``source/models.py`` ``GeneratorResNet`` of DingfanChen/GS-WGAN): ``[z, onehot(y)]``
  -> SN-Linear -> (4d, 4, 4) -> ReLU -> pixel norm -> three up-blocks 4d->4d (4->8->16->32)
  -> SN-Conv3x3 valid (4d->C) 30x30 -> sigmoid -> top-left 28x28 crop (data in [0, 1]). An
  up-block is ``SN-conv1x1(up(x)) + SN-conv3x3(relu(pn(SN-conv3x3(up(pn(x))))))`` with ``pn``
  the pixel norm (over channels, eps 1e-10) and ``up`` nearest-neighbour x2. Spectral norm
  (``SN``) on every layer, one power iteration per training forward (none in eval mode, so
  sampling a released generator is deterministic). Latent: 10 Bernoulli(0.5).
- Critic: Conv5x5/2(C->d) 14x14 -> Conv5x5/2(d->2d) 7x7 -> Conv5x5/2(2d->4d) 4x4, ReLU after
  each; ``out = Linear(h) + <Embed(y), h>`` (class projection). Spectral norm on every
  layer (the published ``DiscriminatorDCGAN(if_SN=True)``), one power iteration per critic
  step with a per-copy ``u`` vector kept as a buffer.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dpsynth.errors import ConfigError
from dpsynth.nets.base import Generator

__all__ = ["GSWGANGenerator", "StackedCritics", "grouped_conv", "bernoulli_latent"]


def grouped_conv(x: Tensor, w: Tensor, b: Tensor | None, stride: int = 1, padding: int = 0) -> Tensor:
    """Convolve ``copies`` channel groups with their own weights.

    ``x``: (B, copies * Cin, H, W); ``w``: (copies, Cout, Cin, kh, kw); ``b``: (copies, Cout).
    """
    k, cout = w.shape[0], w.shape[1]
    return F.conv2d(x, w.reshape(k * cout, *w.shape[2:]), None if b is None else b.reshape(k * cout),
                    stride=stride, padding=padding, groups=k)


def _uniform(shape: tuple[int, ...], fan_in: int, gen: torch.Generator | None) -> Tensor:
    """PyTorch's default layer init (kaiming-uniform a=sqrt(5)): U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1.0 / math.sqrt(fan_in)
    return (torch.rand(shape, generator=gen) * 2.0 - 1.0) * bound


def bernoulli_latent(shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device) -> Tensor:
    """The published latent: i.i.d. Bernoulli(0.5) bits as floats."""
    return (torch.rand(shape, generator=generator, device=generator.device if generator else device) < 0.5).float().to(device)


# --------------------------------------------------------------------------- generator


def _l2n(v: Tensor) -> Tensor:
    return v / (v.norm(dim=-1, keepdim=True) + 1e-12)


def _spectral(w: Tensor, u_all: Tensor, idx: Tensor | None, power_iteration: bool) -> Tensor:
    """``w`` (k, out, ...) divided per copy by its largest singular value, estimated with the
    per-copy vector ``u_all`` (k, out); with ``power_iteration`` ``u_all`` advances one step
    first (the published SpectralNorm: one iteration per forward)."""
    u = u_all if idx is None else u_all[idx]
    mat = w.reshape(w.shape[0], w.shape[1], -1)  # (k, out, in)
    with torch.no_grad():
        m = mat.detach()
        if power_iteration:
            v = _l2n(torch.bmm(u[:, None, :], m)[:, 0])  # W^T u
            u = _l2n(torch.bmm(m, v[:, :, None])[:, :, 0])  # W v
            if idx is None:
                u_all.copy_(u)
            else:
                u_all[idx] = u
        v = _l2n(torch.bmm(u[:, None, :], m)[:, 0])
    sigma = torch.einsum("ko,koi,ki->k", u, mat, v)
    return w / sigma.view(-1, *([1] * (w.dim() - 1)))


def _pixel_norm(h: Tensor, copies: int, eps: float = 1e-10) -> Tensor:
    """The published pixel norm (over each copy's channels) on a (B, copies * C, H, W) tensor."""
    b, kc, hh, ww = h.shape
    g = h.view(b, copies, kc // copies, hh, ww)
    return (g * torch.rsqrt(g.pow(2).mean(dim=2, keepdim=True) + eps)).view(b, kc, hh, ww)


class _SNLayers(nn.Module):
    """Stacked weights (k, out, ...) + biases (k, out), each with its spectral-norm ``u`` buffer."""

    def __init__(self, shapes: dict[str, tuple[int, ...]]) -> None:
        super().__init__()
        self.shapes = shapes
        for name, shape in shapes.items():
            self.register_parameter(f"{name}_w", nn.Parameter(torch.empty(shape)))
            self.register_parameter(f"{name}_b", nn.Parameter(torch.empty(shape[0], shape[1])))
            self.register_buffer(f"{name}_u", torch.empty(shape[0], shape[1]))

    def reset_parameters(self, gen: torch.Generator | None) -> None:
        with torch.no_grad():
            for name, shape in self.shapes.items():
                fan_in = int(math.prod(shape[2:]))
                getattr(self, f"{name}_w").copy_(_uniform(shape, fan_in, gen))
                getattr(self, f"{name}_b").copy_(_uniform((shape[0], shape[1]), fan_in, gen))
                getattr(self, f"{name}_u").copy_(_l2n(torch.randn((shape[0], shape[1]), generator=gen)))

    def w(self, name: str) -> Tensor:
        return _spectral(getattr(self, f"{name}_w"), getattr(self, f"{name}_u"), None, self.training)

    def b(self, name: str) -> Tensor:
        return getattr(self, f"{name}_b")


class _UpBlock(_SNLayers):
    """The published ``GBlock`` (4d -> 4d, upsampling), stacked over copies."""

    def __init__(self, copies: int, channels: int) -> None:
        k, c = copies, channels
        super().__init__({"conv1": (k, c, c, 3, 3), "conv2": (k, c, c, 3, 3), "short": (k, c, c, 1, 1)})
        self.copies = copies

    def forward(self, x: Tensor) -> Tensor:
        k = self.copies
        h = F.interpolate(_pixel_norm(x, k), scale_factor=2, mode="nearest")
        h = grouped_conv(h, self.w("conv1"), self.b("conv1"), padding=1)
        h = grouped_conv(F.relu(_pixel_norm(h, k)), self.w("conv2"), self.b("conv2"), padding=1)
        # a 1x1 conv commutes with nearest upsampling: convolve at low resolution (4x cheaper)
        short = F.interpolate(grouped_conv(x, self.w("short"), self.b("short")), scale_factor=2, mode="nearest")
        return h + short


class GSWGANGenerator(Generator):
    """The published GS-WGAN ResNet generator (config name ``resnet28``), ``copies`` at once.

    ``forward(z, labels)`` is the ordinary single-network call (``copies == 1``, the released
    generator); ``forward_stacked(z, labels)`` takes (copies, B, ...) inputs (warm start).
    """

    def __init__(
        self,
        latent_dim: int = 10,
        num_classes: int | None = 10,
        model_dim: int = 64,
        out_channels: int = 1,
        image_size: int = 28,
        copies: int = 1,
        init_seed: int | None = None,
    ) -> None:
        if image_size != 28:
            raise ConfigError(f"GSWGANGenerator supports image_size 28 only, got {image_size!r}")
        if num_classes is None:
            raise ConfigError("GSWGANGenerator is class-conditional: num_classes must be set")
        if model_dim < 1 or copies < 1:
            raise ConfigError(f"GSWGANGenerator: model_dim and copies must be >= 1, got {model_dim}, {copies}")
        # The base class validates against the shared latent list; Bernoulli is ours (overridden below).
        super().__init__(latent_dim, num_classes, (out_channels, image_size, image_size), "uniform")
        self.latent_dist = "bernoulli"
        d, k = model_dim, copies
        self.model_dim, self.copies, self.out_channels = d, k, out_channels
        self.io = _SNLayers({"fc": (k, 4 * 4 * 4 * d, latent_dim + num_classes), "out": (k, out_channels, 4 * d, 3, 3)})
        self.block1 = _UpBlock(k, 4 * d)
        self.block2 = _UpBlock(k, 4 * d)
        self.block3 = _UpBlock(k, 4 * d)
        self.reset_parameters(None if init_seed is None else torch.Generator().manual_seed(init_seed))

    def reset_parameters(self, gen: torch.Generator | None = None) -> None:
        """Initialise every copy from ``gen`` (deterministic, independent of any data)."""
        for part in (self.io, self.block1, self.block2, self.block3):
            part.reset_parameters(gen)

    def sample_latent(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        return bernoulli_latent((n, self.latent_dim), generator, self._device())

    def forward_stacked(self, z: Tensor, labels: Tensor) -> Tensor:
        """``z``: (copies, B, latent), ``labels``: (copies, B) -> images (copies, B, C, 28, 28) in [0, 1]."""
        k, b = z.shape[0], z.shape[1]
        if k != self.copies or z.shape[2] != self.latent_dim or labels.shape != (k, b):
            raise ConfigError(f"GSWGANGenerator.forward_stacked: expected z ({self.copies}, B, {self.latent_dim}) "
                              f"and labels ({self.copies}, B), got {tuple(z.shape)}, {tuple(labels.shape)}")
        d = self.model_dim
        assert self.num_classes is not None
        h = torch.cat([z, F.one_hot(labels, self.num_classes).to(z.dtype)], dim=2)
        h = torch.baddbmm(self.io.b("fc")[:, None, :], h, self.io.w("fc").transpose(1, 2))  # (k, B, 64d)
        h = F.relu(h.view(k, b, 4 * d, 4, 4)).transpose(0, 1).reshape(b, k * 4 * d, 4, 4)
        h = _pixel_norm(h, k)
        h = self.block3(self.block2(self.block1(h)))  # 32x32
        h = grouped_conv(h, self.io.w("out"), self.io.b("out"))  # valid 3x3: 30x30
        h = torch.sigmoid(h[:, :, :28, :28])  # the published crop output[:, :, :-2, :-2]
        return h.reshape(b, k, self.out_channels, 28, 28).transpose(0, 1)

    def forward(self, z: Tensor, labels: Tensor | None = None) -> Tensor:
        self._check_inputs(z, labels)
        if self.copies != 1:
            raise ConfigError(f"GSWGANGenerator holds {self.copies} copies: call forward_stacked")
        assert labels is not None
        return self.forward_stacked(z[None], labels[None])[0]


# --------------------------------------------------------------------------- critics


class StackedCritics(nn.Module):
    """``copies`` DCGAN critics with class projection, computed together.

    ``weights(idx)`` returns the effective (spectrally normalised) weights of the critics
    ``idx`` (all when None); ``forward(x, y, w)`` evaluates them on (k, B, C, 28, 28) images
    with (k, B) labels and returns (k, B) scores. Splitting the two lets one critic step
    reuse the same normalised weights for the real, fake and interpolated batches.
    """

    _LAYERS = ("conv1", "conv2", "conv3", "lin", "emb")

    def __init__(
        self,
        copies: int,
        num_classes: int = 10,
        model_dim: int = 64,
        in_channels: int = 1,
        spectral_norm: bool = True,
        init_seed: int | None = None,
        empty: bool = False,
    ) -> None:
        super().__init__()
        if copies < 1 or model_dim < 1 or num_classes < 1:
            raise ConfigError(f"StackedCritics: copies, model_dim, num_classes must be >= 1, got {copies}, {model_dim}, {num_classes}")
        k, d = copies, model_dim
        self.copies, self.model_dim, self.num_classes, self.in_channels = k, d, num_classes, in_channels
        self.spectral_norm = spectral_norm
        self.feat = 4 * 4 * 4 * d
        shapes = {
            "conv1": (k, d, in_channels, 5, 5),
            "conv2": (k, 2 * d, d, 5, 5),
            "conv3": (k, 4 * d, 2 * d, 5, 5),
            "lin": (k, 1, self.feat),
            "emb": (k, num_classes, self.feat),
        }
        for name, shape in shapes.items():
            self.register_parameter(f"{name}_w", nn.Parameter(torch.empty(shape)))
            if name != "emb":
                self.register_parameter(f"{name}_b", nn.Parameter(torch.empty(k, shape[1])))
            self.register_buffer(f"{name}_u", torch.empty(k, shape[1]))
        if not empty:  # ``empty``: uninitialised, for a bank whose state is loaded right after
            self.reset_parameters(None if init_seed is None else torch.Generator().manual_seed(init_seed))

    def reset_parameters(self, gen: torch.Generator | None = None) -> None:
        with torch.no_grad():
            for name in self._LAYERS:
                w: Tensor = getattr(self, f"{name}_w")
                if name == "emb":
                    w.copy_(torch.randn(tuple(w.shape), generator=gen))  # nn.Embedding default N(0, 1)
                else:
                    fan_in = int(math.prod(w.shape[2:]))
                    w.copy_(_uniform(tuple(w.shape), fan_in, gen))
                    getattr(self, f"{name}_b").copy_(_uniform((w.shape[0], w.shape[1]), fan_in, gen))
                getattr(self, f"{name}_u").copy_(_l2n(torch.randn((w.shape[0], w.shape[1]), generator=gen)))

    def weights(self, idx: Tensor | None = None, *, power_iteration: bool = True, detach: bool = False) -> dict[str, Tensor]:
        """Effective weights of critics ``idx`` (LongTensor, or None for all).

        With ``power_iteration`` the per-copy ``u`` buffers advance one step (training);
        ``detach`` cuts the parameters out of the graph (the generator step must not
        accumulate into the critics' gradients).
        """
        out: dict[str, Tensor] = {}
        for name in self._LAYERS:
            w: Tensor = getattr(self, f"{name}_w")
            b: Tensor | None = getattr(self, f"{name}_b", None)
            if idx is not None:
                w = w[idx]
                b = None if b is None else b[idx]
            if detach:
                w = w.detach()
                b = None if b is None else b.detach()
            if self.spectral_norm:
                w = _spectral(w, getattr(self, f"{name}_u"), idx, power_iteration)
            out[f"{name}_w"] = w
            if b is not None:
                out[f"{name}_b"] = b
        return out

    def forward(self, x: Tensor, y: Tensor, w: dict[str, Tensor]) -> Tensor:
        k, b = x.shape[0], x.shape[1]
        if w["conv1_w"].shape[0] != k or y.shape != (k, b):
            raise ConfigError(f"StackedCritics: {w['conv1_w'].shape[0]} critics but inputs {tuple(x.shape)}, labels {tuple(y.shape)}")
        h = x.reshape(k, b, self.in_channels, 28, 28).transpose(0, 1).reshape(b, k * self.in_channels, 28, 28)
        h = F.relu(grouped_conv(h, w["conv1_w"], w["conv1_b"], stride=2, padding=2))
        h = F.relu(grouped_conv(h, w["conv2_w"], w["conv2_b"], stride=2, padding=2))
        h = F.relu(grouped_conv(h, w["conv3_w"], w["conv3_b"], stride=2, padding=2))
        h = h.reshape(b, k, self.feat).transpose(0, 1)  # (k, B, feat)
        out = torch.baddbmm(w["lin_b"][:, None, :], h, w["lin_w"].transpose(1, 2))[..., 0]
        # Class projection <Embed(y), h> as a one-hot matmul: an indexed gather's backward
        # (index_put accumulate) is not bit-reproducible on CPU, and exact resume needs that.
        emb = torch.bmm(F.one_hot(y, self.num_classes).to(h.dtype), w["emb_w"])  # (k, B, feat)
        return out + (emb * h).sum(dim=2)
