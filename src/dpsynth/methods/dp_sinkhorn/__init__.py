"""DP-Sinkhorn (the DP-Sinkhorn ICLR submission; DP-Sinkhorn (NeurIPS 2021, arXiv:2111.01177)): a conditional generator trained on the semi-debiased
Sinkhorn loss, private through the image-gradient barrier.

One module per concern, layered one way (plan -> batch -> forward -> step -> run; sweep -> together):

- ``plan``        what a run is before any step: data checks, generator, optimizer, sigma and steps;
- ``batch``       which private records a step sees (Poisson sample, or a fixed partition);
- ``forward``     the generator forward, of one member or of K stacked under vmap;
- ``step``        THE step, with a member axis (:class:`PackedStep`; a run is its K = 1, :class:`FastStep`);
- ``adversarial`` the adversarial variant, a FastStep subclass;
- ``run``         one run: budget guard, steps, logs, checkpoints, release (each member's checkpoint state);
- ``sweep``       K runs packed into the one step from a sweep's settings (:class:`BatchedSweep`);
- ``together``    the pipeline's train-sweep job: a sweep's cells as one packed step, through the one loop.
"""

from dpsynth.methods.dp_sinkhorn.plan import (
    DEFAULT_ITERS,
    LOG_EVERY,
    LOG_FIELDS,
    generator_arch,
    generator_optimizer,
    make_partitions,
    privacy_schedule,
    records_to_float,
    validate_data,
)
from dpsynth.methods.dp_sinkhorn.run import train

__all__ = [
    "DEFAULT_ITERS",
    "LOG_EVERY",
    "LOG_FIELDS",
    "generator_arch",
    "generator_optimizer",
    "make_partitions",
    "privacy_schedule",
    "records_to_float",
    "train",
    "validate_data",
]
