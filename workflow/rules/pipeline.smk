# Train -> sample -> evaluate, one experiment at a time; the real-data rows.


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
    params:
        cli=DPSYNTH,
    threads: PARAMS.threads
    resources:
        gpu=1,
    conda:
        ENV
    shell:
        "{params.cli} train {wildcards.experiment} --params params.yaml --no-progress > {log} 2>&1"


rule sample:
    input:
        generator="models/{experiment}/generator.pt",
        privacy="models/{experiment}/privacy.json",
    output:
        sets=directory("data/synthetic/{experiment}"),
        grid="results/{experiment}/samples.png",
    log:
        "logs/sample/{experiment}.log",
    threads: PARAMS.threads
    params:
        cli=DPSYNTH,
    conda:
        ENV
    shell:
        "{params.cli} sample {wildcards.experiment} --params params.yaml > {log} 2>&1"


rule evaluate:
    input:
        sets="data/synthetic/{experiment}",
        real=lambda w: f"data/processed/{EXPERIMENTS[w.experiment].dataset}.npz",
        summary="models/{experiment}/train_summary.json",
    output:
        metrics="results/{experiment}/metrics.json",
    log:
        "logs/evaluate/{experiment}.log",
    threads: PARAMS.threads
    params:
        cli=DPSYNTH,
    conda:
        ENV
    shell:
        "{params.cli} evaluate {wildcards.experiment} --params params.yaml > {log} 2>&1"


rule evaluate_real:
    input:
        "data/processed/{dataset}.npz",
    output:
        metrics="results/real_{dataset}/metrics.json",
    log:
        "logs/evaluate/real_{dataset}.log",
    threads: PARAMS.threads
    params:
        cli=DPSYNTH,
    conda:
        ENV
    shell:
        "{params.cli} evaluate --real {wildcards.dataset} --params params.yaml > {log} 2>&1"
