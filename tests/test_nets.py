"""Tests of dpsynth.nets: shapes, ranges, conditioning, parameter counts, determinism, factory."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dpsynth.errors import ConfigError
from dpsynth.nets import BigGANGenerator, DCGANGenerator, MLPGenerator, build_generator


def _count(m: torch.nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def test_dcgan_mnist_layout_shape_range_and_param_count() -> None:
    torch.manual_seed(0)
    gen = build_generator("dcgan")  # latent 12 ~ U(0,1), embed 4, 10 classes
    out, labels = gen.sample(8, torch.Generator().manual_seed(1))
    assert out.shape == (8, 1, 28, 28) and labels is not None and labels.shape == (8,)
    assert out.min() >= -1 and out.max() <= 1
    # Not saturated at init (DCGAN init): tanh of moderate pre-activations.
    assert out.abs().max() < 0.999
    convs = [m for m in gen.modules() if isinstance(m, torch.nn.ConvTranspose2d)]
    assert [(c.out_channels, c.kernel_size[0], c.stride[0], c.padding[0]) for c in convs] == [
        (256, 7, 1, 0), (128, 4, 2, 1), (64, 4, 2, 1), (1, 3, 1, 1)
    ]
    # embed 10*4 + convT 16*256*49 + 256*128*16 + 128*64*16 + (64*9 + 1) + BN 2*(256+128+64)
    assert _count(gen) == 40 + 200_704 + 524_288 + 131_072 + 577 + 896 == 857_577


def test_dcgan_authors_init_is_pytorch_default_with_the_authors_conv2d_output() -> None:
    """init="authors" (DP-Sinkhorn's generator; nv-tlabs/DP-Sinkhorn_code's ConvCondGenerator): every
    layer keeps PyTorch's default, and the 28x28 output layer is drawn as the authors' Conv2d(64, 1, 3)
    would be (U(+-1/sqrt(64*9)) for weight and bias), not as a ConvTranspose2d (U(+-1/3)), so tanh is
    not saturated at init. The DCGAN init stays the default (Reshetova et al.'s generator)."""
    from types import SimpleNamespace

    from dpsynth.methods.dp_sinkhorn import generator_arch

    torch.manual_seed(0)
    gen = build_generator("dcgan", init="authors")
    convs = [m for m in gen.modules() if isinstance(m, torch.nn.ConvTranspose2d)]
    for c in convs[:3]:  # ConvTranspose2d default: fan-in from weight dim 1 (the output channels)
        bound = 1 / math.sqrt(c.weight.shape[1] * c.kernel_size[0] ** 2)
        assert c.weight.abs().max() <= bound and c.weight.abs().max() > 0.9 * bound and c.bias is None
    out_bound = 1 / math.sqrt(64 * 9)
    assert convs[3].weight.abs().max() <= out_bound and convs[3].weight.abs().max() > 0.9 * out_bound
    assert convs[3].bias.abs().max() <= out_bound
    bns = [m for m in gen.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert all(torch.equal(b.weight, torch.ones_like(b.weight)) and not b.bias.any() for b in bns)
    out, _ = gen.sample(8, torch.Generator().manual_seed(1))
    assert out.abs().max() < 0.999
    assert build_generator("dcgan").init == "dcgan"
    with pytest.raises(ConfigError, match="init"):
        build_generator("dcgan", init="xavier")
    # DP-Sinkhorn builds it so, at the papers' latent 12, embedding 4 (App. D.3)
    data = SimpleNamespace(x_train=np.zeros((2, 1, 28, 28), np.uint8), num_classes=10)
    hp = SimpleNamespace(generator="dcgan", model_dim=64)
    arch = generator_arch(SimpleNamespace(experiment=SimpleNamespace(hparams=hp), data=data, name="t"))
    assert arch["kwargs"]["init"] == "authors"
    assert (arch["kwargs"]["latent_dim"], arch["kwargs"]["embed_dim"]) == (12, 4)
    from dpsynth.bench.settings import DCGAN_MNIST

    assert DCGAN_MNIST == arch  # the step benchmark times the generator the runs train


def test_dcgan_unconditional_latent100_is_the_same_code() -> None:
    gen = build_generator("dcgan", latent_dim=100, num_classes=None)
    z = gen.sample_latent(5, torch.Generator().manual_seed(0))
    assert z.shape == (5, 100) and z.min() >= 0 and z.max() < 1  # U[0,1]^100 (Reshetova et al., arXiv:2306.09547)
    assert gen.sample_labels(5) is None and gen(z).shape == (5, 1, 28, 28)
    with pytest.raises(ConfigError, match="unconditional"):
        gen(z, torch.zeros(5, dtype=torch.long))


def test_dcgan_32x32_rgb_variant() -> None:
    gen = DCGANGenerator(latent_dim=32, num_classes=2, out_channels=3, image_size=32)
    out, _ = gen.sample(4, torch.Generator().manual_seed(0))
    assert out.shape == (4, 3, 32, 32)


@pytest.mark.parametrize("name", ["dcgan", "biggan"])
def test_conditioning_changes_the_output(name: str) -> None:
    torch.manual_seed(0)
    gen = build_generator(name).eval()  # eval: BN running stats, so samples are independent
    z = gen.sample_latent(4, torch.Generator().manual_seed(2))
    with torch.no_grad():
        a = gen(z, torch.zeros(4, dtype=torch.long))
        b = gen(z, torch.ones(4, dtype=torch.long))
        a2 = gen(z, torch.zeros(4, dtype=torch.long))
    assert torch.equal(a, a2)
    # BigGAN's class gains start at N(0, 0.02), so its effect at init is small but nonzero.
    assert (a - b).abs().max() > 1e-4


def test_biggan_layout_shape_range_spectral_norm_and_param_count() -> None:
    torch.manual_seed(0)
    gen = BigGANGenerator()  # latent 32, 2 classes (CelebA gender), width 256, 4 blocks
    out, labels = gen.sample(3, torch.Generator().manual_seed(0))
    assert out.shape == (3, 3, 32, 32) and out.min() >= -1 and out.max() <= 1
    assert len(gen.blocks) == 4 and gen.bottom == 2
    sn = [m for m in gen.modules() if hasattr(m, "parametrizations") and hasattr(m.parametrizations, "weight")]
    assert len(sn) == 1 + 4 * 3 + 1  # linear, 3 convs per block, output conv
    # per block: 2 cBNs x (gain + bias embeddings, 2 classes x 256), conv1 + conv2 3x3, 1x1 shortcut
    block = 2 * (2 * 2 * 256) + 2 * (256 * 256 * 9 + 256) + (256 * 256 + 256)
    # SN-linear z -> 256x2x2, 4 blocks, output BN (affine), output conv 256 -> 3
    expected = (32 * 1024 + 1024) + 4 * block + 2 * 256 + (256 * 3 * 9 + 3)
    assert _count(gen) == expected == 5_033_219


def test_mlp_generator_shape_and_param_count() -> None:
    gen = build_generator("mlp", latent_dim=2, output_dim=2)
    z = gen.sample_latent(6, torch.Generator().manual_seed(0))
    assert z.min() >= -1 and z.max() < 1 and z.min() < 0  # U[-1, 1]^2
    assert gen(z).shape == (6, 2)
    assert _count(gen) == (2 * 256 + 256) + (256 * 256 + 256) + (256 * 2 + 2) == 67_074
    wide = MLPGenerator(latent_dim=2, output_dim=784, hidden=(500, 500), latent_dist="uniform", output_activation="tanh")
    assert wide(wide.sample_latent(3)).shape == (3, 784)


@pytest.mark.parametrize("name", ["dcgan", "mlp"])
def test_seeded_sampling_is_deterministic(name: str) -> None:
    torch.manual_seed(0)
    gen1 = build_generator(name)
    torch.manual_seed(0)
    gen2 = build_generator(name)
    s1, l1 = gen1.sample(5, torch.Generator().manual_seed(7))
    s2, l2 = gen2.sample(5, torch.Generator().manual_seed(7))
    s3, _ = gen1.sample(5, torch.Generator().manual_seed(8))
    assert torch.equal(s1, s2) and (l1 is None or torch.equal(l1, l2))
    assert not torch.equal(s1, s3)


def test_factory_and_input_errors() -> None:
    with pytest.raises(ConfigError, match="unknown generator 'vae'"):
        build_generator("vae")
    with pytest.raises(ConfigError, match="bad arguments"):
        build_generator("dcgan", latnt_dim=3)
    with pytest.raises(ConfigError, match="latent_dist"):
        build_generator("mlp", latent_dist="cauchy")
    with pytest.raises(ConfigError, match="image_size"):
        build_generator("dcgan", image_size=64)
    gen = build_generator("dcgan")
    with pytest.raises(ConfigError, match=r"\(B, 12\)"):
        gen(torch.zeros(2, 11), torch.zeros(2, dtype=torch.long))
    with pytest.raises(ConfigError, match="class-conditional"):
        gen(torch.zeros(2, 12))
