"""One wavelet + WGAN-GP run on the one training loop: the denoiser tuned on the clean records (the
paper's choice, labelled approximately private), the privatized records denoised, and a WGAN-GP
(Gulrajani et al., "Improved Training of Wasserstein GANs", NeurIPS 2017, arXiv:1704.00028) trained on them.

The critic and its step are GS-WGAN's (``nets.gswgan.StackedCritics`` with one copy and one class, so
its class projection is a learned bias; ``methods.gswgan_critics.critic_step``, the WGAN-GP loss with
the drift term at 0); the generator is the paper's unconditional DCGAN (``entropic_wgan.generator_arch``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from dpsynth.config.hparams import WaveletWGANHparams
from dpsynth.errors import ConfigError, DataError, DpsynthError
from dpsynth.io import atomic_open, write_npz
from dpsynth.methods.checkpoint import Resumable
from dpsynth.methods.context import TrainContext
from dpsynth.methods.entropic_wgan import generator_arch, local_noise, to_records
from dpsynth.methods.entropic_wgan.run import _privacy_report as local_privacy_report
from dpsynth.methods.gswgan_critics import CriticBank, critic_step
from dpsynth.methods.loop import Release, run_training
from dpsynth.methods.optim import make_optimizer
from dpsynth.methods.wavelet_wgan.denoise import WaveletParams, denoise, grid_cells, tune
from dpsynth.nets import build_seeded_generator
from dpsynth.nets.gswgan import StackedCritics

#: Released beside generator.pt: the privatized training records after the tuned denoiser (what the
#: WGAN-GP trained on; the third column of Figs. 2 and 8), float32 (N, C*H*W) in [-1, 1].
DENOISED_FILE = "denoised.npz"
#: Private (beside the checkpoint): every grid cell's error to the CLEAN records.
TUNING_FILE = "wavelet_tuning.csv"
LOG_EVERY = 20
#: What every report of this method says about its privacy (privacy.json, the summary, the tables).
APPROXIMATE = ("only approximately private (Reshetova et al., arXiv:2306.09547, Sec. 4.3): the denoiser's "
               "wavelet, level and threshold were chosen to minimise the error to the CLEAN training images "
               "under this noise instance, a non-private function of the data; the local epsilon holds for the "
               "privatized records alone, not for these parameters, the denoised set or the generator")


def noise_std(noise: dict[str, Any]) -> float:
    """Per-pixel standard deviation of the local mechanism's noise (public: it follows from epsilon, delta, R),
    as the mechanism itself says (``LocalNoise.coordinate_std``: Laplace of scale b -> b sqrt(2), Gaussian -> s)."""
    from dpsynth.privacy import mechanisms

    return mechanisms.local(noise["mechanism"]).coordinate_std(float(noise["noise_scale"]))


def validate(ctx: TrainContext) -> tuple[int, ...]:
    """The record shape; one clear error for what this baseline cannot run on."""
    from dpsynth.data.registry import get_spec

    exp = ctx.experiment
    if exp.local is None:
        raise ConfigError(f"experiments.{ctx.name}: wavelet_wgan denoises locally privatized images; add a local: section")
    if getattr(exp, "train_size", None) is not None:  # the tuning pairs records by position in the full split
        raise ConfigError(f"experiments.{ctx.name}.train_size: not supported by wavelet_wgan (its tuning pairs each "
                          "privatized record with its clean one by position); remove it")
    if exp.local.dct:
        raise ConfigError(f"experiments.{ctx.name}.local.dct: the wavelet baseline denoises pixels (the paper's Figs. "
                          "2 and 8 use no DCT); set dct: false")
    shape = tuple(int(s) for s in get_spec(exp.dataset).shape)
    if shape != (1, 28, 28):
        raise DataError(f"{ctx.name}: the WGAN-GP critic takes 1x28x28 images; {exp.dataset} has records {shape}")
    x = ctx.data.x_train
    if x.ndim != 2 or x.shape[1] != 28 * 28:
        raise DataError(f"{ctx.name}: expected privatized float records (N, 784), got {x.shape} -- run "
                        f"`dpsynth privatize {ctx.name}` first")
    return shape


def clean_tuning_pairs(ctx: TrainContext, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` CLEAN training records and their privatized copies, row for row (the records the train stage
    gave this run, subset as the scale says, in the privatize stage's order). Reading the clean file is
    what makes the baseline approximately private; nothing read here leaves except the grid's choice."""
    from dpsynth.data.dataset import load_processed, subset_indices

    if ctx.processed_path is None or not ctx.processed_path.is_file():
        raise DataError(f"{ctx.name}: the wavelet tuning reads the clean records ({ctx.processed_path}); run "
                        f"`dpsynth data prepare {ctx.experiment.dataset}` first")
    full = load_processed(ctx.processed_path)
    idx = subset_indices(len(full.x_train), ctx.preset.train_subset, ctx.seed)
    clean_all = full.x_train if idx is None else full.x_train[idx]
    noisy_all = ctx.data.x_train
    if len(clean_all) != len(noisy_all):
        raise DataError(f"{ctx.name}: {len(noisy_all)} privatized records but {len(clean_all)} clean ones in "
                        f"{ctx.processed_path}; re-run `dpsynth privatize {ctx.name}`")
    pick = np.sort(np.random.default_rng([ctx.seed, 0x3A7E]).permutation(len(noisy_all))[:n])
    return to_records(clean_all[pick]), np.asarray(noisy_all[pick], dtype=np.float64)


