# The report: tables (ours beside the papers'), figures, and the `snakemake --report` page.
# Every job also writes its wall-clock, CPU time and peak memory to benchmarks/jobs/<rule>/<wildcards>.tsv
# (not an output; `scripts/stage-times.py` sums them per stage). Resources: workflow/resources.yaml.
#
# The page (`snakemake --report`): each table as HTML with its notes (a CSV would only be a download), one
# category per paper, in the order and with the labels `dpsynth report` wrote into results/tables/page.json
# (dpsynth.report.page); the first page (workflow/report/workflow.rst) includes results/tables/overview.html.
from dpsynth.report.page import figure_category, figure_labels, table_category, table_labels


rule report:
    input:
        metrics=expand("results/runs/{experiment}/metrics.json", experiment=TARGETS),
        train_logs=expand("models/{experiment}/train_log.csv", experiment=TARGETS),
        grids=expand("results/runs/{experiment}/samples.png", experiment=TARGETS),
        real=expand("results/real/{dataset}/metrics.json", dataset=PARAMS.evaluation.real_datasets),
        w2=expand("results/w2_noise/{dataset}.csv", dataset=list(PARAMS.w2_noise)),
    output:
        # every {name}.html but overview.html, which the first page includes
        tables=report(directory("results/tables"), patterns=["{name,(?!overview\\.html$)[^/]+}.html"],
                      caption="../report/tables.rst", category=table_category, labels=table_labels),
        figures=report(directory("results/figures"), patterns=["{name}.png"], caption="../report/figures.rst",
                       category=figure_category, labels=figure_labels),
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
