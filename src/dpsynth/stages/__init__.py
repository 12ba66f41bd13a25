"""The pipeline's stages: a stage is one pipeline job (privatize one experiment, train one run, sample,
evaluate, the W2-vs-noise sweep, the report ...), one module each.

A stage is called by the CLI (``dpsynth <stage> ...``), and by Snakemake and DVC through the CLI; the
CLI only parses arguments and calls one function of its stage's module (``run_train``,
``run_evaluate`` ...). Stage functions take typed arguments (the loaded ``Params``, names, paths,
flags), never an ``argparse.Namespace``; train and warmstart take the parameters file's path
instead of ``Params``, because they check their output folders before reading it (and before any
private record).

Layers are one-way: data -> privacy/ot/nets -> methods -> evaluate -> report -> stages -> cli. A
stage may import methods, evaluate and report, never ``dpsynth.cli``. Like the CLI, the stage modules
import nothing heavy (torch, numpy, pydantic, the data layer) at module level: ``dpsynth --help``
must stay fast, and each module's imports are its DVC stage's code dependencies (the training
stages must not depend on the evaluation or the report code), so this package's ``__init__``
imports nothing.
"""
