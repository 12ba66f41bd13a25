"""DP-Sinkhorn (the DP-Sinkhorn ICLR submission; DP-Sinkhorn (NeurIPS 2021, arXiv:2111.01177)): a conditional generator trained on the semi-debiased
Sinkhorn loss, private through the image-gradient barrier.

One module per concern, layered one way (plan -> batch -> step -> run; sweep -> together):

- ``plan``     what a run is before any step: data checks, generator, optimizer, sigma and steps;
- ``batch``    which private records a step sees (Poisson sample, or a fixed partition);
- ``step``     THE step (:class:`FastStep`; the adversarial variant is its subclass);
- ``run``      one run: budget guard, steps, logs, checkpoints, release;
- ``sweep``    K runs stepped in lock-step on one device (:class:`BatchedSweep`), same step code;
- ``together`` the pipeline's train-sweep job: a sweep's cells trained as one ``BatchedSweep``.
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
