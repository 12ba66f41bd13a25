"""Evaluation: downstream classifiers trained on synthetic data, and FID (docs/architecture.md, evaluation).

Submodules are imported lazily by callers (``dpsynth.evaluate.classifiers``,
``dpsynth.evaluate.fid``) so that importing one does not pay for the other's imports.
"""