def tuned_denoiser(ctx: TrainContext, hp: WaveletWGANHparams, shape: tuple[int, ...],
                   std: float) -> tuple[WaveletParams, list[dict[str, Any]]]:
    cells = grid_cells(hp.wavelets, hp.levels, hp.threshold_rules, hp.threshold_multipliers, shape[-1])
    clean, noisy = clean_tuning_pairs(ctx, hp.tune_records)
    return tune(clean, noisy, shape, cells, std)


class WaveletWGANStepper(Resumable):
    """WGAN-GP on the denoised records as the one training loop's stepper: ``critic_steps`` critic updates
    (the gradient penalty on real-fake interpolates), then one generator update."""

    log_fields = ("d_loss", "wasserstein", "g_loss")
    log_every = LOG_EVERY

    def __init__(self, ctx: TrainContext, denoised: np.ndarray, params: WaveletParams, noise: dict[str, Any],
                 arch: dict[str, Any], shape: tuple[int, ...], scores: list[dict[str, Any]]) -> None:
        hp: WaveletWGANHparams = ctx.experiment.hparams  # type: ignore[assignment]
        self.ctx, self.hp, self.params, self.noise, self.arch, self.shape = ctx, hp, params, noise, arch, shape
        self.denoised_np, self.scores = denoised, scores
        dev = ctx.device
        self.records = torch.as_tensor(denoised, device=dev).reshape(-1, *shape)
        self.gen = build_seeded_generator(arch, ctx.seed, dev).train()
        seeds = np.random.SeedSequence([ctx.seed, 0x3A7E]).generate_state(3)
        critics = StackedCritics(1, num_classes=1, model_dim=hp.critic_dim, in_channels=shape[0], spectral_norm=False,
                                 init_seed=int(seeds[0])).to(dev)
        self.bank = CriticBank(critics, hp.lr, hp.betas)
        self.opt_g = make_optimizer(self.gen.parameters(), hp.optimizer, lr=hp.lr, betas=hp.betas)
        # Post-processing of the (denoised) privatized records: nothing here protects privacy, so seeded.
        self.gens = {"data": torch.Generator(dev).manual_seed(int(seeds[1])),
                     "latent": torch.Generator(dev).manual_seed(int(seeds[2]))}
        self.labels = torch.zeros((1, hp.batch_size), dtype=torch.long, device=dev)
        self.steps_done = 0

    def _real(self) -> torch.Tensor:
        b = self.hp.batch_size
        idx = torch.randint(0, len(self.records), (b,), generator=self.gens["data"], device=self.records.device)
        return self.records[idx][None]

    def step(self) -> dict[str, float]:
        hp = self.hp
        stats: dict[str, float] = {}
        for _ in range(hp.critic_steps):
            with torch.no_grad():
                fake = self.gen(self.gen.sample_latent(hp.batch_size, self.gens["latent"]))[None]
            stats = critic_step(self.bank, self._real(), self.labels, fake, hp.gp_weight, 0.0, self.gens["data"])
        c = self.bank.critics
        fake = self.gen(self.gen.sample_latent(hp.batch_size, self.gens["latent"]))[None]
        g_loss = -c(fake, self.labels, c.weights(detach=True, power_iteration=False)).mean()
        self.opt_g.zero_grad(set_to_none=True)
        g_loss.backward()
        self.opt_g.step()
        self.steps_done += 1
        stats["g_loss"] = float(g_loss.detach())
        if not all(math.isfinite(v) for v in stats.values()):
            raise DpsynthError(f"{self.ctx.name}: a WGAN-GP loss became non-finite at step {self.steps_done} "
                               f"({stats}); lower hparams.lr")
        return stats

    def check(self) -> None:
        """Nothing deferred: every step checks its losses."""

    def log_row(self, stats: dict[str, float]) -> dict[str, float]:
        return dict(stats)

    def progress(self, stats: dict[str, float]) -> dict[str, float]:
        return {"g_loss": stats["g_loss"]}

    def state_parts(self) -> dict[str, Any]:
        return {"generator": self.gen, "critic": self.bank, "opt_g": self.opt_g}

    def random_streams(self) -> dict[str, torch.Generator]:
        return self.gens

    def extra_state(self) -> dict[str, Any]:
        return {"wavelet": self.params.to_dict(), "arch": self.arch}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        if state.get("wavelet") != self.params.to_dict():  # the tuning is deterministic: a change is a bug
            raise DpsynthError(f"{self.ctx.name}: the checkpoint was trained on images denoised with "
                               f"{state.get('wavelet')}, the tuning now picks {self.params.to_dict()}; "
                               "delete the checkpoint to train again")

    def epsilon(self) -> float:
        return self.noise["epsilon"] if self.noise["epsilon"] is not None else math.inf

    def release(self, steps: int) -> Release:
        ctx = self.ctx
        denoised_path = ctx.out_dir / DENOISED_FILE
        write_npz(denoised_path, x_train=self.denoised_np, y_train=np.zeros(len(self.denoised_np), np.int64),
                  record_shape=np.asarray(self.shape, np.int64))
        report = local_privacy_report(ctx, self.noise, len(ctx.data.x_train))
        report.extra["approximately_private"] = APPROXIMATE
        report.extra["wavelet"] = {**self.params.to_dict(), "threshold": self.params.threshold(noise_std(self.noise)),
                                   "chosen_on": f"{self.hp.tune_records} clean training records (private) paired "
                                                "with their privatized copies"}
        meta = {"num_classes": ctx.data.num_classes, "record_shape": list(self.shape), "output_range": "tanh",
                "sample_batch_size": self.hp.batch_size, "unconditional": True, "record_space": "images in [-1, 1]",
                "wavelet": self.params.to_dict()}
        summary = {"method": ctx.experiment.method, "wavelet": self.params.to_dict(),
                   "approximately_private": APPROXIMATE, "denoised": str(denoised_path),
                   "noise_scale": self.noise["noise_scale"], "epsilon": self.noise["epsilon"],
                   "epsilon_paper_convention": self.noise["epsilon_paper_convention"], "delta": self.noise["delta"],
                   "scale": ctx.scale, "seed": ctx.seed}
        return Release(self.gen.eval(), self.arch, meta, report, summary=summary)

    def close(self) -> None:
        pass


