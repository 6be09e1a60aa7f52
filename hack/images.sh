#!/usr/bin/env bash
# Local container images, built with podman and imported into the cluster's containerd.
# No registry is reachable: every image starts from a debootstrap base or from scratch.
#
#   hack/images.sh [all]      base, pause, project images; import them when containerd runs
#   hack/images.sh base|pause|build|import-core|import|refs
#   hack/images.sh sandbox-full   the full sandbox image (images/sandbox/build.sh; podman only, not imported)
#
# Project images are tagged with a hash of their inputs (and a fixed `dev` alias), so an
# unchanged image is neither rebuilt nor re-imported. Refs are listed in $CACHE/images/refs/.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

IMAGES="$CACHE/images"
REFS="$IMAGES/refs"
BASE_REF="localhost/gdpval-base:$DEBIAN_SUITE"
CTR_SOCK="$WORKDIR/containerd/containerd.sock"
IMPORTED="$WORKDIR/containerd/imported"

ctr() { "$CACHE/prefix/containerd/usr/bin/ctr" --address "$CTR_SOCK" -n k8s.io "$@"; }

# runc, not crun: crun refuses this machine's hybrid cgroup v1/v2 layout.
podman() { command podman --log-level=error --runtime "$(command -v runc)" --cgroup-manager=cgroupfs "$@"; }

# Content only: the same files give the same tag from any checkout.
hash_files() { cat "$@" | sha256sum | cut -c1-12; }

debian_mirror() {
  local m
  m="$({ grep -hE '^\s*(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list \
    2>/dev/null || true; } | grep -oE 'https?://[^ ]+/debian/?( |$)' | head -1 | tr -d ' ')"
  echo "${m:-http://deb.debian.org/debian}"
}

