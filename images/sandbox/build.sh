#!/usr/bin/env bash
# Build the full sandbox image (images/sandbox/Dockerfile) with podman.
#
#   images/sandbox/build.sh [build] [FLAVOUR]   wheels on the host, staged context, podman build (default)
#   images/sandbox/build.sh cold [FLAVOUR]      the same without podman's layer cache (to measure a full build)
#   images/sandbox/build.sh wheels [FLAVOUR]    only gather (download) and build the wheels; print their folders
#   images/sandbox/build.sh lock                re-resolve requirements.in and requirements-torch.in into the locks
#   images/sandbox/build.sh import [FLAVOUR]    load this tree's image into the local cluster's containerd (once per tag)
#   images/sandbox/build.sh ref [FLAVOUR]       print the image reference of the last build
#   images/sandbox/build.sh tag [FLAVOUR]       print the image reference this tree builds (without building)
#   images/sandbox/build.sh digest full-torch   print the digest of the packages' inputs (no base image, no tool server)
#   images/sandbox/build.sh tested full-torch   exit 0 when that digest is the one torch-tested.sha256 records
#   images/sandbox/build.sh record-tested full-torch   record it there (make test-torch, after its tests pass)
#
# FLAVOUR is `full` (the default: the paper's list without its torch family) or `full-torch` (with
# it, about 5 GB more; README.md, "Flavours").
#
# pip cannot verify TLS inside `podman build` here, and the host's extra CA certificates must not
# enter an image, so the wheels are downloaded (or built, for pure-Python sdists) on the host and
# reach the build through a bind mount; so do the Debian packages, from an apt cache on the host.
# The base image comes from hack/images.sh. Builds are serialised by a lock in $CACHE/locks.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="${GDPVAL_CACHE:-/var/cache/gdpval-dev}"
WORKDIR="${GDPVAL_WORKDIR:-/var/lib/gdpval-dev}"
BASE_REF="${GDPVAL_BASE_IMAGE:-localhost/gdpval-base:bookworm}"
REPO="localhost/gdpval-sandbox"
PYTHON="${PYTHON:-python3}"
TOOLSERVER="$REPO_ROOT/operator/gdpval/sandbox/toolserver.py"
STATE="$CACHE/sandbox-full"
FLAVOUR="${2:-full}"
case "$FLAVOUR" in
  full) REF_FILE="$STATE/ref" ;;
  full-torch) REF_FILE="$STATE/ref.full-torch" ;;
  *) printf 'error: unknown flavour %s (full or full-torch)\n' "$FLAVOUR" >&2; exit 2 ;;
esac
LOCK="$HERE/requirements.txt"
TORCH_LOCK="$HERE/requirements-torch.txt"
APT_CACHE="$STATE/apt-archives"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
# runc, not crun: crun refuses the hybrid cgroup v1/v2 layout of these machines.
podman() { command podman --log-level=error --runtime "$(command -v runc)" --cgroup-manager=cgroupfs "$@"; }

# Wheels must match the image's interpreter (Debian bookworm: CPython 3.11.2, glibc 2.36, x86_64).
check_python() {
  "$PYTHON" - <<'PY' || die "$PYTHON must be CPython 3.11 on linux x86_64 (set PYTHON=...)"
import platform, sys
ok = sys.version_info[:2] == (3, 11) and platform.machine() == "x86_64" and sys.platform == "linux"
sys.exit(0 if ok else 1)
PY
}

