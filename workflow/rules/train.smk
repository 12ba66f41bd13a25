# Training: a targeted sweep's shared job (train_sweep), then one job per run; each releases a
# generator with its privacy record.
# Every job also writes its wall-clock, CPU time and peak memory to benchmarks/jobs/<rule>/<wildcards>.tsv
# (not an output; `scripts/stage-times.py` sums them per stage). Resources: workflow/resources.yaml.


rule train_sweep:
    # With sweeps.<sweep>.train_together: every cell trained in this one job (the batched sweep,
    # one device), each cell's finished checkpoint left for its own train job to release, which
    # waits for it. Without: only the marker saying the cells train alone; they do not wait for it
    # (an edit of the base experiment re-runs this job, not cells that set their own values).
    input:
        sweep_data,
    output:
        directory("private/sweeps/{sweep}"),
        settings=settings_path("train_sweep", "{sweep}"),
    log:
        "logs/train_sweep/{sweep}.log",
    benchmark:
        "benchmarks/jobs/train_sweep/{sweep}.tsv"
    params:
        run_params=RUN_PARAMS,
        fingerprint=fp("train_sweep"),
    threads: cpu_threads("train_sweep")
    resources:
        runtime=runtime("train_sweep"),
        mem_mb=mem_mb("train_sweep"),
        gpu=sweep_gpu,
    conda:
        ENV
    shell:
        "dpsynth --record-settings {output.settings} train-sweep {wildcards.sweep} --params {params.run_params}"
        " --no-progress > {log} 2>&1"


rule train:
    input:
        train_data,
    output:
        generator="models/{experiment}/generator.pt",
        privacy="models/{experiment}/privacy.json",
        summary="models/{experiment}/train_summary.json",
        log_csv="models/{experiment}/train_log.csv",
        settings=settings_path("train", "{experiment}"),
    log:
        "logs/train/{experiment}.log",
    benchmark:
        "benchmarks/jobs/train/{experiment}.tsv"
    params:
        run_params=RUN_PARAMS,
        fingerprint=fp("train"),
    threads: cpu_threads("train")
    resources:
        runtime=train_resource("runtime"),
        mem_mb=train_resource("mem_mb"),
        gpu=train_resource("gpu"),
    conda:
        ENV
    shell:
        "dpsynth --record-settings {output.settings} train {wildcards.experiment} --params {params.run_params}"
        " --no-progress > {log} 2>&1"
