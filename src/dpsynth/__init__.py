"""dpsynth: differentially private generative models of images, reproducibly."""

__version__ = "0.1.0"