# Resolve on the host's CPython 3.11 (linux x86_64, glibc >= the image's), which picks the files the
# image can use, with `pip download` (kept: the wheel step reuses its files). The files of the last
# lock seed the folder, since this PyPI mirror serves no metadata and resolving downloads every
# candidate; the lock takes only the files pip names in this resolution. lockfile.py refuses anything
# that needs more than the image's Python 3.11.2 and pins each file by its sha256.
LOCK_DOWNLOADS="$STATE/lock-download"
lock() {
  check_python
  local fresh="$LOCK_DOWNLOADS.new" log
  rm -rf "$fresh" && mkdir -p "$fresh" "$LOCK_DOWNLOADS"
  cp -al "$LOCK_DOWNLOADS"/. "$fresh/"
  log="$(mktemp)"
  nice -n 10 env -u PIP_FIND_LINKS "$PYTHON" -m pip download --progress-bar off -d "$fresh" \
    -r "$HERE/requirements.in" -r "$HERE/requirements-torch.in" >"$log" 2>&1 ||
    { tail -30 "$log" >&2; die "pip could not resolve requirements.in and requirements-torch.in (log: $log)"; }
  "$PYTHON" "$HERE/lockfile.py" write-lock "$log" "$HERE/requirements.in" "$HERE/requirements-torch.in" "$LOCK" "$TORCH_LOCK" ||
    die "no lock written (pip's log: $log)"
  rm -rf "$LOCK_DOWNLOADS" && mv "$fresh" "$LOCK_DOWNLOADS" && rm -f "$log"
}

ensure_base() {
  podman image exists "$BASE_REF" && return 0
  [[ -x "$REPO_ROOT/hack/images.sh" || -f "$REPO_ROOT/hack/images.sh" ]] ||
    die "$BASE_REF is missing and hack/images.sh is not there to build it"
  log "base image $BASE_REF missing: hack/images.sh base"
  bash "$REPO_ROOT/hack/images.sh" base
}

# pip downloads one file at a time, and this PyPI mirror gave one connection about 1.8 MB/s and
# answers each pin's index query slowly: the pins are shared round-robin among parallel downloads.
DOWNLOADS="${GDPVAL_WHEEL_DOWNLOADS:-6}"
download() {
  local pins="$1" dest="$2" part pids=() failed=0
  split -n "r/$DOWNLOADS" -d "$pins" "$pins.part-"
  for part in "$pins".part-*; do
    [[ -s "$part" ]] || continue
    nice -n 10 env -u PIP_FIND_LINKS "$PYTHON" -m pip download --quiet --no-deps --require-hashes -d "$dest" -r "$part" >&2 &
    pids+=("$!")
  done
  for part in "${pids[@]}"; do wait "$part" || failed=1; done
  rm -f "$pins".part-*
  [[ $failed == 0 ]] || die "downloading the pins of $pins failed (see above)"
}

