# Two commands on a fresh machine:  `make run` (set up + quick pipeline)  and  `make test`.
PYTHON ?= python3.11
VENV   := .venv
STAMP  := $(VENV)/.installed
CORES  ?= all

.PHONY: run test env system fid-weights clean-results

run: env
	$(VENV)/bin/snakemake --cores $(CORES) --config scale=quick
	$(VENV)/bin/snakemake --report results/report.html --config scale=quick

test: env
	$(VENV)/bin/pytest -q

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

clean-results:
	rm -rf data/processed data/privatized data/synthetic models private results logs .snakemake benchmarks/jobs
