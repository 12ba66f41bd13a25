# Data stage: raw sources (local directories first, then verified downloads) -> data/processed.

# Downloads run on the submitting host: compute nodes are often offline.
localrules:
    prepare_data,


rule prepare_data:
    output:
        npz="data/processed/{dataset}.npz",
        meta="data/processed/{dataset}.json",
        settings=settings_path("prepare_data", "{dataset}"),
    log:
        "logs/data/{dataset}.log",
    benchmark:
        "benchmarks/jobs/prepare_data/{dataset}.tsv"
    params:
        run_params=RUN_PARAMS,
        fingerprint=fp("prepare_data"),
    resources:
        runtime=runtime("prepare_data"),
        mem_mb=mem_mb("prepare_data"),
    conda:
        ENV
    shell:
        "dpsynth --record-settings {output.settings} data prepare {wildcards.dataset}"
        " --params {params.run_params} > {log} 2>&1"
