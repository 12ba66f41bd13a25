"""The local-DP mechanisms (Reshetova et al., arXiv:2306.09547): what the config, the privatize stage,
the entropic WGAN's loss and ``verify`` need of each -- its config rules, its projection, the cost
it matches, how it privatizes, the epsilon its report should list. The noise itself is
``privacy.local``'s, imported when records are privatized (the config reads these classes on every
params load).
"""

from __future__ import annotations

import math

from typing import TYPE_CHECKING, Any, ClassVar

from dpsynth.errors import PrivacyError
from dpsynth.privacy.mechanism_base import _REGISTRY, LOCAL, Mechanism, register, report_number

if TYPE_CHECKING:
    import numpy as np

    from dpsynth.privacy.local import LocalReport


class LocalNoise(Mechanism):
    """Local DP (Reshetova et al., arXiv:2306.09547): each record projected onto a ball of radius R, then
    noised once; epsilon with the sound sensitivity 2R, and the paper's R beside it."""

    relation = LOCAL
    #: the ``local: mechanism:`` value of params.yaml, and its name for people
    config_name: ClassVar[str]
    title: ClassVar[str]
    needs_delta: ClassVar[bool]
    allows_dct: ClassVar[bool]
    #: the ball each record is projected onto
    projection_name: ClassVar[str]
    #: p of the cost ``||x - y||_p^p`` matched to the noise density ``exp(-||x||_p^p / (p s^p))``
    matched_p: ClassVar[int]

    def config_problem(self, delta: float | None, dct: bool) -> str | None:
        """The one-line reason a ``local:`` section is inconsistent with this mechanism, or None."""
        if self.needs_delta and delta is None:
            return f"the {self.title} mechanism needs delta in (0, 0.5)"
        if not self.needs_delta and delta is not None:
            return f"the {self.title} mechanism is pure epsilon-DP: remove delta"
        if dct and not self.allows_dct:
            owners = " or ".join(m.title for m in _REGISTRY.values() if isinstance(m, LocalNoise) and m.allows_dct)
            return f"the DCT option belongs to the {owners} mechanism"
        return None

    def privatize(self, x: np.ndarray, *, radius: float, epsilon: float, delta: float | None,
                  rng: int | np.random.Generator, dct_image_shape: tuple[int, ...] | None = None,
                  dct_quantile: float | None = 0.8) -> tuple[np.ndarray, LocalReport]:
        """Project and noise every record (``privacy.local``); the report says what was done."""
        raise NotImplementedError

    def epsilons(self, radius: float, scale: float, delta: float) -> dict[str, float]:
        """A report's two epsilons for noise ``scale`` on a ball of radius R: ``sound`` (sensitivity 2R,
        the guarantee) and ``paper_convention`` (sensitivity R, what the paper's convention claims)."""
        raise NotImplementedError

    def coordinate_std(self, scale: float) -> float:
        """The standard deviation of the noise on one coordinate for the report's ``noise_scale`` (public:
        it follows from epsilon, delta and R): what a denoiser tuned to the noise level reads."""
        raise NotImplementedError

    def recompute(self, report: dict[str, Any], where: str, delta: float) -> dict[str, float]:
        loc = (report.get("extra") or {}).get("local") or {}
        return self.epsilons(report_number(loc, "radius", where), report_number(loc, "noise_scale", where),
                                       delta)


@register
class LocalLaplace(LocalNoise):
    """epsilon-LDP: (optional DCT) -> l1-ball projection -> Laplace noise of scale 2R / epsilon."""

    name, config_name, title = "local_laplace", "laplace", "Laplace"
    needs_delta, allows_dct, projection_name, matched_p = False, True, "l1 ball", 1

    def privatize(self, x: np.ndarray, *, radius: float, epsilon: float, delta: float | None,
                  rng: int | np.random.Generator, dct_image_shape: tuple[int, ...] | None = None,
                  dct_quantile: float | None = 0.8) -> tuple[np.ndarray, LocalReport]:
        from dpsynth.privacy.local import laplace_mechanism

        return laplace_mechanism(x, radius, epsilon, rng, dct_image_shape=dct_image_shape, dct_quantile=dct_quantile)

    def epsilons(self, radius: float, scale: float, delta: float) -> dict[str, float]:
        return {"sound": 2.0 * radius / scale, "paper_convention": radius / scale}

    def coordinate_std(self, scale: float) -> float:
        return scale * math.sqrt(2.0)  # Laplace of scale b: variance 2 b^2


@register
class LocalGaussian(LocalNoise):
    """(epsilon, delta)-LDP: l2-ball projection -> N(0, s^2), s from the paper's equation (5) with 2R."""

    name, config_name, title = "local_gaussian", "gaussian", "Gaussian"
    needs_delta, allows_dct, projection_name, matched_p = True, False, "l2 ball", 2

    def privatize(self, x: np.ndarray, *, radius: float, epsilon: float, delta: float | None,
                  rng: int | np.random.Generator, dct_image_shape: tuple[int, ...] | None = None,
                  dct_quantile: float | None = 0.8) -> tuple[np.ndarray, LocalReport]:
        from dpsynth.privacy.local import gaussian_mechanism

        if delta is None or dct_image_shape is not None:
            raise PrivacyError(self.config_problem(delta, dct_image_shape is not None))
        return gaussian_mechanism(x, radius, epsilon, delta, rng)

    def coordinate_std(self, scale: float) -> float:
        return scale  # N(0, s^2)

    def epsilons(self, radius: float, scale: float, delta: float) -> dict[str, float]:
        from dpsynth.privacy.local import gaussian_epsilon_eq5

        return {"sound": gaussian_epsilon_eq5(scale, delta, 2.0 * radius),
                "paper_convention": gaussian_epsilon_eq5(scale, delta, radius)}
