"""Each method's own hyperparameters.

One model per method, so a key that belongs to another method (``p`` on a GS-WGAN experiment, a
``loss`` on DP-Sinkhorn) is refused with its key path instead of being accepted and silently
ignored. Defaults are the papers' (or ours where a paper gives none, said in the description);
the settings all generator trainers share live on ``Hparams``.
"""

from __future__ import annotations

from typing import ClassVar, Literal, get_args

from pydantic import Field, field_validator, model_validator

from dpsynth.config.base import OptimizerName, Strict

#: The DP-Sinkhorn step's speed levers on a GPU (``methods/dp_sinkhorn/tuning.py`` says what each does),
#: in the order the benchmark adds them.
GpuLever = Literal["cudnn_benchmark", "channels_last", "fused_adam", "bf16"]
GPU_LEVERS: tuple[str, ...] = get_args(GpuLever)


class Hparams(Strict):
    """What every generator trainer reads; a method's model adds its own settings."""

    batch_size: int = Field(default=50, gt=0)
    lr: float = Field(default=1e-5, gt=0, allow_inf_nan=False)
    optimizer: OptimizerName = "adam"
    betas: tuple[float, float] = (0.9, 0.999)
    generator: str = Field(default="dcgan", description="dpsynth.nets generator name")
    max_steps: int | None = Field(default=None, gt=0, description="steps of a non-private run when the "
                                  "scale sets no step budget")

    @field_validator("betas")
    @classmethod
    def _betas(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not all(0 <= b < 1 for b in v):
            raise ValueError(f"betas must lie in [0, 1), got {list(v)}")
        return v

    def private_run_problem(self) -> str | None:
        """Why these settings cannot train privately (None: they can)."""
        return None


class _SinkhornSolver(Hparams):
    """Settings of the annealed Sinkhorn solver (``dpsynth.ot.sinkhorn.sinkhorn_loop``)."""

    weight_decay: float = Field(default=0.0, ge=0)
    sinkhorn_iters: int | None = Field(default=None, gt=0, description="Sinkhorn iterations per solve "
                                       "(None: the method's default)")
    sinkhorn_scaling: float | None = Field(default=0.5, gt=0, lt=1, description="eps-scaling factor of the "
                                           "annealed solver (None: no annealing)")


class DPSinkhornHparams(_SinkhornSolver):
    """DP-Sinkhorn (Cao et al., "Don't Generate Me: Training Differentially Private Generative Models
    with Sinkhorn Divergence", NeurIPS 2021, arXiv:2111.01177)."""

    p: float = Field(default=0.2, ge=0, le=1, description="semi-debias mixture fraction")
    m: float = Field(default=0.0, ge=0, description="L1 weight in the ground cost")
    alpha_c: float = Field(default=15.0, ge=0, description="label one-hot scale in the joint space")
    temperature: float = Field(default=0.05, gt=0, description="entropic eps, in the cost's units")
    clip: float = Field(default=0.5, gt=0, description="clipping bound C")
    sanitizer: Literal["image", "param", "none"] = "image"
    adversarial: bool = Field(default=False, description="adversarial feature cost (ICLR Table 2): one "
                              "feature extractor per fixed partition, one partition drawn per step")
    alpha_a: float = Field(default=15.0, ge=0, description="feature weight (not given in the paper; ours)")
    partitions: int | None = Field(default=None, ge=2, description="adversarial variant: number of "
                                   "partitions k (None: N // batch_size, the paper's batches-as-records)")
    feature_lr: float | None = Field(default=None, gt=0, description="feature extractors' Adam lr (None: lr)")
    model_dim: int = Field(default=64, gt=0, description="generator width d: the DCGAN generator has channels "
                           "(4d, 2d, d), the published 64")
    gpu_levers: list[GpuLever] = Field(
        default_factory=list, description="speed levers of the step on a GPU (methods/dp_sinkhorn/tuning.py; "
        "`dpsynth bench dp-sinkhorn --levers` measures each): none on the CPU; bf16 runs the generator in "
        "bfloat16 while the image gradient is still clipped and noised in float32")

    def private_run_problem(self) -> str | None:
        if self.sanitizer == "none":
            return "a private DP-Sinkhorn run needs a sanitizer (image or param), not 'none'"
        return None

    @model_validator(mode="after")
    def _fused_needs_adam(self) -> DPSinkhornHparams:
        if "fused_adam" in self.gpu_levers and self.optimizer != "adam":
            raise ValueError(f"gpu_levers: fused_adam is Adam's fused kernel; optimizer is {self.optimizer!r}")
        return self


class GSWGANHparams(Hparams):
    """GS-WGAN (Chen, Orekondy, Fritz, "GS-WGAN: A Gradient-Sanitized Approach for Learning
    Differentially Private Generators", NeurIPS 2020, arXiv:2006.08265)."""

    optimizer: Literal["adam"] = Field(default="adam", description="the published code's Adam (no other)")
    clip: float = Field(default=0.5, gt=0, description="clipping bound C of the per-sample image gradient")
    critic_steps: int = Field(default=5, gt=0)
    gp_weight: float = Field(default=10.0, ge=0)
    drift: float = Field(default=1e-3, ge=0, description="critic drift penalty on D(real)^2")
    ema_decay: float = Field(default=0.999, ge=0, lt=1, description="released generator = EMA of the generator")
    model_dim: int = Field(default=64, gt=0, description="generator/critic width d")

    #: The settings that shape the warm-started critics: cells of a sweep that leave them alone (a
    #: sigma sweep) reuse their base's warm start.
    WARM_START_KEYS: ClassVar[tuple[str, ...]] = ("batch_size", "lr", "betas", "critic_steps", "gp_weight",
                                                  "drift", "model_dim")


class EntropicWGANHparams(_SinkhornSolver):
    """The entropic Wasserstein GAN on locally privatized data (Reshetova, Chen, Ozgur, "Training
    generative models from privatized data", ISIT 2024, arXiv:2306.09547)."""

    loss: Literal["entropic", "exact", "sinkhorn_divergence"] = "entropic"
    cost_p: Literal[1, 2] | None = Field(default=None, description="p of the ||x-y||_p^p cost; None: matched "
                                         "to the local mechanism (laplace -> 1, gaussian -> 2)")
    allow_mismatch: bool = Field(default=False, description="allow a cost_p that does not match the local "
                                 "mechanism (ablation only; otherwise an error)")
    geomloss_scaling: float | None = Field(
        default=None, gt=0, lt=1, description="geomloss's eps-scaling, as the paper ran its 2-D experiments "
        "(0.99): the blur falls by this ratio per iteration, i.e. the temperature by its p-th power, from the "
        "largest possible cost down to lambda, one update per temperature; the iteration count is that "
        "schedule's length: sinkhorn_iters must not be given with it, and sinkhorn_scaling is not used")

    @model_validator(mode="after")
    def _one_schedule(self) -> "EntropicWGANHparams":
        if self.geomloss_scaling is not None and self.sinkhorn_iters is not None:
            raise ValueError("geomloss_scaling sets the number of Sinkhorn iterations (its schedule's length); "
                             f"drop sinkhorn_iters ({self.sinkhorn_iters})")
        return self



class DPMERFHparams(Hparams):
    """DP-MERF (Harder, Adamczewski, Park, "DP-MERF: Differentially Private Mean Embeddings with Random
    Features for Practical Privacy-Preserving Data Generation", AISTATS 2021, arXiv:2002.11603). Defaults
    are the authors' MNIST/Fashion-MNIST settings (``ParkLabML/DP-MERF``, ``code_balanced/mnist_sr_gen.py``):
    10,000 random features, the conditional conv generator, 5 epochs of batch 100, Adam lr 0.01 decayed
    by 0.9 per epoch. The private data is read once (one noisy mean embedding); batch size, lr and epochs
    shape only the generator's fit to that release (post-processing)."""

    batch_size: int = Field(default=100, gt=0, description="generated samples per generator step")
    lr: float = Field(default=0.01, gt=0, allow_inf_nan=False)
    generator: str = Field(default="merf_conv", description="dpsynth.nets generator name")
    n_features: int = Field(default=10_000, gt=0, description="random Fourier features D: cos and sin of D/2 "
                            "frequencies, scaled so every record's feature vector has norm exactly 1")
    bandwidth_sq: float | None = Field(default=None, gt=0, allow_inf_nan=False, description="squared length "
                                       "scale l^2 of the Gaussian kernel exp(-||x - x'||^2 / (2 l^2)) on images in "
                                       "[0, 1]; frequencies w ~ N(0, I / l^2). A FIXED public value (the authors' "
                                       "constants: 105 for MNIST, 127 for Fashion-MNIST); never computed from the "
                                       "private data")
    epochs: int = Field(default=5, gt=0, description="generator epochs of n_records // batch_size steps")
    lr_decay: float = Field(default=0.9, gt=0, le=1, description="lr factor per epoch (the authors' StepLR)")
    code_dim: int = Field(default=5, gt=0, description="latent code size of the generator")

    @field_validator("n_features")
    @classmethod
    def _even(cls, v: int) -> int:
        if v % 2:
            raise ValueError(f"n_features must be even (cos and sin of n_features / 2 frequencies), got {v}")
        return v

    def private_run_problem(self) -> str | None:
        if self.bandwidth_sq is None:
            return ("DP-MERF needs a fixed, public kernel bandwidth (hparams.bandwidth_sq, e.g. the authors' 105 "
                    "for MNIST, 127 for Fashion-MNIST): computing it from the private data would leak")
        return None


class DPCGANHparams(Hparams):
    """DP-CGAN (Torkzadehmahani, Kairouz, Paten, "DP-CGAN: Differentially Private Synthetic Data and Label
    Generation", CVPR Workshops 2019, arXiv:2001.09700), the DP-SGD GAN baseline of GS-WGAN (NeurIPS 2020,
    arXiv:2006.08265) and DP-Sinkhorn's ICLR Table 1. Defaults are the authors' MNIST script (as mirrored in
    ``ParkLabML/DP-MERF``, ``dpcgan/dp_cgan_reference_im.py``): one-hidden-layer (128) conditional MLPs,
    latent U(-1, 1)^100, expected batch 600, clip 1.1, a discriminator trained by DP-SGD with lr falling
    linearly from 0.1 to 0.052 over 10,000 steps, the generator by Adam at TensorFlow's defaults."""

    batch_size: int = Field(default=600, gt=0, description="EXPECTED Poisson batch size B of private records "
                            "(q = B / N); also the number of generated samples per step")
    lr: float = Field(default=1e-3, gt=0, allow_inf_nan=False, description="the generator's Adam lr (the "
                      "reference's TensorFlow default)")
    optimizer: Literal["adam"] = Field(default="adam", description="the generator's optimizer (the reference's "
                                       "Adam); the discriminator's is always plain SGD, as DP-SGD")
    generator: str = Field(default="cgan_mlp", description="dpsynth.nets generator name")
    clip: float = Field(default=1.1, gt=0, allow_inf_nan=False, description="clipping bound C of each real "
                        "record's per-example discriminator gradient (the fake-sample term is clipped to it too)")
    d_lr: float = Field(default=0.1, gt=0, allow_inf_nan=False, description="discriminator SGD lr at step 0")
    d_lr_end: float = Field(default=0.052, gt=0, allow_inf_nan=False, description="discriminator SGD lr from "
                            "step d_lr_decay_steps on (linear in between)")
    d_lr_decay_steps: int = Field(default=10_000, gt=0, description="steps over which the discriminator lr "
                                  "falls linearly from d_lr to d_lr_end")
    latent_dim: int = Field(default=100, gt=0, description="generator latent size (z ~ U(-1, 1))")
    hidden: int = Field(default=128, gt=0, description="hidden width of the generator and the discriminator")
