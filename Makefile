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

.PHONY: setup run test
# The README's two commands: `make run` (the main job, embedded) and `make test` (the whole suite).
setup:
	hack/setup.sh

run: setup
	hack/demo.sh

test:
	hack/setup.sh --test
	.venv/bin/pytest tests
