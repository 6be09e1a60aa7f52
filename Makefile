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

.PHONY: setup run test lint
# The README's two commands: `make run` (the main job, embedded) and `make test` (the whole suite,
# after the same checks as `make lint`).
setup:
	hack/setup.sh

run: setup
	hack/demo.sh

test:
	hack/setup.sh --test
	$(MAKE) --no-print-directory lint
	.venv/bin/pytest -n 2 --durations=30 tests

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