# One wheel folder per lock file; reused until requirements.txt changes. Every file is checked
# against the lock's hashes as it is downloaded; the pure-Python sdists among them are built into
# wheels here, and requirements.image.txt pins those wheels by their own hash for the image.
wheels() {
  local lock="$1" key dir
  key="$(sha256sum "$lock" | cut -c1-12)"
  dir="$STATE/wheels/$key"
  if [[ ! -f "$dir/.complete" ]]; then
    check_python
    log "wheels: $(grep -c -- '--hash=' "$lock") pinned files of $(basename "$lock") into $dir"
    rm -rf "$dir" && mkdir -p "$dir/sdists" "$dir/built"
    # Files the lock step downloaded are reused when their sha256 is the lock's; pip downloads the
    # rest (asking the index about all 423 pins took over 12 minutes here even with every file present).
    nice -n 10 "$PYTHON" "$HERE/lockfile.py" gather "$lock" "$dir/sdists" "$dir/missing.txt" "$LOCK_DOWNLOADS" "$STATE"/wheels/*/
    [[ -s "$dir/missing.txt" ]] && download "$dir/missing.txt" "$dir/sdists"
    find "$dir/sdists" -name '*.whl' -exec mv -t "$dir/" {} +
    # One build environment for all the sdists (setuptools builds every one of them), not pip's
    # isolated one per sdist: that asked the index for setuptools again each time, a minute apiece here.
    if compgen -G "$dir/sdists/*" >/dev/null; then
      "$PYTHON" -m venv "$dir/build-env"
      env -u PIP_FIND_LINKS "$dir/build-env/bin/pip" install --quiet setuptools wheel >&2
      # No compiler (CC=false): an sdist whose C extension is optional (thrift's) falls back to pure
      # Python, as the image would have it; one whose extension is not optional fails the build.
      # SOURCE_DATE_EPOCH fixes the wheels' zip timestamps, so the same sdist builds the same bytes.
      nice -n 10 env -u PIP_FIND_LINKS CC=false CXX=false SOURCE_DATE_EPOCH=315532800 "$dir/build-env/bin/pip" wheel --quiet --no-deps --no-build-isolation \
        -w "$dir/built" "$dir"/sdists/* >&2
      rm -rf "$dir/build-env"
    fi
    local compiled
    compiled="$(find "$dir/built" -name '*.whl' ! -name '*-none-any.whl' -printf '%f ')"
    [[ -z "$compiled" ]] || die "sdists that are not pure Python (pin a version with a wheel instead): $compiled"
    cp -r "$dir"/built/. "$dir/"
    "$PYTHON" "$HERE/lockfile.py" image-lock "$lock" "$dir/built" "$dir/requirements.image.txt"
    touch "$dir/.complete"
  fi
  echo "$dir"
}

# The flavour's locks: full-torch installs requirements-torch.txt on top of full's.
locks() {
  echo "$LOCK"
  [[ "$FLAVOUR" == full ]] || echo "$TORCH_LOCK"
}

# The files the image is built from, as sha256 sums: the Dockerfile, the flavour's locks, the pip check,
# the bytecode step and (unless `without-toolserver`) the tool server.
input_sums() {
  local files=("$HERE/Dockerfile")
  mapfile -t -O 1 files < <(locks)
  files+=("$HERE/pip-check.sh" "$HERE/compile-bytecode.py")
  [[ "${1:-}" == without-toolserver ]] || files+=("$TOOLSERVER")
  sha256sum "${files[@]}" | cut -c1-64
}

# The tag is a hash of the content: the input files and the base image's id.
content_ref() {
  local base_id
  base_id="$(podman image inspect --format '{{.Id}}' "$BASE_REF" 2>/dev/null)" ||
    die "base image $BASE_REF is missing: hack/images.sh base"
  echo "$REPO:$FLAVOUR-$({ input_sums; echo "$base_id"; } | sha256sum | cut -c1-12)"
}

# What `make test-torch` last passed with (TESTED_FILE, in git) and `make test` compares against: the
# packages' inputs only. The base image differs per machine, and the tool server is tested in `full`.
TESTED_FILE="$HERE/torch-tested.sha256"
packages_digest() { input_sums without-toolserver | sha256sum | cut -c1-64; }

# Hard links where the file system allows (the wheels are gigabytes), else a copy.
stage_wheels() {
  cp -al "$1" "$2" 2>/dev/null || cp -a "$1" "$2"
}

take_lock() {
  mkdir -p "$CACHE/locks"
  exec 9>"$CACHE/locks/sandbox-full.lock"
  flock 9
}

# podman build of one Dockerfile target from the staged context: TARGET CACHE_FLAG LOG [ARGS...].
podman_build() {
  local target="$1" cache_flag="$2" build_log="$3"
  shift 3
  nice -n 10 podman build --network=host --pull=never "$cache_flag" --build-arg "BASE=$BASE_REF" --target "$target" \
    -f "$ctx/Dockerfile" "$@" "$ctx" >"$build_log" 2>&1 ||
    { tail -30 "$build_log" >&2; die "podman build --target $target failed (log: $build_log)"; }
}

build() {
  local cache_flag="${1:---layers}"
  [[ -f "$TOOLSERVER" ]] || die "missing $TOOLSERVER"
  take_lock
  ensure_base
  local started ctx wheel_dir torch_dir ref seconds size
  started=$(date +%s)
  ref="$(content_ref)"
  if podman image exists "$ref" && [[ "$cache_flag" == --layers ]]; then
    log "$ref exists: nothing to build"
  else
    ctx="$STATE/context"
    rm -rf "$ctx" && mkdir -p "$ctx" "$APT_CACHE/partial"
    cp "$HERE/Dockerfile" "$LOCK" "$TORCH_LOCK" "$HERE/pip-check.sh" "$HERE/compile-bytecode.py" "$TOOLSERVER" "$ctx/"
    ln -s "$APT_CACHE" "$ctx/apt"
    # The Debian stage needs no wheel: with the layer cache on, it builds while they download (on a
    # fresh machine both take minutes), and the image's build then finds it cached.
    local system=""
    if [[ "$cache_flag" == --layers ]]; then
      mkdir "$ctx/wheels" "$ctx/wheels-torch"
      podman_build system "$cache_flag" "$STATE/build-system.log" &
      system=$!
    fi
    wheel_dir="$(wheels "$LOCK")"
    [[ "$FLAVOUR" == full ]] || torch_dir="$(wheels "$TORCH_LOCK")"
    [[ -z "$system" ]] || wait "$system" || die "the Debian stage failed (log: $STATE/build-system.log)"
    rm -rf "$ctx/wheels" "$ctx/wheels-torch"
    stage_wheels "$wheel_dir" "$ctx/wheels"
    if [[ "$FLAVOUR" == full ]]; then mkdir "$ctx/wheels-torch"; else stage_wheels "$torch_dir" "$ctx/wheels-torch"; fi
    log "building $ref (this takes a while)"
    podman_build "$FLAVOUR" "$cache_flag" "$STATE/build.log" -t "$ref"
  fi
  podman tag "$ref" "$REPO:$FLAVOUR-dev"
  echo "$ref" >"$REF_FILE"
  seconds=$(( $(date +%s) - started ))
  size="$(podman image inspect --format '{{.Size}}' "$ref")"
  log "built $ref in ${seconds}s; size $(( size / 1000000 )) MB (also tagged $REPO:$FLAVOUR-dev)"
  echo "$ref"
}

# podman save -> containerd import, for pods that name the full sandbox image.
import_image() {
  local ref ctr_bin sock
  # This tree's image, not the last one built: other checkouts build into the same state folder.
  ref="$(content_ref)"
  podman image exists "$ref" || die "$ref is not built: images/sandbox/build.sh first"
  ctr_bin="$CACHE/prefix/containerd/usr/bin/ctr"
  sock="$WORKDIR/containerd/containerd.sock"
  [[ -S "$sock" ]] || die "containerd is not running ($sock)"
  # One import at a time (setup's background job and a test's fixture may both ask); not the build's
  # lock, so builds go on meanwhile.
  mkdir -p "$CACHE/locks"
  exec 8>"$CACHE/locks/sandbox-full-import.lock"
  flock 8
  if "$ctr_bin" --address "$sock" -n k8s.io images ls -q | grep -qxF "$ref"; then
    log "$ref is already in containerd"
    return 0
  fi
  # Streamed: a temporary archive would need as much free disk again as the image (7 to 12 GB).
  podman save --format docker-archive "$ref" | "$ctr_bin" --address "$sock" -n k8s.io images import --snapshotter overlayfs - >/dev/null ||
    die "importing $ref into containerd failed"
  "$ctr_bin" --address "$sock" -n k8s.io images tag --force "$ref" "$REPO:$FLAVOUR-dev" >/dev/null
  # Older builds of this flavour are gigabytes each; podman keeps them if they are wanted again.
  "$ctr_bin" --address "$sock" -n k8s.io images ls -q | grep -E "^$REPO:$FLAVOUR-[0-9a-f]{12}\$" | grep -vxF "$ref" |
    xargs -r "$ctr_bin" --address "$sock" -n k8s.io images rm >/dev/null || true
  log "imported $ref (and $REPO:$FLAVOUR-dev) into containerd"
}

mkdir -p "$STATE"
case "${1:-build}" in
  build) build ;;
  cold) build --no-cache ;;
  lock) lock ;;
  wheels) take_lock; while read -r lock; do wheels "$lock"; done < <(locks) ;;
  import) import_image ;;
  ref) cat "$REF_FILE" ;;
  tag) content_ref ;;
  digest) packages_digest ;;
  tested) [[ "$(packages_digest)" == "$(cat "$TESTED_FILE" 2>/dev/null)" ]] ;;
  record-tested) packages_digest >"$TESTED_FILE" ;;
  *) die "unknown command: $1 (build|cold|wheels|lock|import|ref|tag)" ;;
esac
