"""The generator forward of the DP-Sinkhorn step, for one member or for K packed members.

:func:`fast_forward` is ``G(z, labels)`` computed faster where we know how, and the same function of
G's parameters (tests/test_fast_step.py): for DCGAN, ``channels_last`` activations and the last
stride-1 ``ConvTranspose2d`` -- which PyTorch runs on a slow col2im path on CPU -- as the equivalent
``Conv2d`` with transposed, flipped weights. Both use the generator's own parameters, so its state
dict and optimizer are untouched.

:class:`StackedForward` runs K members' generators as ONE forward: ``vmap(functional_call(...))``
over their parameters stacked every step (each member's stay leaves of its own module, under its own
optimizer, so the stack's backward hands each member its gradient), its K convolutions grouped into
one launch per layer -- the point on a GPU, where one member's small convolutions leave it idle. On a
CPU oneDNN's grouped transposed convolutions are slower than K plain ones (0.45x measured on 2 cores),
so the packed step runs each member's own :func:`fast_forward` in turn there (``forward_mode="loop"``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, vmap

from dpsynth.compiling import compile_failed, compiled
from dpsynth.methods.dp_sinkhorn.tuning import StepTuning
from dpsynth.nets.dcgan import DCGANGenerator

__all__ = ["fast_forward", "StackedForward"]


def _last_as_conv(x: Tensor, ct: nn.ConvTranspose2d) -> Tensor:
    """``ConvTranspose2d(k, stride 1, padding p)`` == ``Conv2d(k, padding k-1-p)`` with the
    in/out axes swapped and the kernel flipped (the adjoint of a correlation)."""
    w = ct.weight.transpose(0, 1).flip(-1, -2)
    pad = ct.kernel_size[0] - 1 - ct.padding[0]
    return F.conv2d(x, w, ct.bias, padding=pad)


def fast_forward(G: nn.Module, z: Tensor, labels: Tensor | None, tuning: StepTuning | None = None,
                 vmapped: bool = False) -> Tensor:
    """``G(z, labels)`` computed faster where we know how; the same function of G's parameters.

    For :class:`DCGANGenerator`: channels_last activations (on the CPU always; on a GPU with the
    ``channels_last`` lever), and a stride-1 last transposed convolution run as a plain convolution.
    Other generators use their own forward. The ``bf16`` lever (``tuning.py``) runs it under
    bfloat16 autocast and hands back float32 images, so everything after it stays float32; the
    ``compiled_generator`` lever runs the same forward compiled (``COMPILE_MODE``).
    ``vmapped`` (:class:`StackedForward`): the activations keep vmap's layout -- functorch cannot
    query a channels_last one, and it lays out the members' grouped convolutions itself.
    """
    tuning = tuning or StepTuning()
    forward = _generator_forward
    if tuning.compiled_generator and not vmapped:
        forward = compiled(_generator_forward, mode=COMPILE_MODE, fullgraph=False) or _generator_forward
    with tuning.autocast(z.device):
        try:
            out = forward(G, z, labels, None if vmapped else tuning.channels_last)
        except Exception as exc:  # noqa: BLE001 - a backend failure: the eager forward is the same function
            if forward is _generator_forward:
                raise
            compile_failed(exc)
            out = _generator_forward(G, z, labels, None if vmapped else tuning.channels_last)
    return out.float() if out.dtype == torch.bfloat16 else out


#: The ``compiled_generator`` lever's mode: autotuned kernels, no CUDA graphs of Inductor's own (the step's
#: graph captures everything, ``graph.py``).
COMPILE_MODE = "max-autotune-no-cudagraphs"


def _generator_forward(G: nn.Module, z: Tensor, labels: Tensor | None, channels_last: bool | None) -> Tensor:
    """``G(z, labels)``: DCGAN's by :func:`_dcgan_forward`, others' their own (what the lever compiles)."""
    if isinstance(G, DCGANGenerator):
        return _dcgan_forward(G, z, labels, channels_last)
    return G(z, labels)


def _dcgan_forward(G: DCGANGenerator, z: Tensor, labels: Tensor | None, channels_last: bool | None) -> Tensor:
    """``channels_last``: True/False as the lever says (the CPU always converts); None: never."""
    G._check_inputs(z, labels)
    h = z if G.embed is None else torch.cat([z, G.embed(labels)], dim=1)
    h = h[:, :, None, None]
    layers = list(G.net)
    for i, layer in enumerate(layers):
        last_conv = i == len(layers) - 2 and isinstance(layer, nn.ConvTranspose2d)
        if last_conv and layer.stride == (1, 1) and layer.output_padding == (0, 0) and layer.dilation == (1, 1):
            h = _last_as_conv(h, layer)
        else:
            h = layer(h)
        if i == 0 and channels_last is not None and (h.device.type == "cpu" or channels_last):
            h = h.contiguous(memory_format=torch.channels_last)
    return h if channels_last is None else h.contiguous()


class _FastForward(nn.Module):
    """``fast_forward(G, ..., tuning)`` as a module, so ``functional_call`` can run it on given weights."""

    def __init__(self, G: nn.Module, tuning: StepTuning, vmapped: bool = False) -> None:
        super().__init__()
        self.G, self.tuning, self.vmapped = G, tuning, vmapped

    def forward(self, z: Tensor, labels: Tensor | None) -> Tensor:
        return fast_forward(self.G, z, labels, self.tuning, vmapped=self.vmapped)


class StackedForward:
    """K members' generators (one architecture) as one vmapped forward on their stacked weights.

    The weights are stacked from each member's own module every call (so gradients reach each
    member's leaves); the BatchNorm statistics are stacked too, updated in place by the forward and
    written back into each member's module, which stays the one place its state lives (its
    checkpoint, its release). ``tuning``: the levers as the caller already reduced them for vmap
    (no ``bf16``, no ``channels_last``: see ``step.PackedStep``)."""

    def __init__(self, template: nn.Module, tuning: StepTuning) -> None:
        self._meta = _FastForward(copy.deepcopy(template).to("meta"), tuning, vmapped=True)
        self._param_names = [k for k, _ in template.named_parameters()]
        self._buffer_names = [k for k, _ in template.named_buffers()]

    def __call__(self, models: Sequence[nn.Module], z: Sequence[Tensor], labels: Sequence[Tensor | None]) -> Tensor:
        own = [(dict(G.named_parameters()), dict(G.named_buffers())) for G in models]
        params = {f"G.{k}": torch.stack([p[k] for p, _ in own]) for k in self._param_names}
        buffers = {f"G.{k}": torch.stack([b[k] for _, b in own]) for k in self._buffer_names}

        def one(p: dict[str, Tensor], b: dict[str, Tensor], zz: Tensor, ll: Tensor | None) -> Tensor:
            return functional_call(self._meta, (p, b), (zz, ll))

        zs = torch.stack(list(z))
        if labels[0] is None:
            out = vmap(lambda p, b, zz: one(p, b, zz, None))(params, buffers, zs)
        else:
            out = vmap(one)(params, buffers, zs, torch.stack(list(labels)))
        with torch.no_grad():  # BN's running statistics, updated in the stack, back to each member
            for k in self._buffer_names:
                for i, (_, b) in enumerate(own):
                    b[k].copy_(buffers[f"G.{k}"][i])
        return out
