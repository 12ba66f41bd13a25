# One build target per paper table, not part of `all`: params.yaml's tables, grouped by their `target`
# (src/dpsynth/config/targets.py says which runs a table needs). `dpsynth workflow targets` lists them.
#   snakemake neurips_table4 --cores 8 --profile slurm --config scale=paper
# trains, samples and evaluates exactly that table's runs (a sweep trained together: its train_sweep job),
# its real-data rows and W2 sweeps, then renders the report with them into results/targets/<target>/
# (tables/<table>.md, .csv, .tex beside every other table of the report; figures/). DVC reaches the same
# stages once `pipeline.tables` lists the target (`dpsynth workflow plan <target>` shows them).

# A target named like a rule defined above would replace it: refuse it, naming the key to change.
for _target in TABLE_TARGETS:
    if _target in {r.name for r in workflow.rules}:
        raise WorkflowError(f"params.yaml tables: the build target {_target!r} has the name of a workflow rule; "
                            f"set another `target:` on its tables ({', '.join(TABLE_TARGETS[_target].tables)})")

for _target in TABLE_TARGETS:

    rule:
        name:
            _target
        input:
            unpack(table_target_inputs(_target)),
        output:
            tables=directory(f"results/targets/{_target}/tables"),
            figures=directory(f"results/targets/{_target}/figures"),
        log:
            f"logs/targets/{_target}.log",
        benchmark:
            f"benchmarks/jobs/targets/{_target}.tsv"
        params:
            run_params=RUN_PARAMS,
            fingerprint=fp("report"),
        localrule: True
        conda:
            ENV
        shell:
            "dpsynth report --params {params.run_params} --tables {output.tables} --figures {output.figures}"
            " > {log} 2>&1"
