# Local DP: each record privatized once, before training (local-DP experiments only).
# Every job also writes its wall-clock, CPU time and peak memory to benchmarks/jobs/<rule>/<wildcards>.tsv
# (not an output; `scripts/stage-times.py` sums them per stage). Resources: workflow/resources.yaml.


rule privatize:
    input:
        experiment_dataset,
    output:
        npz="data/privatized/{experiment}.npz",
        report="data/privatized/{experiment}.json",
        settings=settings_path("privatize", "{experiment}"),
    log:
        "logs/privatize/{experiment}.log",
    benchmark:
        "benchmarks/jobs/privatize/{experiment}.tsv"
    params:
        run_params=RUN_PARAMS,
        fingerprint=fp("privatize"),
    # the torch threads the stage runs (it pins them like every compute stage), not the default 1
    threads: cpu_threads("privatize")
    conda:
        ENV
    shell:
        "dpsynth --record-settings {output.settings} privatize {wildcards.experiment}"
        " --params {params.run_params} > {log} 2>&1"
