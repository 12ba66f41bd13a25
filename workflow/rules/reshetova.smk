# Reshetova, Chen, Ozgur (ISIT 2024, arXiv:2306.09547), Figs. 1, 6, 7 and 11 (2-D): a named target, not part of `all`.
#   snakemake reshetova --cores 2
# trains, samples and evaluates every run of the params.yaml tables of `kind: manifold` (per manifold:
# Laplace x {entropic, unregularized} 1-W, Gaussian x {entropic, unregularized} 2-W), then renders the
# report with them into results/reshetova/ (tables/<table>.md with the claim checked, figures/<table>.png).
# Kept out of the quick pipeline for time (docs/methods.md, "Reshetova et al.'s 2-D figures"). No DVC stage: dvc.yaml
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


# Reshetova et al. Figs. 5 and 11 on MNIST at the paper's own settings (section 4.5's MLP 2x500, latent U[0,1]^2,
# L = 200, b = 200, all 60,000 training records), which fit a CPU:
#   snakemake reshetova_mnist --cores 2 --config scale=paper_cpu
# trains the W2-vs-noise sweep of w2_noise.mnist (Fig. 5: three runs of three losses x four noise levels, plus each loss at
# twice the steps: the step-count check), every cell of the train_size tables' sweeps on MNIST (Fig. 11) and
# their step_check runs, then renders the report into results/reshetova_mnist/ (tables/<table>.md with the
# claims checked, figures/). docs/reshetova-mnist.md: the time it took and the committed results.
RESHETOVA_MNIST_RUNS = list(dict.fromkeys(
    [*(c for t in PARAMS.tables.values() if t.kind == "train_size" and t.dataset == "mnist"
       for s in t.sweeps for c in PARAMS.cells_of(s)),
     *(x for t in PARAMS.tables.values() if t.kind == "train_size" and t.dataset == "mnist" and t.step_check
       for x in PARAMS.replicates_of(t.step_check))]))


localrules:
    reshetova_mnist,


rule reshetova_mnist:
    input:
        unpack(reshetova_mnist_inputs),
    output:
        tables=directory("results/reshetova_mnist/tables"),
        figures=directory("results/reshetova_mnist/figures"),
    log:
        "logs/reshetova_mnist.log",
    benchmark:
        "benchmarks/jobs/reshetova_mnist.tsv"
    params:
        run_params=RUN_PARAMS,
        fingerprint=fp("report"),
    conda:
        ENV
    shell:
        "dpsynth report --params {params.run_params} --tables {output.tables} --figures {output.figures}"
        " > {log} 2>&1"


# The same figures decided on one GPU -- ten runs per cell, 20,000 steps, the packed trainer
# (methods/entropic_wgan/packed.py) -- are the build target of two tables, reshetova_fig11_mnist_gpu and
# local_privacy_w2_mnist_gpu (target: reshetova_mnist_gpu), built by targets.smk like every paper table:
#   snakemake reshetova_mnist_gpu --cores all --config scale=paper_gpu
# `dpsynth workflow budget reshetova_mnist_gpu --scale paper_gpu` prints its plan and time (docs/reshetova-mnist.md).
