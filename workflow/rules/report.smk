# The report: tables (ours beside the papers'), figures, and the `snakemake --report` page.
# Every job also writes its wall-clock, CPU time and peak memory to benchmarks/jobs/<rule>/<wildcards>.tsv
# (not an output; `scripts/stage-times.py` sums them per stage). Resources: workflow/resources.yaml.


rule report:
    input:
        metrics=expand("results/runs/{experiment}/metrics.json", experiment=TARGETS),
        train_logs=expand("models/{experiment}/train_log.csv", experiment=TARGETS),
        grids=expand("results/runs/{experiment}/samples.png", experiment=TARGETS),
        real=expand("results/real/{dataset}/metrics.json", dataset=PARAMS.evaluation.real_datasets),
        w2=expand("results/w2_noise/{dataset}.csv", dataset=list(PARAMS.w2_noise)),
    output:
        tables=report(directory("results/tables"), patterns=["{name}.csv"], caption="../report/tables.rst",
                      category="Tables", labels={"table": "{name}"}),
        figures=report(directory("results/figures"), patterns=["{name}.png"], caption="../report/figures.rst",
                       category="Figures", labels={"figure": "{name}"}),
        settings=settings_path("report"),
    log:
        "logs/report.log",
    benchmark:
        "benchmarks/jobs/report.tsv"
    params:
        run_params=RUN_PARAMS,
        fingerprint=fp("report"),
    conda:
        ENV
    shell:
        "dpsynth --record-settings {output.settings} report --params {params.run_params} > {log} 2>&1"
