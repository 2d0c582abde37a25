# fastslow: run `make help` for the targets.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
SCALE ?= demo
DATA ?= data/synthetic-$(SCALE)

.DEFAULT_GOAL := help
.PHONY: help install submit test lint bench bench-scale bench-speed bench-real synth stats leaderboard clean wheel kaggle-submit kaggle-notebook kaggle-dataset

help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# The toolkit and what it imports: all `make submit` needs.
$(VENV)/.installed-run: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	# torch first, pinned: its CPU wheel is local; an unpinned torch would pull GBs of CUDA packages.
	$(PY) -m pip install torch==2.13.0
	$(PY) -m pip install -e .
	touch $@

# With the dev extras (tests, lint, notebook execution) on top.
$(VENV)/.installed: $(VENV)/.installed-run
	$(PY) -m pip install -e '.[dev]'
	touch $@

install: $(VENV)/.installed ## Create .venv and install the toolkit with its dev extras (torch pinned to 2.13.0).

submit: $(VENV)/.installed-run ## Run the whole pipeline (real data if found, else the synthetic demo world) and print the offline score.
	$(VENV)/bin/fastslow submit

# Bytecode is written even where the environment says not to (PYTHONDONTWRITEBYTECODE): the suite starts the
# toolkit in hundreds of processes, and each would compile its modules again. Each test file runs on one worker
# (--dist loadfile), so that a file's shared fixtures (worlds, fitted models) are built once, not once per worker.
test: install ## Run the test suite.
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -n 2 --dist loadfile tests

lint: install ## Lint with ruff, and check the import layers (import-linter's contracts in pyproject.toml).
	$(VENV)/bin/ruff check fastslow competition features models tests benchmarks examples
	$(VENV)/bin/lint-imports --no-cache

bench: install ## Speed and memory benchmarks (prints ratios measured side by side).
	$(PY) -m benchmarks.data_layer
	$(PY) -m benchmarks.features
	$(PY) -m benchmarks.models
	$(PY) -m benchmarks.gnn --threads 1
	$(PY) -m benchmarks.distributed

bench-scale: install ## Every stage measured on a full-scale world part, projected for the real data's counts.
	$(PY) -m benchmarks.scale

bench-speed: install ## The default GNN against the defaults it replaced, side by side: epoch seconds, prediction speed.
	$(PY) -m benchmarks.speed

bench-real: install ## Models ranking real TPU kernels' and a real module's measured configs (the shipped records).
	$(PY) -m benchmarks.real_records

synth: install ## Generate the synthetic world: make synth SCALE=demo|tiny|full.
	$(VENV)/bin/fastslow data synth --scale $(SCALE) --out $(DATA)

stats: install ## Print statistics of a data root: make stats DATA=path.
	$(VENV)/bin/fastslow data stats $(DATA)

leaderboard: install ## Show the offline leaderboard, best first, and write its plot.
	$(VENV)/bin/fastslow leaderboard

clean: ## Remove caches and generated data (keeps .venv).
	rm -rf .pytest_cache .ruff_cache bench-out data/synthetic-*

# ---- Kaggle ----------------------------------------------------------------------------------------------------
FILE ?= submissions/submission.csv
MSG ?= fastslow $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
KAGGLE := $(VENV)/bin/kaggle
# The account: $KAGGLE_USERNAME, else the username in kaggle.json (read by fastslow.kaggle.kaggle_username).
KAGGLE_USER = $(or $(KAGGLE_USERNAME),$(shell $(PY) -c 'from fastslow.kaggle import kaggle_username; print(kaggle_username() or "")' 2>/dev/null))
FILL_USER = sed 's/YOUR_KAGGLE_USERNAME/$(KAGGLE_USER)/g'
NEED_USER = @test -n "$(KAGGLE_USER)" || { echo "error: no Kaggle username: set KAGGLE_USERNAME or create ~/.kaggle/kaggle.json" >&2; exit 2; }

wheel: install ## Build dist/: the fastslow wheel and the pure-python torch-geometric wheel (for the offline notebook).
	rm -f dist/fastslow-*.whl dist/torch_geometric-*.whl
	$(PY) -m pip wheel --no-deps -w dist . "torch-geometric==$$($(PY) -c 'import torch_geometric; print(torch_geometric.__version__)')"
	@ls -l dist/*.whl

kaggle-dataset: wheel ## Upload dist/*.whl as the Kaggle dataset <user>/fastslow-wheel (created once, then versioned).
	$(NEED_USER)
	rm -rf build/kaggle-dataset && mkdir -p build/kaggle-dataset
	cp dist/fastslow-*.whl dist/torch_geometric-*.whl build/kaggle-dataset/
	$(FILL_USER) notebooks/dataset-metadata.json > build/kaggle-dataset/dataset-metadata.json
	if $(KAGGLE) datasets status $(KAGGLE_USER)/fastslow-wheel >/dev/null 2>&1; then \
		$(KAGGLE) datasets version -p build/kaggle-dataset -m "$(MSG)"; \
	else \
		$(KAGGLE) datasets create -p build/kaggle-dataset; \
	fi

kaggle-notebook: install ## Push notebooks/fastslow-submit.ipynb as the Kaggle notebook <user>/fastslow-submit.
	$(NEED_USER)
	rm -rf build/kaggle-notebook && mkdir -p build/kaggle-notebook
	cp notebooks/fastslow-submit.ipynb build/kaggle-notebook/
	$(FILL_USER) notebooks/kernel-metadata.json > build/kaggle-notebook/kernel-metadata.json
	$(KAGGLE) kernels push -p build/kaggle-notebook

kaggle-submit: install ## Validate and submit to Kaggle: make kaggle-submit FILE=submissions/submission.csv MSG="...".
	$(VENV)/bin/fastslow kaggle submit $(FILE) -m "$(MSG)"
