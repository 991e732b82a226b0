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

# Start the local reference cluster, install the stack and the teams on it with the playbooks,
# show an MPIJob run through the real mpi-operator, then run the conformance suite (its summary last).
demo: build
	$(BIN)/mpiplat cluster up
	eval "$$($(BIN)/mpiplat cluster env)" && $(BIN)/ansible-playbook -i inventories/local playbooks/site.yml
	$(BIN)/mpiplat demo
	$(BIN)/mpiplat conformance run --settings inventories/local/conformance-settings.yml --report-dir reports/demo

BUNDLE ?= /tmp/mpiplat-test-bundle

# Lint; molecule `helm` on a bare local cluster from a fresh bundle; molecule `default` on the full
# local cluster (it leaves the stack and the teams installed); then pytest: unit tests, local cluster,
# playbooks, charts, MPI workloads and the conformance suite. pytest's last test stops the cluster.
test: build lint
	$(BIN)/mpiplat cluster down
	$(BIN)/mpiplat cluster up --bare
	rm -rf $(BUNDLE) && $(BIN)/mpiplat bundle $(BUNDLE)
	eval "$$($(BIN)/mpiplat cluster env)" && MPIPLAT_BUNDLE=$(BUNDLE) $(BIN)/molecule test -s helm
	$(BIN)/mpiplat cluster down
	$(BIN)/mpiplat cluster up
	eval "$$($(BIN)/mpiplat cluster env)" && $(BIN)/molecule test -s default
	$(BIN)/pytest --durations=20

lint: setup
	$(BIN)/ruff check src localcluster conformance charts playbooks conftest.py
	$(BIN)/yamllint -s .
	$(BIN)/ansible-lint

clean-cluster: setup
	$(BIN)/mpiplat cluster down
