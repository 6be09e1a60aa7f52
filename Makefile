# Developer entry points. The local Kubernetes/MinIO environment lives in hack/ (see hack/README.md).
.PHONY: tools minio images cluster-up cluster-down

tools:
	hack/build-k8s.sh
	hack/build-tools.sh all

minio:
	hack/build-tools.sh minio

images:
	hack/images.sh

cluster-up:
	hack/cluster.sh up

cluster-down:
	hack/cluster.sh down

.PHONY: cluster-demo cluster-demo-down
# The operator in one command (README, On Kubernetes): MinIO and the scripted model on the node
# address, helm install with the local images, a 12-task GdpvalRun followed live; -down removes it.
cluster-demo:
	hack/cluster-demo.sh up

cluster-demo-down:
	hack/cluster-demo.sh down

.PHONY: setup run test test-unit test-integration test-cluster test-teardown test-torch test-torch-if-changed lint
# The README's two commands: `make run` (the main job, embedded) and `make test` (the whole suite,
# after the same checks as `make lint`).
setup:
	hack/setup.sh

run: setup
	hack/demo.sh $(DEMO)

# `make test`: setup with its builds in the background, lint, then every tier in one pytest session,
# then the teardown test alone (it stops the cluster: inside the session it would wait for the other
# workers' last tests), then the background builds' step times, then the full-torch flavour's tests
# if its inputs changed since they last passed. Each worker is sent one test at a
# time, ready first (tests/infra/schedule.py): the cluster tier as soon as setup has the cluster up,
# the image tests once the runtime is built, else the tests needing no build. Two workers take any
# test; a third, where the cluster tier runs, takes its tests only (they wait on pods more than on
# the CPU). Each test's start and end go to .cache/test-timeline.tsv. pytest's exit 5 (nothing
# collected) fails like any other.
PYTEST = .venv/bin/pytest --dist load --durations=30
TIMELINE = .cache/test-timeline.tsv
test:
	hack/setup.sh --test --background
	$(MAKE) --no-print-directory lint
	rm -f $(TIMELINE)
	GDPVAL_TEST_TIMELINE=$(TIMELINE) $(PYTEST) -n 3 -m "not cluster_teardown and not torch" tests
	$(MAKE) --no-print-directory test-teardown
	hack/setup.sh --wait
	$(MAKE) --no-print-directory test-torch-if-changed

# The tiers alone (after `hack/setup.sh --test`). Unit: tests/unit, no server, no subprocess.
# Integration: every other test not marked `cluster` (real processes, MinIO, sandboxes, images).
# Cluster: the tests marked `cluster`, the teardown test last.
test-unit:
	$(PYTEST) -n 2 tests/unit

test-integration:
	$(PYTEST) -n 2 -m "not cluster" --ignore=tests/unit tests

test-cluster:
	$(PYTEST) -n 3 -m "cluster and not cluster_teardown" tests
	$(MAKE) --no-print-directory test-teardown

test-teardown:
	.venv/bin/pytest --durations=5 -m cluster_teardown tests/cluster

# The full-torch flavour's tests (images/sandbox/README.md, "Flavours"): they build it first, about
# 3 GB of wheels more than `full`. Passing, they record the digest of the flavour's package inputs
# in images/sandbox/torch-tested.sha256 (commit it); `make test` runs them only when those inputs
# differ from what that file records, as a fresh machine could not fit them in its budget every time.
TORCH_BUILD = images/sandbox/build.sh
test-torch:
	$(PYTEST) -n 2 -m torch tests
	$(TORCH_BUILD) record-tested full-torch

test-torch-if-changed:
	@if $(TORCH_BUILD) tested full-torch; then \
	  echo "full-torch: its package inputs are those test-torch last passed with ($$($(TORCH_BUILD) digest full-torch | cut -c1-12)): not run"; \
	else $(MAKE) --no-print-directory test-torch; fi

# ruff (lint and format) over the code, mypy over the package; setup installs both (test extra).
LINTED = operator tests bench
lint:
	.venv/bin/ruff check $(LINTED)
	.venv/bin/ruff format --check $(LINTED)
	.venv/bin/mypy

.PHONY: sandbox-libs
# Optional, for real local runs: the document libraries models reach for, from Debian, so the
# bubblewrap sandbox's /usr/bin/python3 can read and write xlsx, docx, pdf and images.
sandbox-libs:
	apt-get update -q
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-openpyxl \
	  python3-docx python3-pandas python3-matplotlib python3-reportlab python3-fitz python3-pil \
	  python3-xlrd poppler-utils ffmpeg
