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

# Start the local reference cluster, run the installer against it, and show an MPIJob run
# through the real mpi-operator.
demo: build
	$(BIN)/mpiplat cluster up
	eval "$$($(BIN)/mpiplat cluster env)" && $(BIN)/ansible-playbook -i inventories/local playbooks/site.yml
	$(BIN)/mpiplat demo

BUNDLE ?= /tmp/mpiplat-test-bundle

# Lint; molecule `default` on the local cluster; molecule `helm` on a bare local cluster from a
# fresh bundle; then pytest (unit, local cluster, playbooks, charts, MPI workloads), which starts the
# full cluster again and stops it with its last test.
test: build lint
	$(BIN)/mpiplat cluster up
	eval "$$($(BIN)/mpiplat cluster env)" && $(BIN)/molecule test -s default
	$(BIN)/mpiplat cluster down
	$(BIN)/mpiplat cluster up --bare
	rm -rf $(BUNDLE) && $(BIN)/mpiplat bundle $(BUNDLE)
	eval "$$($(BIN)/mpiplat cluster env)" && MPIPLAT_BUNDLE=$(BUNDLE) $(BIN)/molecule test -s helm
	$(BIN)/mpiplat cluster down
	$(BIN)/pytest

lint: setup
	$(BIN)/ruff check src localcluster conformance charts playbooks conftest.py
	$(BIN)/yamllint -s .
	$(BIN)/ansible-lint

clean-cluster: setup
	$(BIN)/mpiplat cluster down