def train(ctx: TrainContext) -> dict[str, Any]:
    """Tune the denoiser on the clean records, denoise the privatized ones, train the WGAN-GP through
    the one loop; releases generator.pt, privacy.json (labelled approximately private), train_log.csv
    and denoised.npz. Writes the grid's scores (errors to CLEAN records) to the private folder only."""
    hp: WaveletWGANHparams = ctx.experiment.hparams  # type: ignore[assignment]
    shape = validate(ctx)
    assert ctx.experiment.local is not None
    noise = local_noise(ctx.experiment.local)
    std = noise_std(noise)
    params, scores = tuned_denoiser(ctx, hp, shape, std)
    ctx.private_path.mkdir(parents=True, exist_ok=True)
    with atomic_open(ctx.private_path / TUNING_FILE) as fh:
        fh.write("wavelet,level,rule,multiplier,mse\n")
        fh.writelines(f"{r['wavelet']},{r['level']},{r['rule']},{r['multiplier']:g},{r['mse']:.6g}\n" for r in scores)
    denoised = denoise(ctx.data.x_train, shape, params, std)
    total = ctx.privacy_plan.steps or hp.max_steps
    if total is None:
        raise ConfigError(f"experiments.{ctx.name}.hparams.max_steps: the {ctx.scale!r} scale sets no step budget, "
                          "so the experiment must")
    stepper = WaveletWGANStepper(ctx, denoised, params, noise, generator_arch(hp.generator, shape), shape, scores)
    # No accountant: local DP spent at the privatize stage; the tuning on clean data is the paper's, labelled.
    return run_training(ctx, stepper, total_steps=int(total), guard=None, sigma=None, epsilon_spent=stepper.epsilon,
                        extra={"method": ctx.experiment.method, "wavelet": params.to_dict(),
                               "approximately_private": APPROXIMATE})
