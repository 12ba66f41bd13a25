"""Datasets: registry, verified download, readers, and the processed ``.npz`` format."""

from dpsynth.data.dataset import Dataset, load_processed

__all__ = ["Dataset", "load_processed"]
