# mpiplat developer entry points. `make setup` creates .venv with everything.
PYTHON ?= python3.11
VENV   ?= .venv
BIN     = $(VENV)/bin
export PATH := $(abspath $(BIN)):$(PATH)
SHELL       := /bin/bash
.SHELLFLAGS := -o pipefail -c

.PHONY: setup debs build demo test test-offline test-helm test-stack stack-suite stack-after stack-rest stack-tenancy stack-sdk stack-others lint clean-cluster

setup: debs $(VENV)/.installed

# The host's Debian packages: prometheus (the local cluster's Prometheus, and promtool) and the real node's
# (localcluster.realnode.DEBIAN: runc, the CNI plugins, netfilter tools, mmdebstrap for its images; a unit test
# keeps the two lists equal). Installed when missing, as root; otherwise the one command to run is printed.
DEBS = prometheus runc containernetworking-plugins mmdebstrap iptables ipset conntrack socat
debs:
	@missing=$$(for p in $(DEBS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'ok installed' \
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

# Build the pinned upstream binaries and, at the same time, the real node's Debian-based images
# into the cache (~/.cache/mpiplat); fast when cached. (The CoreDNS image wraps a built binary:
# `cluster up` makes it in seconds.)
build: setup
	$(BIN)/mpiplat cluster images --only pause --only openmpi --only mpich --only intel & images=$$!; \
	  $(BIN)/mpiplat cluster build; built=$$?; wait $$images && exit $$built

# Start the local reference cluster, install the stack and the teams on it with the playbooks,
# show an MPIJob run through the real mpi-operator, then run the conformance suite (its summary last).
demo: build
	$(BIN)/mpiplat cluster up
	eval "$$($(BIN)/mpiplat cluster env)" && $(BIN)/ansible-playbook -i inventories/local playbooks/site.yml \
	  && $(BIN)/mpiplat demo \
	  && $(BIN)/mpiplat conformance run --profile cluster --settings inventories/local/conformance-settings.yml --report-dir reports/demo

BUNDLE ?= /tmp/mpiplat-test-bundle
# molecule/helm's mpiplat_image_registry: the helm cluster's real node has the controller images so named.
MIRROR = mirror.example.com/mpiplat

# Two lanes at once, each line of output prefixed with its lane (they mostly wait on API servers):
#   helm:    on a bare cluster of its own (MPIPLAT_CLUSTER=helm; its real node in namespaces of its own):
#            the `bare` tests, then molecule `helm` from a fresh bundle, the controllers as real pods,
#            then `down` (it fails if the node leaves a link or cgroup behind);
#   stack:   molecule `default` on the full local cluster with its real node (it leaves the stack and
#            the teams installed), then the conformance suite's `cluster` profile (simulated and real
#            pods) but for its scale rows (stack-suite).
# Then, once both are done (stack-after):
#   scale:   the suite's scale rows (SCALE-01: 200 jobs at once; SCALE-02: 512 workers). Their targets measure
#            how fast the cluster is, and on 2 cores that holds only with nothing else running beside them.
#   offline: lint, then every test not marked `cluster` (unit, charts, MPI workloads, reports). It is
#            CPU-bound, so it starts once the installs and the suite's timed runs are done, beside the
#            fault matrix, which mostly waits.
#   stack-rest: the fault matrix (alone on the cluster: it breaks the stack one fault at a time), then the
#            other `cluster` tests in three processes (they share the cluster, not objects), then the `last`
#            one, which stops the cluster.
SCALE_ROWS = conformance/suite/test_scale.py

test: build
	@$(MAKE) --no-print-directory -j2 test-helm stack-suite
	@$(MAKE) --no-print-directory stack-after

test-offline: setup
	{ unset KUBECONFIG && $(MAKE) --no-print-directory lint && MPIPLAT_OFFLINE=1 $(BIN)/pytest -m "not cluster" -p no:cacheprovider \
	  --durations=10; } 2>&1 | sed -u 's/^/[offline] /'

test-helm: build
	{ export MPIPLAT_CLUSTER=helm && trap '$(BIN)/mpiplat cluster down >/dev/null 2>&1' EXIT \
	  && $(BIN)/mpiplat cluster down && $(BIN)/mpiplat cluster up --bare --image-registry $(MIRROR) \
	  && rm -rf $(BUNDLE) && $(BIN)/mpiplat bundle $(BUNDLE) && eval "$$($(BIN)/mpiplat cluster env)" \
	  && $(BIN)/pytest -m bare -p no:cacheprovider -q \
	  && MPIPLAT_BUNDLE=$(BUNDLE) $(BIN)/molecule test -s helm \
	  && $(BIN)/mpiplat cluster down; } 2>&1 \
	  | sed -u 's/^/[helm] /'

test-stack: stack-suite
	@$(MAKE) --no-print-directory stack-after

stack-suite: build
	{ $(BIN)/mpiplat cluster down && $(BIN)/mpiplat cluster up && eval "$$($(BIN)/mpiplat cluster env)" \
	  && $(BIN)/molecule test -s default \
	  && $(BIN)/pytest conformance/suite --profile cluster --ignore=$(SCALE_ROWS) --durations=10; } 2>&1 \
	  | sed -u 's/^/[stack] /'

stack-after:
	{ eval "$$($(BIN)/mpiplat cluster env)" \
	  && $(BIN)/pytest $(SCALE_ROWS) --profile cluster --report-dir reports/conformance-scale \
	  && $(MAKE) --no-print-directory -j2 test-offline stack-rest; } 2>&1 \
	  | sed -u 's/^/[stack] /'

stack-rest:
	$(BIN)/pytest -m faults -p no:cacheprovider \
	  && $(MAKE) --no-print-directory -j3 stack-tenancy stack-sdk stack-others \
	  && $(BIN)/pytest -m "cluster and last" -p no:cacheprovider

# The stack lane's other `cluster` tests, split in three about equal parts (they mostly wait on the cluster):
# the tenants role's tests (5 min: each of their playbook runs takes half a minute), the SDK with the monitoring
# role and the suite's interrupt selftests (3.5 min), and the rest (4 min).
STACK_TESTS   = -m "cluster and not faults and not last and not bare" -p no:cacheprovider --durations=10
STACK_TENANCY = playbooks/tests/test_tenancy.py
STACK_SDK     = src/mpiplat/tests/test_sdk.py playbooks/tests/test_monitoring.py conformance/selftests/test_interrupt.py

stack-tenancy:
	$(BIN)/pytest $(STACK_TESTS) $(STACK_TENANCY) 2>&1 | sed -u 's/^/[tenancy] /'

stack-sdk:
	$(BIN)/pytest $(STACK_TESTS) $(STACK_SDK) 2>&1 | sed -u 's/^/[sdk] /'

stack-others:
	$(BIN)/pytest $(STACK_TESTS) $(addprefix --ignore=,$(STACK_TENANCY) $(STACK_SDK)) 2>&1 | sed -u 's/^/[others] /'

lint: setup
	$(BIN)/ruff check src localcluster conformance charts playbooks roles conftest.py
	$(BIN)/yamllint -s .
	$(BIN)/ansible-lint

clean-cluster: setup
	$(BIN)/mpiplat cluster down
