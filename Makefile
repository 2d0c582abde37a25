# fastslow: run `make help` for the targets.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
SCALE ?= demo
DATA ?= data/synthetic-$(SCALE)

.DEFAULT_GOAL := help
.PHONY: help install submit test lint bench synth stats leaderboard clean

help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	# torch first, pinned: its CPU wheel is local; an unpinned torch would pull GBs of CUDA packages.
	$(PY) -m pip install torch==2.13.0
	$(PY) -m pip install -e '.[dev]'
	touch $@

install: $(VENV)/.installed ## Create .venv and install the toolkit with its dev extras (torch pinned to 2.13.0).

submit: install ## Run the whole pipeline (real data if found, else the synthetic demo world) and print the offline score.
	$(VENV)/bin/fastslow submit

test: install ## Run the test suite.
	$(PY) -m pytest -q -n 2 tests

lint: install ## Lint with ruff.
	$(VENV)/bin/ruff check competition features models tests benchmarks

bench: install ## Speed and memory benchmarks (prints ratios measured side by side).
	$(PY) -m benchmarks.data_layer
	$(PY) -m benchmarks.features
	$(PY) -m benchmarks.models

synth: install ## Generate the synthetic world: make synth SCALE=demo|tiny|full.
	$(VENV)/bin/fastslow data synth --scale $(SCALE) --out $(DATA)

stats: install ## Print statistics of a data root: make stats DATA=path.
	$(VENV)/bin/fastslow data stats $(DATA)

leaderboard: install ## Show the offline leaderboard, best first, and write its plot.
	$(VENV)/bin/fastslow leaderboard

clean: ## Remove caches and generated data (keeps .venv).
	rm -rf .pytest_cache .ruff_cache bench-out data/synthetic-*
