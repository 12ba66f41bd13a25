"""Where privacy-relevant randomness comes from: OS entropy by default, a seed only on request.

The guarantee of a Gaussian or Laplace mechanism holds only if the adversary cannot predict
the noise. A noise stream seeded from a configured seed (which is written in params.yaml, in
the repository, in logs) can be regenerated and subtracted: an audit recovered every locally
privatized record exactly that way. So every draw that protects privacy -- sanitizer noise,
Poisson sampling, the shard/critic choice, local-mechanism noise -- comes from a generator
seeded with fresh OS entropy (``secrets``) per run. Exact resume still works: the generators'
states live in the run's private checkpoint, which is never released.

``reproducible`` mode (``privacy_noise: reproducible`` in params.yaml; tests use it) derives those
seeds from the configured seed so runs are bit-identical; every report produced that way says
"reproducible noise - not private" and the tables carry that label.

Known limit, stated rather than hidden: the streams are torch's / numpy's ordinary PRNGs seeded
with 63 / 128 bits of OS entropy (as Opacus does without ``secure_mode``), not a CSPRNG, and the
floating-point sampling is not hardened against Mironov's (2012) least-significant-bit attack.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from dpsynth.errors import PrivacyError

NoiseMode = Literal["secret", "reproducible"]
NOISE_MODES: tuple[str, ...] = ("secret", "reproducible")
NOT_PRIVATE_LABEL = "reproducible noise - not private"
NO_NOISE_LABEL = "non-private run - no privacy noise"


@dataclass(frozen=True)
class NoiseSource:
    """Hands out the generators for privacy-relevant draws of one run.

    ``seed`` is used only in reproducible mode and is never part of :meth:`describe` (the
    description goes into released reports)."""

    mode: NoiseMode = "secret"
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.mode not in NOISE_MODES:
            raise PrivacyError(f"privacy_noise must be one of {NOISE_MODES}, got {self.mode!r}")
        if self.mode == "reproducible" and self.seed is None:
            raise PrivacyError("reproducible privacy noise needs a seed")

    @property
    def private(self) -> bool:
        return self.mode == "secret"

    def torch_generator(self, device: torch.device | str, stream: int) -> torch.Generator:
        """A generator for one named stream (e.g. 2 = sampling, 3 = noise) of this run."""
        gen = torch.Generator(device=device)
        if self.mode == "secret":
            return gen.manual_seed(secrets.randbits(63))
        assert self.seed is not None
        return gen.manual_seed(int(self.seed) * 1000 + int(stream))

    def numpy_rng(self, stream: int) -> np.random.Generator:
        if self.mode == "secret":
            return np.random.default_rng(secrets.randbits(128))
        assert self.seed is not None
        return np.random.default_rng([int(self.seed), int(stream)])

    def describe(self, noised: bool = True) -> dict[str, Any]:
        """What a privacy report says about the noise (no seed, ever). ``noised`` False: the run drew no
        privacy noise (a non-private run), so its report must not say ``private: true`` whatever the mode."""
        if not noised:
            return {"mode": self.mode, "private": False, "label": NO_NOISE_LABEL,
                    "source": "no privacy noise was drawn: the run gives no differential-privacy guarantee"}
        if self.mode == "secret":
            return {"mode": "secret", "private": True,
                    "source": "fresh OS entropy per run (python secrets); never written to a released file"}
        return {"mode": "reproducible", "private": False, "label": NOT_PRIVATE_LABEL,
                "source": "derived from the configured seed: anyone with params.yaml can replay the noise"}


def is_reproducible(report: dict[str, Any] | None) -> bool:
    """True when a (released) privacy report says its noise was replayable."""
    noise = (report or {}).get("noise")
    return isinstance(noise, dict) and noise.get("mode") == "reproducible"


#: What every place showing the epsilon of a run whose report says ``extra.approximately_private`` adds
#: (Reshetova et al.'s wavelet baseline: a denoiser tuned on the clean images).
APPROXIMATE_LABEL = "only approximately private - not private"


def privacy_label(report: dict[str, Any] | None) -> str | None:
    """The label a (released) report's epsilon must carry wherever it is shown, read from the report itself
    (never from a method name): replayable noise, or only approximately private; None for a private run."""
    if is_reproducible(report):
        return NOT_PRIVATE_LABEL
    if (report or {}).get("extra", {}).get("approximately_private"):
        return APPROXIMATE_LABEL
    return None
