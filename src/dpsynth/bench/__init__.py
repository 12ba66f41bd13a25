"""Benchmark harnesses: training steps timed against the authors' published code
(``dpsynth bench``; the command line is ``dpsynth.cli.bench``).

Layering: the harness uses methods, ot, nets and privacy, and nothing here imports
``dpsynth.cli``. Its modules import torch where it is used, so the command line can read the
defaults (``settings``) without paying for it.
"""
