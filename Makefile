# Two commands on a fresh machine:  `make run` (set up + quick pipeline)  and  `make test`.
PYTHON ?= python3.11
VENV   := .venv
STAMP  := $(VENV)/.installed
CORES  ?= all

.PHONY: run test env system clean-results

run: env
	$(VENV)/bin/snakemake --cores $(CORES) --config scale=quick

test: env
	$(VENV)/bin/pytest -q

env: system $(STAMP)

system:
	@bash scripts/system-packages.sh

$(STAMP): requirements.lock pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -c requirements.lock -e '.[test]'
	touch $(STAMP)

clean-results:
	rm -rf data/processed data/privatized data/synthetic models results logs .snakemake
