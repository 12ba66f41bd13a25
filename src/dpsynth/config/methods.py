"""The method registry: one ``MethodSpec`` per training method.

Everything the configuration, the fingerprints, the report and the Snakefile need to know about
a method is stated here once -- its hyperparameter model, whether it is class-conditional,
whether it trains on locally privatized records or from warm-started critics, whether its sweeps
can train in one batched job -- so no other module compares method names. The trainer is named
as ``module:function`` and imported only when a run starts: the configuration layer stays free of
torch (the Snakefile and ``dpsynth config check`` load it), and the layers stay one-way.

Adding a method: its hyperparameter model in ``hparams.py``, one entry in ``METHOD_SPECS``, its
trainer module in ``dpsynth.methods`` (see docs/adding-a-method.md).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dpsynth.config.base import KeyedValueError
from dpsynth.config.hparams import (
    ClassGaussianHparams,
    DPCGANHparams,
    DPMERFHparams,
    DPSinkhornHparams,
    EntropicWGANHparams,
    GSWGANHparams,
    Hparams,
    WaveletWGANHparams,
)
from dpsynth.errors import DpsynthError


@dataclass(frozen=True)
class MethodSpec:
    """What the pipeline needs to know about one training method."""

    name: str
    title: str
    hparams: type[Hparams]
    #: ``module:function`` taking a ``TrainContext`` and returning the train summary.
    trainer: str
    #: A class-conditional generator: its samples carry labels and are scored by classifiers (an
    #: unconditional one is scored by W2 only).
    conditional: bool = True
    #: Trains on locally privatized records (an experiment's ``local:`` block), which the pipeline's
    #: privatize stage makes before training; such a run spends its budget there, not in training.
    takes_local_data: bool = False
    #: The hyperparameters that shape warm-started critics made by ``dpsynth warmstart`` before
    #: training; empty: the method needs no warm start.
    warm_start_keys: tuple[str, ...] = ()
    #: A sweep over it may train its cells in one batched job (``sweeps.<name>.train_together``): the module
    #: whose ``group_by_shape``, ``resume_step`` and ``train_together`` do it ("": it cannot).
    together: str = ""

    @property
    def trains_together(self) -> bool:
        return bool(self.together)
    #: Epsilon conventions its privacy reports add to the privacy table (beyond the RDP ones).
    epsilon_conventions: tuple[str, ...] = ()
    #: Reads its private data once, in one noisy release (``privacy.steps: 1``); its training steps fit a
    #: generator to that release (post-processing, no budget), so a scale's step budget and batch cap do
    #: not apply to it: its steps come from its own hyperparameters at every scale.
    releases_once: bool = False
    #: Trains with a loss matched to its local mechanism's noise (``hparams.loss``: the entropic or the
    #: unregularized p-Wasserstein; Reshetova et al.): a panel of the manifold and train-size figures, and a
    #: column of the wavelet table by its loss.
    noise_matched_loss: bool = False
    #: A step reads the clean records (Reshetova et al.'s wavelet denoiser, tuned on them), so its runs carry
    #: no formal guarantee: its reports say so (``extra.approximately_private``, what every label is read
    #: from once a run exists); the wavelet table gives it its own column.
    approximately_private: bool = False
    #: A trivial private baseline, not a generator a paper proposes (the class-conditional Gaussian released through
    #: one Gaussian mechanism): a methods table decides "every private generator is closer to the data than it" on
    #: each measure it prints (``report.tables.methods``).
    trivial_baseline: bool = False

    @property
    def needs_warm_start(self) -> bool:
        return bool(self.warm_start_keys)

    def load_trainer(self) -> Callable[[Any], dict[str, Any]]:
        module, _, function = self.trainer.partition(":")
        try:
            return getattr(importlib.import_module(module), function)
        except (ModuleNotFoundError, AttributeError) as exc:
            raise DpsynthError(f"method {self.name!r}: its trainer {self.trainer} cannot be loaded ({exc})") from None


METHOD_SPECS: dict[str, MethodSpec] = {spec.name: spec for spec in (
    MethodSpec(name="dp_sinkhorn", title="DP-Sinkhorn", hparams=DPSinkhornHparams,
               trainer="dpsynth.methods.dp_sinkhorn:train", together="dpsynth.methods.dp_sinkhorn.together"),
    MethodSpec(name="gs_wgan", title="GS-WGAN", hparams=GSWGANHparams, trainer="dpsynth.methods.gs_wgan:train",
               warm_start_keys=GSWGANHparams.WARM_START_KEYS,
               epsilon_conventions=("as_published.rdp_classic", "sound.rdp_classic")),
    MethodSpec(name="entropic_wgan", title="Entropic WGAN (local DP)", hparams=EntropicWGANHparams,
               trainer="dpsynth.methods.entropic_wgan:train", conditional=False, takes_local_data=True,
               noise_matched_loss=True, together="dpsynth.methods.entropic_wgan.together"),
    MethodSpec(name="dp_merf", title="DP-MERF", hparams=DPMERFHparams, trainer="dpsynth.methods.dp_merf:train",
               releases_once=True, epsilon_conventions=("analytic_gaussian",)),
    # The trivial central-DP baseline of the GS-WGAN / DP-Sinkhorn Table 1 rows: a class-conditional Gaussian from
    # one Gaussian release of class moments (its one step; fitted in closed form, post-processing).
    MethodSpec(name="class_gaussian", title="class-conditional Gaussian (Gaussian mechanism), baseline",
               hparams=ClassGaussianHparams, trainer="dpsynth.methods.central_baseline:train", releases_once=True,
               epsilon_conventions=("analytic_gaussian",), trivial_baseline=True),
    MethodSpec(name="dp_cgan", title="DP-CGAN (DP-SGD GAN)", hparams=DPCGANHparams,
               trainer="dpsynth.methods.dp_cgan:train"),
    # Reshetova et al. Figs. 2 and 8: wavelet denoising (tuned on the clean images: only approximately
    # private, said in its privacy report) + WGAN-GP on the denoised privatized records.
    MethodSpec(name="wavelet_wgan", title="Wavelet denoising + WGAN-GP (local DP, approximately private)",
               hparams=WaveletWGANHparams, trainer="dpsynth.methods.wavelet_wgan:train", conditional=False,
               takes_local_data=True, approximately_private=True),
)}


def method_spec(name: str) -> MethodSpec:
    """The registry entry of ``name``; an unknown name is one clear error listing the known ones."""
    spec = METHOD_SPECS.get(name)
    if spec is None:
        raise DpsynthError(f"unknown method {name!r} (known: {', '.join(METHOD_SPECS)})")
    return spec


def refuse_foreign_keys(method: str, settings: Any) -> None:
    """Name the method a foreign key belongs to: pydantic's 'unknown key' alone does not say that ``p``
    is a DP-Sinkhorn setting that a GS-WGAN run would not use. (Keys of no method are left to the
    model, which calls them unknown.)"""
    if not isinstance(settings, dict):
        return
    own = METHOD_SPECS[method].hparams.model_fields
    for key in settings:
        if isinstance(key, str) and key not in own:
            owners = [s.name for s in METHOD_SPECS.values() if key in s.hparams.model_fields]
            if owners:
                raise KeyedValueError(key, f"not a {method} setting (it belongs to {' and '.join(owners)}); remove it")
