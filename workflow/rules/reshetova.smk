# Reshetova, Chen, Ozgur (ISIT 2024, arXiv:2306.09547), Figs. 1, 6, 7 and 11 (2-D): a named target, not part of `all`.
#   snakemake reshetova --cores 2
# trains, samples and evaluates every run of the params.yaml tables of `kind: manifold` (per manifold:
# Laplace x {entropic, unregularized} 1-W, Gaussian x {entropic, unregularized} 2-W), then renders the
# report with them into results/reshetova/ (tables/<table>.md with the claim checked, figures/<table>.png).
# Kept out of the quick pipeline for time (README: "Reshetova et al.'s 2-D figures"). No DVC stage: dvc.yaml
# declares the pipeline (`all`); `dpsynth report` renders the same figures from whatever runs exist.

# ... and Fig. 11 on a 2-D manifold (our quick-scale adaptation): every cell of the sweeps over the training-set
# size n of the `kind: train_size` tables on a 2-D dataset (the MNIST one is for the paper scale: pipeline.sweeps).
RESHETOVA_RUNS = list(dict.fromkeys(
    [*(e for t in PARAMS.tables.values() if t.kind == "manifold" for e in t.experiments),
     *(c for t in PARAMS.tables.values() if t.kind == "train_size" and DATASETS[t.dataset].kind == "manifold2d"
       for s in t.sweeps for c in PARAMS.cells_of(s))]))


localrules:
    reshetova,


rule reshetova:
    input:
        metrics=expand("results/runs/{experiment}/metrics.json", experiment=RESHETOVA_RUNS),
        # what the figures draw: the privatized points behind each panel and the learned samples
        privatized=expand("data/privatized/{experiment}.npz", experiment=RESHETOVA_RUNS),
        sets=expand("data/synthetic/{experiment}", experiment=RESHETOVA_RUNS),
    output:
        tables=directory("results/reshetova/tables"),
        figures=directory("results/reshetova/figures"),
    log:
        "logs/reshetova.log",
    benchmark:
        "benchmarks/jobs/reshetova.tsv"
    params:
        run_params=RUN_PARAMS,
        fingerprint=fp("report"),
    conda:
        ENV
    shell:
        "dpsynth report --params {params.run_params} --tables {output.tables} --figures {output.figures}"
        " > {log} 2>&1"
