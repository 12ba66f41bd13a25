"""The evaluate stage: score one experiment's synthetic sets (`dpsynth evaluate EXPERIMENT`), or the
real-data row of a dataset (`dpsynth evaluate --real DATASET`), and write its ``metrics.json``
(``dpsynth.evaluate.record.MetricsRecord``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpsynth.stages.common import DEFAULT_PARAMS, get_experiment, prepare_cpu, resolve_device

if TYPE_CHECKING:
    from dpsynth.config import Params


def run_evaluate(params: Params, experiment: str | None = None, *, real: str | None = None,
                 source: str = DEFAULT_PARAMS, models: str = "models", synthetic: str = "data/synthetic",
                 results: str = "results", private_out: str = "private", device: str = "auto") -> int:
    """Evaluate ``experiment`` (its sets under ``synthetic``, its train summary under ``models``) or,
    with ``real``, that dataset's real-data row; write RESULTS/runs/{experiment}/metrics.json or
    RESULTS/real/{dataset}/metrics.json and print the scores. ``private_out`` holds the cached FID
    statistics of the real test split; ``source`` names the parameters file in the error for an
    unknown experiment. ``device`` (``--device``, as train's: auto is a GPU when there is one) runs the
    MLP/CNN classifiers, Inception (FID, KID, FID-infinity) and GS-WGAN's IS network; logistic
    regression and GS-WGAN's scikit-learn zoo stay on the CPU, where they are fastest."""
    from dpsynth.locations import check_apart

    check_apart(("--private-out", private_out), ("--results", results))  # metrics are released
    # a misspelt experiment fails here, before torch and the metrics are imported
    exp = None if real else get_experiment(params, experiment, source)
    dev = str(resolve_device(device))  # a device this machine lacks fails here, in one line

    from dpsynth.data import load_processed
    from dpsynth.evaluate.metrics import classifier_scores, environment, evaluate_synthetic, real_data_fid
    from dpsynth.evaluate.record import GS_WGAN, REAL_DATA, MetricsRecord
    from dpsynth.io import read_json
    from dpsynth.paths import fid_reference_dir, gswgan_train_file, metrics_file, real_metrics_file, w2_train_file

    prepare_cpu(params)
    ev, preset = params.evaluation, params.preset
    processed = Path(params.data.root) / "processed"
    fid_cache = fid_reference_dir(private_out)
    protocols = params.evaluation_protocols(experiment=experiment, real=real)
    if real:
        data = load_processed(processed / f"{real}.npz")
        train_sets = [(data.x_train, data.y_train)]
        gswgan = _gswgan_settings(params, data, private_out, dev) if GS_WGAN in protocols and data.is_image else None
        # the real row's CNN is the very fit GS-WGAN's classifier IS uses: kept rather than trained twice
        keep = (lambda f: gswgan.is_cache.store(f) if f.kind == "cnn" else None) if gswgan else None
        # (show_scores=False: the real-data row's numbers are in no released file, so not in the job's log either)
        classifiers = classifier_scores(train_sets, data, kinds=ev.classifiers, max_epochs=preset.classifier_max_epochs,
                                        train_subset=preset.classifier_train_subset, on_fitted=keep,
                                        sources=[processed / f"{real}.npz"], test_subset=preset.classifier_test_subset,
                                        device=dev, show_scores=False)
        fid = real_data_fid(data, n_samples=preset.fid_samples, weights=ev.fid_weights, allow_download=ev.fid_download,
                            timeout=ev.fid_download_timeout, cache_dir=fid_cache,
                            n_reference=fid_reference(preset, data), train_fid=gswgan.train_fid if gswgan else None,
                            device=dev)
        extra = None
        if gswgan is not None:
            from dpsynth.evaluate.gswgan_protocol import gswgan_scores

            # the paper's Real row: the zoo trained on real training images, IS of the real test images
            extra = {GS_WGAN: gswgan_scores(train_sets, [data.x_test], data, gswgan, cnn=classifiers.get("cnn"),
                                            fid_train=fid.pop("train_split", None), show_scores=False)}
        record = MetricsRecord(
            experiment=f"real_{real}", dataset=real, method=REAL_DATA, classifiers=classifiers, fid=fid,
            privacy=None, scale=params.scale, preset=preset.model_dump(mode="json"), versions=environment(),
            protocols=extra)
        out = real_metrics_file(results, real)
    else:
        assert exp is not None and experiment is not None
        data = load_processed(processed / f"{exp.dataset}.npz")
        paths = [Path(synthetic) / experiment / f"seed{k}.npz" for k in range(preset.n_synthetic_sets)]
        from dpsynth.config import resolve_run

        train_records = None
        run = None if exp.spec.conditional else resolve_run(params, experiment)
        if run is not None and run.experiment.train_size is not None:
            # A cell of a training-set-size sweep (Reshetova et al. Fig. 11's "train" curve): also the W2 to its
            # own clean training records. Computed on private records without noise, as the paper's analysis
            # does: only the runs that sweep n measure it, and it is written under the PRIVATE root
            # (paths.w2_train_file), never into the released metrics.json.
            idx = run.train_indices(len(data.x_train))
            train_records = data.x_train if idx is None else data.x_train[idx]
        scores = evaluate_synthetic(paths, data, kinds=ev.classifiers, max_epochs=preset.classifier_max_epochs,
                                    train_subset=preset.classifier_train_subset, fid_samples=preset.fid_samples,
                                    test_subset=preset.classifier_test_subset,
                                    fid_weights=ev.fid_weights, fid_download=ev.fid_download,
                                    fid_timeout=ev.fid_download_timeout,
                                    conditional=exp.spec.conditional, fid_cache=fid_cache,
                                    fid_reference=fid_reference(preset, data),
                                    gswgan=_gswgan_settings(params, data, private_out, dev) if GS_WGAN in protocols
                                    else None, device=dev, train_records=train_records)
        w2_train = (scores.get("w2") or {}).pop("train", None)
        if w2_train is not None:
            _write_private(w2_train_file(private_out, experiment), experiment, "w2_train", w2_train,
                           "W2 to its own clean training records")
        gs = (scores.get("protocols") or {}).get(GS_WGAN)
        if gs is not None:
            from dpsynth.evaluate.gswgan_protocol import release_training_split

            # GS-WGAN's IS and training-split FID: statistics of the training records without noise, kept under
            # the private root for every dataset; the report shows them for one data.public declares public
            where = gswgan_train_file(private_out, experiment)
            scores["protocols"][GS_WGAN], kept = release_training_split(gs, dataset=exp.dataset,
                                                                        private_path=str(where))
            _write_private(where, experiment, "gswgan_train", kept, "GS-WGAN's IS and FID against the training split")
        if run is not None and exp.spec.takes_local_data and exp.local is not None:
            from dpsynth.evaluate.baselines import run_baselines
            from dpsynth.paths import privatized_file

            # the trivial private baselines of a run on locally privatized records: fitted to the very records it
            # trained on (its privatize stage's file, never the clean training records) and scored as its
            # generator was just scored (the same set count and size, its seed)
            scores["baselines"] = run_baselines(privatized_file(params.data.root, experiment), data,
                                                n_synthetic=scores["n_synthetic"],
                                                n_sets=scores["n_synthetic_sets"], seed=run.seed)
        summary = Path(models) / experiment / "train_summary.json"
        record = MetricsRecord(experiment=experiment, dataset=exp.dataset, method=exp.method, **scores,
                               train=read_json(summary) if summary.is_file() else None, scale=params.scale,
                               preset=preset.model_dump(mode="json"), versions=environment())
        out = metrics_file(results, experiment)
    record.write(out)
    _say(record, out)
    return 0


def _say(record: Any, out: Path) -> None:
    """The job's log lines: the scores its metrics.json releases, and nothing the release rule keeps on this
    machine (``paths.release_rule``: job logs are not private). A real-data row's numbers are in no released
    file (``results/real`` is never pushed), so its log names the file only; a run's GS-WGAN IS and FID against
    the training split are kept under the private root, and the log names where."""
    from dpsynth.evaluate.record import GS_WGAN
    from dpsynth.paths import OUTSIDE_GUARANTEE

    if record.is_real_data:
        print(f"{record.experiment}: the real-data row is {OUTSIDE_GUARANTEE} (never pushed; its scores are not "
              f"printed: job logs are not private) -> {out}", flush=True)
        return
    for kind, rec in record.classifiers.items():
        print(f"{record.experiment}: {kind} accuracy {_spread(rec)}")
    if record.w2:
        print(f"{record.experiment}: W2 to clean held-out data {_spread(record.w2)}")
    fid = record.fid
    print(f"{record.experiment}: FID " + (f"{fid['mean']:.2f}" if fid["available"] else
                                          f"unavailable ({fid['reason']})"))
    for key, name in (("kid", "KID"), ("fid_inf", "FID-infinity"), ("precision", "precision"), ("recall", "recall")):
        sub = fid.get(key) if fid["available"] else None
        if isinstance(sub, dict):
            print(f"{record.experiment}: {name} " + (f"{sub['mean']:.4g}" if sub.get("available") else
                                                     f"unavailable ({sub.get('reason')})"))
    bases = record.baselines or {}
    if bases.get("available"):
        for name, rec in bases["models"].items():
            print(f"{record.experiment}: {name} (fitted to its privatized records): W2 to clean held-out data "
                  f"{_spread(rec)}")
        print(f"{record.experiment}: trivial private baselines ({bases['privacy']}) fitted in {bases['seconds']} s")
    elif bases:
        print(f"{record.experiment}: no trivial private baselines: {bases['reason']}")
    gs = (record.protocols or {}).get(GS_WGAN)
    if gs is not None:
        train_part = f"IS and FID vs the training split kept under {gs['is'].get('private')} (not printed)"
        print(f"{record.experiment}: GS-WGAN protocol: {train_part}, Avg Acc {gs['accuracy']['avg']['mean']:.3f} over "
              f"{len(gs['accuracy']['models'])} models; " + ", ".join(f"{k} {v} s" for k, v in gs["seconds"].items()))
    print(f"{record.experiment}: scores -> {out} (the report reads them)", flush=True)


def _spread(rec: dict[str, Any]) -> str:
    """A record's mean with its spread over the synthetic sets and their count; one set reads as one value, never
    "+- 0.0000" (issue 64)."""
    n = int(rec.get("n") or len(rec.get("values") or []) or 1)
    return f"{rec['mean']:.4f} (1 set)" if n <= 1 else f"{rec['mean']:.4f} +- {rec['std']:.4f} (std over {n} sets)"


def _write_private(out: Path, experiment: str, key: str, value: dict[str, Any], what: str) -> Path:
    """Write a statistic of the run's training records without noise under the private root, labelled outside
    the guarantee (``paths.release_rule`` keeps it off every remote), so it never enters a released file: the W2 to
    a Fig. 11 cell's own clean training records, GS-WGAN's IS and training-split FID. The report names this
    path instead (or, for GS-WGAN's on a dataset data.public declares public, shows it labelled). The value is not printed: job logs are not private."""
    from dpsynth.io import write_json
    from dpsynth.paths import OUTSIDE_GUARANTEE

    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, {"experiment": experiment, key: value, "privacy": OUTSIDE_GUARANTEE})
    print(f"{experiment}: {what} ({OUTSIDE_GUARANTEE}) -> {out}")
    return out


def _gswgan_settings(params: Params, data: Any, private_out: str, device: str) -> Any:
    """GS-WGAN's protocol at this scale (``GsWganSettings``): its sizes, and the IS network's cache
    under the private root beside the FID reference statistics (both are computed from the real data)."""
    from dpsynth.evaluate.gswgan_protocol import GsWganSettings
    from dpsynth.paths import is_classifier_dir

    preset = params.preset
    return GsWganSettings.from_preset(preset.gs_wgan_eval, data, cache_dir=is_classifier_dir(private_out),
                                      classifier_max_epochs=preset.classifier_max_epochs,
                                      classifier_train_subset=preset.classifier_train_subset, threads=params.threads,
                                      classifier_test_subset=preset.classifier_test_subset, device=device)


def fid_reference(preset: Any, real: Any) -> int:
    """Real test images on FID's reference side: the preset's count, ``all`` of the test split (the
    papers' protocol: 60,000 generated images against the full test set, 19,962 for CelebA), or
    (unset) as many as ``fid_samples``."""
    ref = preset.fid_reference_samples
    n = len(real.x_test) if ref == "all" else preset.fid_samples if ref is None else int(ref)
    return min(n, len(real.x_test))
