"""params.yaml as validated models, by concern:

- ``base``        strict models, names, error formatting;
- ``hparams``     each method's own hyperparameters;
- ``methods``     the method registry (``METHOD_SPECS``): what the pipeline knows about each method;
- ``experiment``  an experiment, its privacy target and local mechanism; sweeps and their cells;
- ``scales``      the smoke / quick / paper presets;
- ``tables``      the report's tables;
- ``targets``     the build targets, one per paper table (its runs, sweeps, real-data rows);
- ``params``      the whole file, its cross-references and derived views;
- ``loader``      YAML reading (duplicate keys refused) and ``load_params``;
- ``run``         one run resolved at a scale (``resolve_run``: privacy plan, seed, data, warm start).

Models forbid unknown keys, so a typo such as ``epsilom`` -- or a key of another method -- is an
error with its key path, not a silently ignored setting.
"""

from dpsynth.config.base import Name, OptimizerName, ScaleName, Strict, format_validation
from dpsynth.config.experiment import (
    SWEEP_KEYS,
    Experiment,
    LocalMechanism,
    PrivacyTarget,
    Sweep,
    cell_suffix,
    expand_sweep,
    sweep_cell_name,
)
from dpsynth.config.hparams import ClassGaussianHparams, DPCGANHparams, DPMERFHparams, DPSinkhornHparams, EntropicWGANHparams, GSWGANHparams, Hparams
from dpsynth.config.loader import (
    DuplicateKeyError,
    UniqueKeyLoader,
    check_yaml_file,
    load_params,
    load_yaml,
    parse_params,
)
from dpsynth.config.methods import METHOD_SPECS, MethodSpec, method_spec
from dpsynth.config.params import DataSettings, EvaluationSettings, Params, Pipeline, Target, W2NoiseSweep
from dpsynth.config.run import PrivacyPlan, RunSpec, apply_preset, resolve_privacy, resolve_run
from dpsynth.config.scales import ScalePreset
from dpsynth.config.tables import Table, TableRow
from dpsynth.config.targets import TableTarget, table_targets

__all__ = [
    "METHOD_SPECS", "SWEEP_KEYS", "ClassGaussianHparams", "DPCGANHparams", "DPMERFHparams", "DPSinkhornHparams", "DataSettings", "DuplicateKeyError", "EntropicWGANHparams",
    "EvaluationSettings", "Experiment", "GSWGANHparams", "Hparams", "LocalMechanism", "MethodSpec", "Name",
    "OptimizerName", "Params", "Pipeline", "PrivacyPlan", "PrivacyTarget", "RunSpec", "ScaleName", "ScalePreset", "Strict",
    "Sweep", "Table", "TableRow", "TableTarget", "Target", "UniqueKeyLoader", "W2NoiseSweep", "apply_preset", "cell_suffix",
    "check_yaml_file", "expand_sweep", "format_validation", "load_params", "load_yaml", "method_spec",
    "parse_params", "resolve_privacy", "resolve_run", "sweep_cell_name", "table_targets",
]
