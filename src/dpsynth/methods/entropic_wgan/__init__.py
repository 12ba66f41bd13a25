"""Entropic W_p GAN trained on locally privatized records (Reshetova et al. (arXiv:2306.09547)).

The records were noised ONCE, before training, by the ``privatize`` stage (Laplace or
Gaussian mechanism), so training is post-processing: no accountant, and the generator's
privacy report is a copy of the privatization's.

Why the entropic loss is NOT debiased: with cost ``||x - y||_p^p`` and temperature
``lambda = p s^p`` matched to the noise density ``exp(-||n||_p^p / (p s^p))``, the entropic
OT between the generator and the NOISY data is minimised by the CLEAN distribution
(Theorem 1): the blur of the entropic plan is exactly the blur the mechanism added. The
debiased Sinkhorn divergence subtracts that blur back out and (like unregularised W_p)
learns the noisy distribution. Both are offered as the paper's comparisons:

- ``entropic``: Algorithm 1 -- the plan of ``W_{p, lambda}`` between the generated and the
  privatized minibatch from a FIXED number of Sinkhorn iterations, treated as a constant;
  the generator descends ``<plan, C(G(z), y)>``.
- ``exact``: unregularised ``W_p^p`` on the minibatch (POT's ``ot.emd`` plan, constant).
- ``sinkhorn_divergence``: the debiased ``S_lambda`` (same cost and temperature), envelope
  gradient, without the data-data term (it has no generator gradient).

Record space (shared with the privatize stage and the W2 evaluation): images are uint8
``(N, C, H, W)`` mapped to ``[-1, 1]`` and flattened to ``C*H*W`` floats -- the scale of the
paper (§4.3: "each pixel lies in [-1, 1]", max l2 norm 28 on MNIST, so its l2 radius 20 and
l1 radius 140 are meaningful clips); 2-D points are used as they are. Image generators end
in tanh (the same range); with the DCT option the records are DCT coefficients and the
generator's output goes through the same orthonormal DCT before the loss.

Modules: ``loss`` (record space, matched loss spec, the three losses), ``fit`` (generator, trainer,
``fit``; the reference trainer of one run), ``packed`` (the fast trainer: K MLP runs in one batched step, each
its own weights, Adam moments, draws, records and temperature), ``run`` (the stepper on the one training loop,
``train``).
"""

from dpsynth.methods.entropic_wgan.fit import EWGANTrainer, fit, generator_arch, load_released, sample_records
from dpsynth.methods.entropic_wgan.loss import (
    DEFAULT_SINKHORN_ITERS,
    DENSE_MAX_ENTRIES,
    EXACT_MAX_ENTRIES,
    LOSSES,
    LossSpec,
    TorchDCT,
    ewgan_loss,
    geomloss_schedule,
    local_noise,
    loss_spec_for,
    to_records,
)
from dpsynth.methods.entropic_wgan.run import EWGANStepper, train

__all__ = [
    "DEFAULT_SINKHORN_ITERS", "DENSE_MAX_ENTRIES", "EXACT_MAX_ENTRIES", "LOSSES", "EWGANStepper",
    "EWGANTrainer", "LossSpec", "TorchDCT", "ewgan_loss", "fit", "generator_arch", "geomloss_schedule",
    "load_released", "local_noise", "loss_spec_for", "sample_records", "to_records", "train",
]