build_base() {
  local tar="$IMAGES/base-$DEBIAN_SUITE-debootstrap-$(dpkg-query -W -f='${Version}' debootstrap).tar"
  if [[ ! -f "$tar" ]]; then
    log "base: debootstrap --variant=minbase $DEBIAN_SUITE"
    local root
    root="$(mktemp -d "$CACHE/tmp.XXXXXX")"
    # Not niced: the base, the operator and the slim sandbox are on the cluster's path, and niced beside
    # the Go builds and the tests debootstrap took 13 minutes on a fresh machine.
    debootstrap --variant=minbase "$DEBIAN_SUITE" "$root" "$(debian_mirror)" >"$IMAGES/debootstrap.log" 2>&1 ||
      { tail -20 "$IMAGES/debootstrap.log" >&2; rm -rf "$root"; die "debootstrap failed"; }
    chroot "$root" apt-get clean
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/log/*.log
    tar -C "$root" --numeric-owner -cf "$tar.new" .
    mv "$tar.new" "$tar"
    rm -rf "$root"
  fi
  if [[ "$(cat "$IMAGES/base.source" 2>/dev/null)" != "$tar" ]] || ! podman image exists "$BASE_REF"; then
    log "base: podman import as $BASE_REF"
    podman import --quiet "$tar" "$BASE_REF" >/dev/null
    echo "$tar" >"$IMAGES/base.source"
  fi
  echo "$BASE_REF" >"$REFS/base"
}

build_pause() {
  local src="$HACK_DIR/pause/pause.c" ref dir
  ref="localhost/gdpval-pause:$(hash_files "$src")"
  if ! podman image exists "$ref"; then
    log "pause: building $ref"
    dir="$(mktemp -d "$CACHE/tmp.XXXXXX")"
    gcc -static -Os -o "$dir/pause" "$src"
    strip "$dir/pause"
    tar -C "$dir" --numeric-owner --owner=0 --group=0 -cf "$dir/pause.tar" pause
    podman import --quiet --change 'ENTRYPOINT ["/pause"]' "$dir/pause.tar" "$ref" >/dev/null
    rm -rf "$dir"
  fi
  echo "$ref" >"$REFS/pause"
  # containerd's sandbox_image must name exactly this image.
  echo "$ref" >"$IMAGES/pause.ref"
}

# Dependency wheels for the operator image, keyed by the pins; downloaded on the host because
# pip inside `podman build` cannot verify TLS here (and host CAs must not enter images).
dependency_wheels() {
  python3 -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' ||
    die "python3 must be 3.11 (the image's bookworm interpreter) to fetch matching wheels"
  local key dir
  key="$(hash_files "$REPO_ROOT/constraints.txt" "$REPO_ROOT/pyproject.toml")"
  dir="$CACHE/wheels/$key"
  if [[ ! -f "$dir/.complete" ]]; then
    log "operator: downloading dependency wheels ($key)"
    rm -rf "$dir" && mkdir -p "$dir"
    python3 -m pip wheel --quiet --wheel-dir "$dir" -c "$REPO_ROOT/constraints.txt" \
      "$(stage_source "$CACHE/build/source-deps")" >&2
    rm -f "$dir"/gdpval_operator-*.whl
    touch "$dir/.complete"
  fi
  echo "$dir"
}

# A clean copy of what the Python package is built from (no caches, no egg-info, no venv), in
# $1 (default $CACHE/build/source; the wheels' download, under a lock of its own, stages apart).
stage_source() {
  local dest="${1:-$CACHE/build/source}"
  rm -rf "$dest" && mkdir -p "$dest"
  cp "$REPO_ROOT/pyproject.toml" "$dest/"
  [[ -f "$REPO_ROOT/README.md" ]] && cp "$REPO_ROOT/README.md" "$dest/"
  (cd "$REPO_ROOT" && find operator/gdpval -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 |
    sort -z | xargs -0 cp --parents -t "$dest")
  echo "$dest"
}

# build_image NAME REPO TAG_PREFIX DOCKERFILE CONTEXT [PREPARE]: podman build unless the tag
# exists. PREPARE (a function) finishes the context, only when a build is needed.
build_image() {
  local name="$1" repo="$2" prefix="$3" dockerfile="$4" ctx="$5" prepare="${6:-}" hash ref
  cp "$dockerfile" "$ctx/Dockerfile"
  # The project wheel differs per build (timestamps); its sources are hashed in source.sha256.
  hash="$(cd "$ctx" && find . -type f ! -name 'gdpval_operator-*.whl' -print0 | sort -z | xargs -0 sha256sum |
    { cat; podman image inspect --format '{{.Id}}' "$BASE_REF"; } | sha256sum | cut -c1-12)"
  ref="$repo:$prefix$hash"
  if ! podman image exists "$ref"; then
    log "$name: building $ref"
    [[ -z "$prepare" ]] || "$prepare" "$ctx"
    podman build --quiet --runtime "$(command -v runc)" --network=host --pull=never --layers -f "$ctx/Dockerfile" \
      -t "$ref" -t "$repo:${prefix}dev" "$ctx" >/dev/null
  else
    podman tag "$ref" "$repo:${prefix}dev"
  fi
  echo "$ref" >"$REFS/$name"
  # Drop superseded builds of this image and their dangling intermediate stages.
  local old
  for old in $(podman images --format '{{.Repository}}:{{.Tag}}' "$repo" | grep -E ":$prefix[0-9a-f]{12}\$" | grep -vxF "$ref"); do
    podman rmi "$old" >/dev/null 2>&1 || true
  done
  podman image prune -f >/dev/null 2>&1 || true
}

build_operator() {
  local ctx="$CACHE/build/operator" deps src
  deps="$(with_lock operator-wheels dependency_wheels)"
  src="$(stage_source)"
  rm -rf "$ctx" && mkdir -p "$ctx/wheels"
  cp -l "$deps"/*.whl "$ctx/wheels/" 2>/dev/null || cp "$deps"/*.whl "$ctx/wheels/"
  (cd "$src" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$ctx/source.sha256"
  build_image operator localhost/gdpval-operator "" "$REPO_ROOT/images/operator/Dockerfile" "$ctx" \
    project_wheel
}

project_wheel() {
  python3 -m pip wheel --quiet --no-deps --wheel-dir "$1" "$CACHE/build/source" >&2
}

build_sandbox_slim() {
  local ctx="$CACHE/build/sandbox-slim" tool="operator/gdpval/sandbox/toolserver.py"
  [[ -f "$REPO_ROOT/$tool" ]] || die "$tool missing"
  rm -rf "$ctx" && mkdir -p "$ctx"
  (cd "$REPO_ROOT" && cp --parents "$tool" "$ctx/")
  build_image sandbox-slim localhost/gdpval-sandbox slim- "$REPO_ROOT/images/sandbox/Dockerfile.slim" "$ctx"
}

# import_images REF...: podman save -> ctr import, skipping images containerd already has.
import_images() {
  [[ -S "$CTR_SOCK" ]] && ctr version >/dev/null 2>&1 || die "containerd is not running"
  mkdir -p "$IMPORTED"
  local ref id stamp tar
  for ref in "$@"; do
    id="$(podman image inspect --format '{{.Id}}' "$ref")"
    stamp="$IMPORTED/$(echo "$ref" | tr '/:' '__')"
    if [[ "$(cat "$stamp" 2>/dev/null)" == "$id" ]] && ctr images ls -q | grep -qxF "$ref"; then
      continue
    fi
    log "import: $ref"
    tar="$(mktemp "$CACHE/tmp.XXXXXX.tar")"
    podman save --format docker-archive -o "$tar.new" "$ref" && mv "$tar.new" "$tar"
    ctr images import --snapshotter overlayfs "$tar" >/dev/null
    rm -f "$tar"
    echo "$id" >"$stamp"
  done
}

# Aliases such as :dev follow the content-tagged image they were built with.
alias_dev() {
  local ref="$1" alias="$2"
  ctr images tag --force "$ref" "$alias" >/dev/null
}

project_refs() { cat "$REFS/operator" "$REFS/sandbox-slim"; }

import_project() {
  local ref
  import_images $(project_refs)
  for ref in $(project_refs); do
    case "$ref" in
      localhost/gdpval-operator:*) alias_dev "$ref" localhost/gdpval-operator:dev ;;
      localhost/gdpval-sandbox:slim-*) alias_dev "$ref" localhost/gdpval-sandbox:slim-dev ;;
    esac
  done
}

containerd_running() { [[ -S "$CTR_SOCK" ]] && ctr version >/dev/null 2>&1; }

main() {
  mkdir -p "$IMAGES" "$REFS"
  local cmd="${1:-all}"
  case "$cmd" in
    base) with_lock images build_base ;;
    pause) with_lock images build_pause ;;
    build)
      # The operator's wheels need no image: they download while debootstrap runs (on a fresh machine
      # 13 min for the base, then 5 min for the wheels, beside the Go builds and the full image's downloads).
      with_lock operator-wheels dependency_wheels >/dev/null &
      local wheels=$!
      with_lock images build_base; with_lock images build_pause
      wait "$wheels" || die "downloading the operator's dependency wheels failed"
      with_lock images build_operator; with_lock images build_sandbox_slim ;;
    import-core) with_lock images import_images "$(cat "$REFS/pause")" "$(cat "$REFS/base")" ;;
    import) with_lock images import_project ;;
    refs) grep -H . "$REFS"/* | sed "s|^$REFS/||" ;;
    sandbox-full) "$REPO_ROOT/images/sandbox/build.sh" build >/dev/null ;;
    all)
      main build
      if containerd_running; then
        main import-core
        main import
      else
        log "containerd not running: images built, not imported (run hack/cluster.sh up)"
      fi
      ;;
    *) die "unknown command: $cmd" ;;
  esac
}

main "$@"
