# Warm start: the critics a warm-started method (GS-WGAN) trains from, made once per warm start.
# Every job also writes its wall-clock, CPU time and peak memory to benchmarks/jobs/<rule>/<wildcards>.tsv
# (not an output; `scripts/stage-times.py` sums them per stage). Resources: workflow/resources.yaml.


rule warmstart:
    input:
        experiment_dataset,
    output:
        critics="private/warmstart/{experiment}/critics.pt",
        info="private/warmstart/{experiment}/warmstart.json",
        settings=settings_path("warmstart", "{experiment}"),
    log:
        "logs/warmstart/{experiment}.log",
    benchmark:
        "benchmarks/jobs/warmstart/{experiment}.tsv"
    params:
        run_params=RUN_PARAMS,
        fingerprint=fp("warmstart"),
    threads: cpu_threads("warmstart")
    resources:
        runtime=runtime("warmstart"),
        mem_mb=mem_mb("warmstart"),
        gpu=gpu("warmstart"),
    conda:
        ENV
    shell:
        "dpsynth --record-settings {output.settings} warmstart {wildcards.experiment} --params {params.run_params}"
        " --no-progress > {log} 2>&1"
