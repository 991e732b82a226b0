# mpiplat developer entry points. `make setup` creates .venv with everything.
PYTHON ?= python3.11
VENV   ?= .venv
BIN     = $(VENV)/bin
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: setup build demo test lint clean-cluster

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

# Build the pinned upstream binaries into the cache (~/.cache/mpiplat); fast when cached.
build: setup
	$(BIN)/mpiplat cluster build

# Start the local reference cluster and show an MPIJob run through the real mpi-operator.
demo: build
	$(BIN)/mpiplat cluster up
	$(BIN)/mpiplat demo

# Lint, then the tests (unit, local cluster, playbooks, charts, MPI workloads), then the molecule
# scenario against the local cluster. pytest's last test stops the cluster it started.
test: build lint
	$(BIN)/mpiplat cluster up
	eval "$$($(BIN)/mpiplat cluster env)" && $(BIN)/molecule test -s default
	$(BIN)/pytest

lint: setup
	$(BIN)/ruff check src localcluster conformance charts playbooks conftest.py
	$(BIN)/yamllint -s .
	$(BIN)/ansible-lint

clean-cluster: setup
	$(BIN)/mpiplat cluster down
