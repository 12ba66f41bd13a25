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
GpuLever = Literal["cudnn_benchmark", "channels_last", "fused_adam", "compiled_generator", "bf16"]
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

    def fit_steps(self, n_records: int) -> int | None:
        """A method that releases once (``MethodSpec.releases_once``): the steps of its fit to that release on
        ``n_records`` training records (post-processing, at every scale); None for every other method."""
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
        if self.adversarial and self.sanitizer == "image" and self.p > 0:
            # The image sanitizer noises the n real-matched rows only; the n' extra rows are clipped, not noised,
            # which is sound when their gradient never meets real data. In the adversarial variant it passes
            # through phi_j, trained without noise on partition j: a function of private records, released.
            return (f"hparams.p {self.p:g}: the adversarial variant needs p 0 with the image sanitizer (the n' extra "
                    "images' gradient passes through critics trained on clean partitions and is released without "
                    "noise); set p: 0, or sanitizer: param")
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


_BIOR = ("1.1", "1.3", "1.5", "2.2", "2.4", "2.6", "2.8", "3.1", "3.3", "3.5", "3.7", "3.9", "4.4", "5.5", "6.8")
#: PyWavelets 1.8's discrete wavelets (``pywt.wavelist(kind="discrete")``, checked equal by
#: tests/test_wavelet_baseline.py), spelled out so loading params.yaml imports neither pywt nor the scipy
#: it loads (one more BLAS pool in every process that reads the configuration).
DISCRETE_WAVELETS: frozenset[str] = frozenset(
    ["haar", "dmey", *(f"db{i}" for i in range(1, 39)), *(f"sym{i}" for i in range(2, 21)),
     *(f"coif{i}" for i in range(1, 18)), *(f"bior{b}" for b in _BIOR), *(f"rbio{b}" for b in _BIOR)])


class WaveletWGANHparams(Hparams):
    """The wavelet-denoising baseline of Reshetova, Chen, Ozgur (ISIT 2024, arXiv:2306.09547) Figs. 2 and 8:
    the privatized images denoised with PyWavelets, the denoiser's parameters chosen from the grid below
    on the CLEAN images (as the paper does: only approximately private), then a WGAN-GP (Gulrajani et al.,
    arXiv:1704.00028) trained on the denoised images. Defaults: WGAN-GP's (Adam 1e-4, betas (0.5, 0.9),
    5 critic steps, penalty 10) and the paper's generator (unconditional DCGAN, latent 100 ~ U[0, 1])."""

    batch_size: int = Field(default=64, gt=0, description="denoised records (and generated images) per step")
    lr: float = Field(default=1e-4, gt=0, allow_inf_nan=False)
    betas: tuple[float, float] = (0.5, 0.9)
    optimizer: Literal["adam"] = Field(default="adam", description="the generator's Adam (the critic's too)")
    critic_steps: int = Field(default=5, gt=0, description="critic steps per generator step")
    gp_weight: float = Field(default=10.0, ge=0, description="gradient-penalty weight")
    critic_dim: int = Field(default=64, gt=0, description="critic width d (GS-WGAN's DCGAN critic, nets/gswgan.py)")
    wavelets: list[str] = Field(default_factory=lambda: ["haar", "db2", "db4", "sym4", "coif1", "bior2.2"],
                                min_length=1, description="wavelet bases tried (pywt names); the paper names none")
    levels: list[int] = Field(default_factory=lambda: [1, 2, 3], min_length=1,
                              description="decomposition levels tried (those deeper than a basis allows are skipped)")
    threshold_rules: list[Literal["soft", "hard"]] = Field(default_factory=lambda: ["soft", "hard"], min_length=1)
    threshold_multipliers: list[float] = Field(
        default_factory=lambda: [0.5, 1.0, 1.5, 2.0, 3.0, 4.0], min_length=1,
        description="thresholds tried, in units of the mechanism's per-pixel noise std (a public number)")
    tune_records: int = Field(default=1000, gt=0, description="clean training records (paired with their "
                              "privatized copies) the grid is scored on; the paper does not say how many")

    @field_validator("wavelets")
    @classmethod
    def _known_wavelets(cls, v: list[str]) -> list[str]:
        bad = [w for w in v if w not in DISCRETE_WAVELETS]
        if bad:
            raise ValueError(f"unknown wavelet {', '.join(map(repr, bad))} (PyWavelets' discrete ones: "
                             "pywt.wavelist(kind='discrete'), e.g. haar, db2, sym4, coif1, bior2.2)")
        return v

    @field_validator("levels")
    @classmethod
    def _positive_levels(cls, v: list[int]) -> list[int]:
        if any(level < 1 for level in v):
            raise ValueError(f"levels must be >= 1, got {v}")
        return v

    @field_validator("threshold_multipliers")
    @classmethod
    def _multipliers(cls, v: list[float]) -> list[float]:
        if any(not (k >= 0 and k < float("inf")) for k in v):
            raise ValueError(f"threshold_multipliers must be finite and >= 0, got {v}")
        return v


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

    def fit_steps(self, n_records: int) -> int:
        """``epochs`` of ``n_records // batch_size`` generator steps."""
        return self.epochs * (n_records // self.batch_size)

    def private_run_problem(self) -> str | None:
        if self.bandwidth_sq is None:
            return ("DP-MERF needs a fixed, public kernel bandwidth (hparams.bandwidth_sq, e.g. the authors' 105 "
                    "for MNIST, 127 for Fashion-MNIST): computing it from the private data would leak")
        return None


class ClassGaussianHparams(Hparams):
    """The trivial central-DP baseline (``methods/central_baseline.py``): a class-conditional Gaussian released
    through ONE Gaussian mechanism (noisy global second moment -> a rank-``rank`` basis, noisy class counts,
    class sums and projected per-class second moments), fitted in closed form. Its one step is the release; the
    shared settings (batch size, lr, optimizer) train nothing here."""

    generator: Literal["class_gaussian"] = Field(default="class_gaussian", description="dpsynth.nets generator "
                                                 "name (the fitted Gaussian, held as buffers)")
    rank: int = Field(default=20, gt=0, description="the covariances' rank: the top eigenvectors of the noisy "
                      "global second moment (MNIST's first 20 principal components hold about 65 % of its "
                      "variance; ours)")

    def fit_steps(self, n_records: int) -> int:
        """One step, the release: the model is fitted to it in closed form."""
        return 1


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
