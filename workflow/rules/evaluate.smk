# Evaluation: each run's metrics, the real-data rows, and the W2-vs-noise sweep.
# Every job also writes its wall-clock, CPU time and peak memory to benchmarks/jobs/<rule>/<wildcards>.tsv
# (not an output; `scripts/stage-times.py` sums them per stage). Resources: workflow/resources.yaml.


rule evaluate:
    input:
        sets="data/synthetic/{experiment}",
        real=experiment_dataset,
        summary="models/{experiment}/train_summary.json",
        # a run on locally privatized records: those records, its trivial private baselines' only data
        privatized=evaluate_privatized,
    output:
        metrics="results/runs/{experiment}/metrics.json",
        headline="results/runs/{experiment}/headline.json",
        settings=settings_path("evaluate", "{experiment}"),
    log:
        "logs/evaluate/{experiment}.log",
    benchmark:
        "benchmarks/jobs/evaluate/{experiment}.tsv"
    threads: cpu_threads("evaluate")
    params:
        run_params=RUN_PARAMS,
        fingerprint=fp("evaluate"),
    resources:
        runtime=runtime("evaluate"),
        mem_mb=mem_mb("evaluate"),
        gpu=gpu("evaluate"),
    conda:
        ENV
    shell:
        "dpsynth --record-settings {output.settings} evaluate {wildcards.experiment}"
        " --params {params.run_params} > {log} 2>&1"


rule evaluate_real:
    # First among the ready jobs: it needs no training, and it writes what every evaluate job of its
    # dataset reuses -- the FID reference statistics and the classifier-IS network (private/). Run
    # late, the runs' evaluate jobs each computed both again (measured: ~7 min of job time at quick).
    priority: 10
    input:
        "data/processed/{dataset}.npz",
    output:
        metrics="results/real/{dataset}/metrics.json",
        headline="results/real/{dataset}/headline.json",
        settings=settings_path("evaluate_real", "{dataset}"),
    log:
        "logs/evaluate/real_{dataset}.log",
    benchmark:
        "benchmarks/jobs/evaluate_real/{dataset}.tsv"
    threads: cpu_threads("evaluate_real")
    params:
        run_params=RUN_PARAMS,
        fingerprint=fp("evaluate_real"),
    resources:
        runtime=runtime("evaluate_real"),
        mem_mb=mem_mb("evaluate_real"),
        gpu=gpu("evaluate_real"),
    conda:
        ENV
    shell:
        "dpsynth --record-settings {output.settings} evaluate --real {wildcards.dataset}"
        " --params {params.run_params} > {log} 2>&1"


rule w2_noise:
    input:
        "data/processed/{dataset}.npz",
    output:
        csv="results/w2_noise/{dataset}.csv",
        info="results/w2_noise/{dataset}.json",
        samples="results/w2_noise/{dataset}_samples.npz",
        settings=settings_path("w2_noise", "{dataset}"),
    log:
        "logs/w2_noise/{dataset}.log",
    benchmark:
        "benchmarks/jobs/w2_noise/{dataset}.tsv"
    # its runs train in w2_noise.<dataset>.workers processes of `threads` each (the stage's pool)
    threads: lambda wildcards: cpu_threads("w2_noise") * PARAMS.w2_noise[wildcards.dataset].workers
    params:
        run_params=RUN_PARAMS,
        fingerprint=fp("w2_noise"),
    resources:
        runtime=runtime("w2_noise"),
        mem_mb=mem_mb("w2_noise"),
    conda:
        ENV
    shell:
        "dpsynth --record-settings {output.settings} w2noise {wildcards.dataset}"
        " --params {params.run_params} > {log} 2>&1"
