# Vigil — every target does its own set-up, so `make demo` and `make test` work on a fresh machine.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

VENV      ?= .venv
PY        := $(VENV)/bin/python
STAMP     := $(VENV)/.installed
DEMO      := .cluster/default
KUBECTL    = $(DEMO)/bin/kubectl --kubeconfig $(DEMO)/kubeconfig
PYTEST_ARGS ?=
# The demo cluster's node: kubelet (default: kubelet + containerd + runc, the operator installed by
# Helm with the built image) or agent (the fast local node agent, the operator as a local process).
NODE      ?= kubelet

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

.PHONY: system-deps
system-deps: ## install the OS packages the tooling needs (apt-get; skipped when present)
	@scripts/system-deps.sh

$(STAMP): pyproject.toml | system-deps
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev]'
	touch $@

.PHONY: venv
venv: $(STAMP) ## create the Python environment in .venv

.PHONY: binaries
binaries: ## build the local control plane, helm and the real node (kubelet, containerd, CNI, crictl) from the Go module proxy (cached outside the repo)
	@e2e/cluster/build.sh >/dev/null
	@e2e/cluster/build.sh node >/dev/null

.PHONY: crds
crds: $(STAMP) ## regenerate crds/, the chart's copy, the field reference and manifests/install.yaml
	$(PY) -m vigil.model.crdgen crds --docs docs/reference/crds.md
	rm -f helm/vigil/files/crds/*.yaml && mkdir -p helm/vigil/files/crds && cp crds/*.yaml helm/vigil/files/crds/
	HELM=$$(e2e/cluster/build.sh)/helm e2e/cluster/render-install.sh

.PHONY: openapi
openapi: $(STAMP) ## regenerate docs/reference/openapi.json, the HTTP API's OpenAPI document, from its pydantic models
	$(PY) -m vigil.api.openapi > docs/reference/openapi.json

.PHONY: queue-schema
queue-schema: $(STAMP) ## regenerate operator/vigil/queue/sql/schema.sql from the queue's migrations (a throwaway PostgreSQL)
	PYTHONPATH=operator:. $(PY) -m tests.queue.schema

.PHONY: image
image: $(STAMP) ## build the operator image vigil:<version> (installs and starts Docker if missing; prints the name)
	@scripts/image.sh

.PHONY: docker-down
docker-down: ## stop the project's Docker daemon (started by `make image` and the image tests), leaving no process behind
	@e2e/cluster/dockerd.sh down

.PHONY: cluster-up
cluster-up: $(STAMP) ## start the local control plane (etcd, API server, controllers, scheduler) and a node: NODE=kubelet (default) or NODE=agent
	$(PY) -m e2e.cluster.localcluster up --state $(DEMO) --node $(NODE)

.PHONY: cluster-down
cluster-down: $(STAMP) docker-down ## stop the local control plane and the Docker daemon, leaving no process behind
	$(PY) -m e2e.cluster.localcluster down --state $(DEMO)

.PHONY: demo
demo: cluster-up ## the local control plane, the operator, the examples, and `kubectl get sj,vwf`
	@scripts/demo.sh

.PHONY: lint
lint: $(STAMP) ## ruff, mypy --strict, and the import contracts that keep vigil.core pure
	$(VENV)/bin/ruff check operator tests e2e bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

.PHONY: test
test: lint binaries image ## the whole suite (unit, contract, integration against a real API server and databases, e2e)
	VIGIL_FAIL_ON_SKIP=$${VIGIL_FAIL_ON_SKIP:-1} $(VENV)/bin/pytest $(PYTEST_ARGS) || { status=$$?; echo "pytest exited with status $$status"; exit $$status; }

.PHONY: stress
stress: $(STAMP) binaries ## long variants of the failover and soak tests
	VIGIL_STRESS=1 $(VENV)/bin/pytest -m stress tests/stress $(PYTEST_ARGS)

.PHONY: faults
faults: $(STAMP) binaries ## long variants of the real-fault scenarios (API server, etcd, PostgreSQL, worker, history disk, clock); prints the checker's table
	VIGIL_FAULTS_LONG=1 VIGIL_FAULTS_REPORT=.cluster/faults-report.txt $(VENV)/bin/pytest tests/faults $(PYTEST_ARGS)

# `make bench queue queuetrigger` runs those sections only; BENCH_ARGS passes flags (python -m bench --help).
BENCH_SECTIONS := $(filter-out bench,$(MAKECMDGOALS))

.PHONY: bench
bench: $(STAMP) binaries ## benchmarks: prints rates and latencies; never fails for being slow
	$(PY) -m bench $(BENCH_SECTIONS) $(BENCH_ARGS)

ifneq ($(filter bench,$(MAKECMDGOALS)),)
.PHONY: $(BENCH_SECTIONS)
$(BENCH_SECTIONS): ; @:
endif

.PHONY: clean
clean: cluster-down ## stop the demo cluster and delete local state (not the binary cache)
	rm -rf .cluster
