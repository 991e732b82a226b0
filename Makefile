# mpiplat developer entry points. `make setup` creates .venv with everything.
PYTHON ?= python3.11
VENV   ?= .venv
BIN     = $(VENV)/bin
export PATH := $(abspath $(BIN)):$(PATH)
SHELL       := /bin/bash
# Python's bytecode cache (__pycache__, git-ignored) even where the caller sets PYTHONDONTWRITEBYTECODE: without
# it every process compiles all it imports again (0.75 s of each ansible-playbook run, 1.5 s of each suite start).
export PYTHONDONTWRITEBYTECODE :=
.SHELLFLAGS := -o pipefail -c

.PHONY: setup debs collection build demo test test-matrix test-offline lint clean-cluster

setup: debs $(VENV)/.installed collection

# The host's Debian packages: prometheus (the local cluster's Prometheus, and promtool), the real node's
# (localcluster.realnode.DEBIAN: runc, the CNI plugins, netfilter tools, mmdebstrap for its images; a unit test
# keeps the two lists equal). Installed when missing, as root; otherwise the one command to run is printed.
DEBS = prometheus runc containernetworking-plugins mmdebstrap iptables ipset conntrack socat
# The dashboard's browser tests drive Debian's chromium (no registry serves Playwright's own browser).
BROWSER_DEBS = chromium
debs:
	@missing=$$(for p in $(DEBS) $(BROWSER_DEBS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'ok installed' \
	  || echo $$p; done | tr '\n' ' '); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ]; then echo "error: missing Debian packages: run  sudo apt-get install -y $$missing" >&2; \
	    exit 1; fi; \
	  echo "== installing Debian packages: $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing \
	    >/dev/null; fi

# uv installs from its cache (~/.cache/uv) in seconds once warm.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check 'uv>=0.5,<1'
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e '.[dev]'
	touch $@

# The checkout is the Ansible collection mpiplat.platform (galaxy.yml): linked into .venv's ansible_collections,
# where the venv's Ansible finds it from any folder.
collection: $(VENV)/.installed
	@link="$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/ansible_collections/mpiplat/platform"; \
	  [ "$$(readlink "$$link")" = "$(CURDIR)" ] || { mkdir -p "$${link%/*}" && ln -sfn "$(CURDIR)" "$$link"; }

# Build the pinned upstream binaries and, at the same time, the real node's Debian-based images and the
# dashboard role's (its test deploys them) into the cache (~/.cache/mpiplat); fast when cached. (The CoreDNS
# image wraps a built binary: `cluster up` makes it in seconds.)
IMAGES = pause openmpi mpich intel dashboard dashboard-proxy
build: setup
	$(BIN)/mpiplat cluster images $(addprefix --only ,$(IMAGES)) & images=$$!; \
	  $(BIN)/mpiplat cluster build; built=$$?; wait $$images && exit $$built

# Start the local reference cluster, install the stack and the teams on it with the playbooks,
# show an MPIJob run through the real mpi-operator, then run the conformance suite (its summary last).
demo: build
	$(BIN)/mpiplat cluster up
	eval "$$($(BIN)/mpiplat cluster env)" && $(BIN)/ansible-playbook -i inventories/local playbooks/site.yml \
	  && $(BIN)/mpiplat demo \
	  && $(BIN)/mpiplat conformance run --profile cluster --settings inventories/local/conformance-settings.yml --report-dir reports/demo

# The tests' schedule (which lanes run beside which, in which stages, and why) is .ci/stages.py; it
# prefixes every line with its lane and prints each step's, lane's and stage's time.
test: build
	$(BIN)/python .ci/stages.py

# The `cluster` profile on each Kubernetes version of versions.yml's kubernetes.matrix, one after another on the
# cluster `matrix` (not in CI); MATRIX="1.35 1.36" picks some. Each version's binaries are built once.
test-matrix: build
	$(BIN)/python .ci/stages.py --matrix $(MATRIX)

# Lint and every test not marked `cluster` (unit, charts, MPI workloads, reports): no cluster needed.
test-offline: setup
	$(BIN)/python .ci/stages.py lint workloads workloads-torch offline

lint: setup
	$(BIN)/ruff check src localcluster conformance charts playbooks roles plugins conftest.py .ci
	$(BIN)/yamllint -s .
	$(BIN)/ansible-lint

clean-cluster: setup
	$(BIN)/mpiplat cluster down
