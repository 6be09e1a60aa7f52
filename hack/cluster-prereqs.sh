#!/usr/bin/env bash
# Install everything the local cluster and the tests need, idempotently: Debian packages,
# containerd and etcd from trixie (unpacked into a private prefix, not installed), the cached Go
# builds (Kubernetes, MinIO, kubeconform, kube-router), kubectl and helm, and the podman
# images the cluster uses (the full sandbox image is hack/setup.sh's and images/sandbox/build.sh's).
# Usage: hack/cluster-prereqs.sh [--no-build]   (--no-build: packages and debs only)
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

APT_PACKAGES=(runc containernetworking-plugins podman debootstrap iptables ipset conntrack openssl
              iproute2 util-linux procps psmisc gcc libc6-dev ca-certificates curl)

install_apt() {
  local missing=() p
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [[ ${#missing[@]} -eq 0 ]]; then
    log "apt: all packages present"
    return 0
  fi
  log "apt: installing ${missing[*]}"
  apt-get update -q
  # No init system here: keep package scripts from trying to start daemons.
  DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# A private apt configuration that sees Debian trixie, used only to download .debs.
TRIXIE_APT="$CACHE/apt-trixie"
trixie_apt() {
  local cmd="$1"; shift
  "$cmd" -q -o Dir::Etc::SourceList="$TRIXIE_APT/sources.list" -o Dir::Etc::SourceParts=/dev/null \
    -o Dir::State::Lists="$TRIXIE_APT/lists" -o Dir::Cache="$TRIXIE_APT/cache" \
    -o APT::Get::List-Cleanup=0 -o APT::Sandbox::User=root "$@"
}

# fetch_deb PACKAGE UPSTREAM_VERSION: download once into $CACHE/debs and unpack into a prefix.
fetch_deb() {
  local pkg="$1" upstream="$2" deb
  mkdir -p "$CACHE/debs"
  deb="$(ls "$CACHE/debs/${pkg}_${upstream}"*_amd64.deb 2>/dev/null | head -1 || true)"
  if [[ -z "$deb" ]]; then
    mkdir -p "$TRIXIE_APT/lists/partial" "$TRIXIE_APT/cache/archives/partial"
    local mirror
    # Debian's mirror as the machine's apt configures it (the only package mirror reachable).
    mirror="$({ grep -hE '^\s*(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list \
      2>/dev/null || true; } | grep -oE 'https?://[^ ]+/debian/?( |$)' | head -1 | tr -d ' ')"
    mirror="${mirror:-http://deb.debian.org/debian}"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] ${mirror%/} trixie main" \
      >"$TRIXIE_APT/sources.list"
    if [[ ! -f "$TRIXIE_APT/.updated" ]]; then
      trixie_apt apt-get update >/dev/null
      touch "$TRIXIE_APT/.updated"
    fi
    local version
    version="$(trixie_apt apt-cache madison "$pkg" | awk -F'|' -v u="$upstream" \
      '{gsub(/ /,"",$2); if (index($2, u) == 1) {print $2; exit}}')"
    [[ -n "$version" ]] || die "trixie has no $pkg $upstream"
    log "debs: downloading $pkg=$version from trixie"
    (cd "$CACHE/debs" && trixie_apt apt-get download "$pkg=$version" >/dev/null)
    deb="$(ls "$CACHE/debs/${pkg}_${upstream}"*_amd64.deb | head -1)"
  fi
  local dest="$CACHE/prefix/$(basename "$deb" .deb)"
  if [[ ! -f "$dest/.complete" ]]; then
    rm -rf "$dest" && mkdir -p "$dest"
    dpkg-deb -x "$deb" "$dest"
    touch "$dest/.complete"
  fi
  ln -sfn "$dest" "$CACHE/prefix/$pkg"
  log "debs: $pkg in $dest"
}

host_tools() {
  # Debian's CNI plugins live in /usr/lib/cni; containerd is configured to look there.
  [[ -x /usr/lib/cni/bridge ]] || die "CNI plugins missing from /usr/lib/cni"
}

main() {
  [[ $EUID -eq 0 ]] || die "run as root"
  mkdir -p "$CACHE"
  step "apt packages" with_lock apt install_apt
  step "trixie containerd, etcd" with_lock debs fetch_deb containerd "$CONTAINERD_VERSION"
  with_lock debs fetch_deb etcd-server "$ETCD_VERSION"
  host_tools
  if [[ "${1:-}" != "--no-build" ]]; then
    # Image builds wait mostly on the network and the disk; overlap them with the CPU-bound Go builds.
    mkdir -p "$CACHE/logs"
    # The full sandbox image is not among them: hack/setup.sh builds it in a job of its own (several GB
    # of wheels), so that neither the cluster nor Kueue and LiteLLM wait for it.
    step "images: base, pause, operator, slim" "$HACK_DIR/images.sh" build >"$CACHE/logs/images-build.log" 2>&1 &
    local images_pid=$!
    # What the cluster needs builds at the tests' priority, kube-router and MinIO (most integration
    # tests start one) beside Kubernetes; the other tools after it, niced.
    GO_NICE=0 step "kube-router, MinIO, kubectl and helm" "$HACK_DIR/build-tools.sh" kubectl-helm kube-router minio &
    local tools_pid=$!
    GO_NICE=0 step "kubernetes build" "$HACK_DIR/build-k8s.sh"
    step "kube-router, MinIO (waited for)" wait "$tools_pid" || die "tool build failed"
    step "Go tools" "$HACK_DIR/build-tools.sh" all
    step "images (waited for)" wait "$images_pid" || { tail -30 "$CACHE/logs/images-build.log" >&2; die "image build failed"; }
    # Its steps and timed lines: the log itself is rewritten by the next image build.
    grep -hE '^\[(step\]|[0-9:]{8}\])' "$CACHE/logs/images-build.log" >&2 || true
  fi
}

main "$@"
