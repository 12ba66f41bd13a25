"""The pipeline's declarations for DVC, derived from params.yaml and the code (``dpsynth workflow``).

Snakemake reads params.yaml itself (``workflow/rules/*.smk``); DVC cannot compute, so its
``dvc.yaml`` is generated here: which experiments, warm starts and privatized datasets have stages
follows from ``pipeline:`` through the method registry, and each stage's code dependencies are
the files its CLI module imports (``code_deps``); what each job reads from params.yaml reaches it
as a file (``settings``); ``plan`` says which stages ``dvc repro`` will run before it runs.
tests/test_workflow_sync.py holds the two DAGs to the same jobs.
"""
