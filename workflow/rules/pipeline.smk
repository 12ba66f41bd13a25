# (privatize | warm start) -> train -> sample -> evaluate, one experiment at a time; the real-data
# rows; the W2-vs-noise sweep; the report.
# Every job (here and in data.smk) also writes its wall-clock, CPU time and peak memory to
# benchmarks/jobs/<rule>/<wildcards>.tsv, measured where it ran (a SLURM job too), so the pipeline
# records its own cost; `scripts/stage-times.py` sums them per stage. Nothing depends on them:
# they are not job outputs (`snakemake --summary`) and have no counterpart in dvc.yaml.


rule privatize:
    input:
        experiment_dataset,
    output:
        npz="data/privatized/{experiment}.npz",
        report="data/privatized/{experiment}.json",
    log:
        "logs/privatize/{experiment}.log",
    benchmark:
        "benchmarks/jobs/privatize/{experiment}.tsv"
    params:
        cli=DPSYNTH,
        run_params=RUN_PARAMS,
        fingerprint=fp("privatize"),
    conda:
        ENV
    shell:
        "{params.cli} privatize {wildcards.experiment} --params {params.run_params} > {log} 2>&1"


rule warmstart:
    input:
        experiment_dataset,
    output:
        critics="private/warmstart/{experiment}/critics.pt",
        info="private/warmstart/{experiment}/warmstart.json",
    log:
        "logs/warmstart/{experiment}.log",
    benchmark:
        "benchmarks/jobs/warmstart/{experiment}.tsv"
    params:
        cli=DPSYNTH,
        run_params=RUN_PARAMS,
        fingerprint=fp("warmstart"),
    threads: PARAMS.threads
    resources:
        gpu=1,
        runtime={"smoke": 20, "quick": 60, "paper": 720}[PARAMS.scale],
        mem_mb=lambda wildcards, attempt: {"smoke": 2000, "quick": 6000, "paper": 24000}[PARAMS.scale] * attempt,
    conda:
        ENV
    shell:
        "{params.cli} warmstart {wildcards.experiment} --params {params.run_params} --no-progress > {log} 2>&1"


rule train_sweep:
    # With sweeps.<sweep>.train_together: every cell trained in this one job (the batched sweep,
    # one device), each cell's finished checkpoint left for its own train job to release. Without:
    # a marker per cell, so the DAG has the same shape either way (and as dvc.yaml).
    input:
        sweep_data,
    output:
        directory("private/sweeps/{sweep}"),
    log:
        "logs/train_sweep/{sweep}.log",
    benchmark:
        "benchmarks/jobs/train_sweep/{sweep}.tsv"
    params:
        cli=DPSYNTH,
        run_params=RUN_PARAMS,
        fingerprint=fp("train_sweep"),
    threads: PARAMS.threads
    resources:
        gpu=1,
        runtime={"smoke": 20, "quick": 360, "paper": 1440}[PARAMS.scale],
        mem_mb=lambda wildcards, attempt: {"smoke": 2000, "quick": 6000, "paper": 16000}[PARAMS.scale] * attempt,
    conda:
        ENV
    shell:
        "{params.cli} train-sweep {wildcards.sweep} --params {params.run_params} --no-progress > {log} 2>&1"


rule train:
    input:
        train_data,
    output:
        generator="models/{experiment}/generator.pt",
        privacy="models/{experiment}/privacy.json",
        summary="models/{experiment}/train_summary.json",
        log_csv="models/{experiment}/train_log.csv",
    log:
        "logs/train/{experiment}.log",
    benchmark:
        "benchmarks/jobs/train/{experiment}.tsv"
    params:
        cli=DPSYNTH,
        run_params=RUN_PARAMS,
        fingerprint=fp("train"),
    threads: PARAMS.threads
    resources:
        gpu=1,
        # minutes per job; a run longer than that resumes from its checkpoint on the retry
        runtime={"smoke": 20, "quick": 360, "paper": 1440}[PARAMS.scale],
        mem_mb=lambda wildcards, attempt: {"smoke": 2000, "quick": 6000, "paper": 8000}[PARAMS.scale] * attempt,
    conda:
        ENV
    shell:
        "{params.cli} train {wildcards.experiment} --params {params.run_params} --no-progress > {log} 2>&1"


