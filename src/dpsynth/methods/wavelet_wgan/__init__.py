"""The wavelet-denoising baseline of Reshetova, Chen, Ozgur, "Training generative models from privatized
data via entropic optimal transport" (ISIT 2024, arXiv:2306.09547), Figs. 2 and 8: the locally privatized
MNIST images denoised with PyWavelets, then a WGAN-GP trained on the denoised images.

ONLY APPROXIMATELY PRIVATE, as the paper says: the denoiser's parameters (wavelet basis, level, threshold
rule and threshold) are chosen to minimise the error to the CLEAN training images under the particular
noise instance (``denoise.tune``). That choice is a function of the private records without noise, so the
local epsilon of the privatize stage holds for the privatized records alone, not for what this method
releases. Its privacy report carries the label (``extra.approximately_private``), the privacy ledger
composes it as not private, and the report's Figs. 2/8 table says so.

Modules: ``denoise`` (the denoiser, the grid, the tuning on clean data), ``run`` (the WGAN-GP stepper on
the one training loop, ``train``).
"""

from dpsynth.methods.wavelet_wgan.denoise import WaveletParams, denoise, discrete_wavelets, grid_cells, mse, tune
from dpsynth.methods.wavelet_wgan.run import APPROXIMATE, DENOISED_FILE, TUNING_FILE, WaveletWGANStepper, noise_std, train

__all__ = ["APPROXIMATE", "DENOISED_FILE", "TUNING_FILE", "WaveletParams", "WaveletWGANStepper", "denoise",
           "discrete_wavelets", "grid_cells", "mse", "noise_std", "train", "tune"]
