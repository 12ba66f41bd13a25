# Sampling: synthetic datasets and a labelled sample grid from each released generator.
# Every job also writes its wall-clock, CPU time and peak memory to benchmarks/jobs/<rule>/<wildcards>.tsv
# (not an output; `scripts/stage-times.py` sums them per stage). Resources: workflow/resources.yaml.


rule sample:
    input:
        generator="models/{experiment}/generator.pt",
        privacy="models/{experiment}/privacy.json",
    output:
        sets=directory("data/synthetic/{experiment}"),
        grid=report("results/runs/{experiment}/samples.png", caption="../report/samples.rst",
                    category="Sample grids", labels={"run": "{experiment}"}),
        settings=settings_path("sample", "{experiment}"),
    log:
        "logs/sample/{experiment}.log",
    benchmark:
        "benchmarks/jobs/sample/{experiment}.tsv"
    threads: cpu_threads("sample")
    params:
        run_params=RUN_PARAMS,
        fingerprint=fp("sample"),
    resources:
        runtime=runtime("sample"),
        mem_mb=mem_mb("sample"),
    conda:
        ENV
    shell:
        "dpsynth --record-settings {output.settings} sample {wildcards.experiment}"
        " --params {params.run_params} > {log} 2>&1"