rule sample:
    input:
        generator="models/{experiment}/generator.pt",
        privacy="models/{experiment}/privacy.json",
    output:
        sets=directory("data/synthetic/{experiment}"),
        grid=report("results/runs/{experiment}/samples.png", caption="../report/samples.rst",
                    category="Sample grids", labels={"run": "{experiment}"}),
    log:
        "logs/sample/{experiment}.log",
    benchmark:
        "benchmarks/jobs/sample/{experiment}.tsv"
    threads: PARAMS.threads
    params:
        cli=DPSYNTH,
        run_params=RUN_PARAMS,
        fingerprint=fp("sample"),
    resources:
        runtime=lambda wildcards, attempt: {"smoke": 10, "quick": 30, "paper": 120}[PARAMS.scale] * attempt,
        mem_mb=lambda wildcards, attempt: {"smoke": 2000, "quick": 4000, "paper": 8000}[PARAMS.scale] * attempt,
    conda:
        ENV
    shell:
        "{params.cli} sample {wildcards.experiment} --params {params.run_params} > {log} 2>&1"


rule evaluate:
    input:
        sets="data/synthetic/{experiment}",
        real=experiment_dataset,
        summary="models/{experiment}/train_summary.json",
    output:
        metrics="results/runs/{experiment}/metrics.json",
    log:
        "logs/evaluate/{experiment}.log",
    benchmark:
        "benchmarks/jobs/evaluate/{experiment}.tsv"
    threads: PARAMS.threads
    params:
        cli=DPSYNTH,
        run_params=RUN_PARAMS,
        fingerprint=fp("evaluate"),
    resources:
        runtime=lambda wildcards, attempt: {"smoke": 20, "quick": 120, "paper": 1440}[PARAMS.scale] * attempt,
        mem_mb=lambda wildcards, attempt: {"smoke": 3000, "quick": 8000, "paper": 16000}[PARAMS.scale] * attempt,
    conda:
        ENV
    shell:
        "{params.cli} evaluate {wildcards.experiment} --params {params.run_params} > {log} 2>&1"


rule evaluate_real:
    input:
        "data/processed/{dataset}.npz",
    output:
        metrics="results/real/{dataset}/metrics.json",
    log:
        "logs/evaluate/real_{dataset}.log",
    benchmark:
        "benchmarks/jobs/evaluate_real/{dataset}.tsv"
    threads: PARAMS.threads
    params:
        cli=DPSYNTH,
        run_params=RUN_PARAMS,
        fingerprint=fp("evaluate_real"),
    resources:
        runtime=lambda wildcards, attempt: {"smoke": 20, "quick": 120, "paper": 1440}[PARAMS.scale] * attempt,
        mem_mb=lambda wildcards, attempt: {"smoke": 3000, "quick": 8000, "paper": 16000}[PARAMS.scale] * attempt,
    conda:
        ENV
    shell:
        "{params.cli} evaluate --real {wildcards.dataset} --params {params.run_params} > {log} 2>&1"


rule w2_noise:
    input:
        "data/processed/{dataset}.npz",
    output:
        csv="results/w2_noise/{dataset}.csv",
        info="results/w2_noise/{dataset}.json",
    log:
        "logs/w2_noise/{dataset}.log",
    benchmark:
        "benchmarks/jobs/w2_noise/{dataset}.tsv"
    threads: PARAMS.threads
    params:
        cli=DPSYNTH,
        run_params=RUN_PARAMS,
        fingerprint=fp("w2_noise"),
    resources:
        runtime=lambda wildcards, attempt: {"smoke": 10, "quick": 60, "paper": 1440}[PARAMS.scale] * attempt,
        mem_mb=lambda wildcards, attempt: {"smoke": 2000, "quick": 6000, "paper": 16000}[PARAMS.scale] * attempt,
    conda:
        ENV
    shell:
        "{params.cli} w2noise {wildcards.dataset} --params {params.run_params} > {log} 2>&1"


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
    log:
        "logs/report.log",
    benchmark:
        "benchmarks/jobs/report.tsv"
    params:
        cli=DPSYNTH,
        run_params=RUN_PARAMS,
        fingerprint=fp("report"),
    conda:
        ENV
    shell:
        "{params.cli} report --params {params.run_params} > {log} 2>&1"
