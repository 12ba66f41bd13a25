"""The settings the DP-Sinkhorn step benchmark runs at: the paper's MNIST hyperparameters, its
generator, and its run's step count. Plain constants, no imports: the command line reads the
defaults when it builds its parser."""

from __future__ import annotations

#: The paper's MNIST settings (the DP-Sinkhorn ICLR submission, App. D; params.yaml dps_mnist).
MNIST = {"batch_size": 50, "p": 0.2, "eps": 0.05, "alpha_c": 15.0, "clip": 0.5, "sigma": 1.1, "lr": 1e-5,
         "weight_decay": 2e-5, "records": 60000, "num_classes": 10, "n_iter": 30, "scaling": 0.5}
#: The paper's MNIST generator (DCGAN, 28x28, 10 classes): ``dp_sinkhorn.plan.generator_arch`` of dps_mnist.
DCGAN_MNIST = {"name": "dcgan", "kwargs": {"latent_dim": 12, "num_classes": 10, "embed_dim": 4, "out_channels": 1,
                                           "image_size": 28, "init": "authors"}}
#: Steps of the paper's MNIST run (the DP-Sinkhorn ICLR submission: ~3.46 M steps at sigma 1.1, eps 10).
PAPER_STEPS = 3_460_000
