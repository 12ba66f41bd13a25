"""`dpsynth evaluate EXPERIMENT` (synthetic data) or `dpsynth evaluate --real DATASET` (the real-data row)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from dpsynth.cli.common import add_params_arg, apply_threads, get_experiment, params_from_args, params_path
from dpsynth.errors import DpsynthError


def _evaluate(args: argparse.Namespace) -> int:
    params = params_from_args(args)
    # a misspelt experiment fails here, before torch and the metrics are imported
    exp = None if args.real else get_experiment(params, args.experiment, params_path(args))

    from dpsynth.data import load_processed
    from dpsynth.evaluate.metrics import classifier_scores, environment, evaluate_synthetic, real_data_fid
    from dpsynth.io import read_json, write_json
    from dpsynth.paths import fid_reference_dir, metrics_file, real_metrics_file

    apply_threads(params)
    ev, preset = params.evaluation, params.preset
    processed = Path(params.data.root) / "processed"
    fid_cache = fid_reference_dir(args.private_out)
    if args.real:
        real = load_processed(processed / f"{args.real}.npz")
        train_sets = [(real.x_train, real.y_train)]
        metrics = {"experiment": f"real_{args.real}", "dataset": args.real, "method": "real data",
                   "classifiers": classifier_scores(train_sets, real, kinds=ev.classifiers,
                                                    max_epochs=preset.classifier_max_epochs,
                                                    train_subset=preset.classifier_train_subset),
                   "fid": real_data_fid(real, n_samples=preset.fid_samples, weights=ev.fid_weights,
                                        allow_download=ev.fid_download, timeout=ev.fid_download_timeout,
                                        cache_dir=fid_cache, n_reference=fid_reference(preset, real)),
                   "privacy": None}
        out = real_metrics_file(args.results, args.real)
    else:
        assert exp is not None
        real = load_processed(processed / f"{exp.dataset}.npz")
        paths = [Path(args.synthetic) / args.experiment / f"seed{k}.npz" for k in range(preset.n_synthetic_sets)]
        metrics = {"experiment": args.experiment, "dataset": exp.dataset, "method": exp.method,
                   **evaluate_synthetic(paths, real, kinds=ev.classifiers, max_epochs=preset.classifier_max_epochs,
                                        train_subset=preset.classifier_train_subset, fid_samples=preset.fid_samples,
                                        fid_weights=ev.fid_weights, fid_download=ev.fid_download,
                                        fid_timeout=ev.fid_download_timeout,
                                        conditional=exp.spec.conditional, fid_cache=fid_cache,
                                        fid_reference=fid_reference(preset, real))}
        summary = Path(args.models) / args.experiment / "train_summary.json"
        metrics["train"] = read_json(summary) if summary.is_file() else None
        out = metrics_file(args.results, args.experiment)
    metrics.update({"scale": params.scale, "preset": preset.model_dump(mode="json"), "versions": environment()})
    write_json(out, metrics)
    for kind, rec in metrics["classifiers"].items():
        print(f"{metrics['experiment']}: {kind} accuracy {rec['mean']:.4f} +- {rec['std']:.4f}")
    if metrics.get("w2"):
        print(f"{metrics['experiment']}: W2 to clean data {metrics['w2']['mean']:.4f} +- {metrics['w2']['std']:.4f}")
    if "fid" in metrics:
        fid = metrics["fid"]
        print(f"{metrics['experiment']}: FID " + (f"{fid['mean']:.2f}" if fid["available"] else
                                                  f"unavailable ({fid['reason']})"))
    return 0


def fid_reference(preset: Any, real: Any) -> int:
    """Real test images on FID's reference side: the preset's count, ``all`` of the test split (the
    papers' protocol: 60,000 generated images against the full test set, 19,962 for CelebA), or
    (unset) as many as ``fid_samples``."""
    ref = preset.fid_reference_samples
    n = len(real.x_test) if ref == "all" else preset.fid_samples if ref is None else int(ref)
    return min(n, len(real.x_test))


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evaluate", help="classifiers + FID on synthetic data (or the real-data row)")
    p.add_argument("experiment", nargs="?")
    p.add_argument("--real", metavar="DATASET", help="evaluate the classifiers trained on the real training split")
    add_params_arg(p)
    p.add_argument("--models", default="models")
    p.add_argument("--synthetic", default="data/synthetic")
    p.add_argument("--results", default="results")
    p.add_argument("--private-out", default="private", metavar="DIR",
                   help="private root: the cached FID statistics of the real test split (default: private)")

    def dispatch(args: argparse.Namespace) -> int:
        if bool(args.real) == bool(args.experiment):
            raise DpsynthError("give exactly one of EXPERIMENT or --real DATASET")
        return _evaluate(args)

    p.set_defaults(func=dispatch)
