#!/usr/bin/env bash
# Set up this checkout on a fresh machine: bubblewrap (and passt, for --network) for local sandboxes and a virtualenv (.venv)
# with the package and its test tools. Idempotent; each step prints a `[step] NAME SECONDS (CPU SECONDS)` line.
#
#   hack/setup.sh                      bubblewrap and .venv
#   hack/setup.sh --test               also everything the test suite starts itself: Chromium, MinIO,
#                                      Kubernetes, helm, images (hack/cluster-prereqs.sh), Kueue, and
#                                      the full sandbox image unpacked as local runs' runtime
#   hack/setup.sh --test --background  the same, with the builds in a background job (log:
#                                      .cache/setup-builds.log), so that `make test` runs the
#                                      tests that need none of them meanwhile; a test that needs a
#                                      build waits on that build's lock
#   hack/setup.sh --wait               wait for the background job; print its steps; fail if it failed
#   hack/setup.sh --runtime            the full sandbox image and its runtime (cached; under a lock)
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

# This checkout's background job (another checkout may run its own against the same cache).
STATE_DIR="$REPO_ROOT/.cache"  # not in git: a clean clone has none until the test setup makes it
BUILDS_LOG="$STATE_DIR/setup-builds.log"
BUILDS_STATUS="$STATE_DIR/setup-builds.status"
READY_DIR="$STATE_DIR/setup-ready"
# Held by the foreground setup while it makes the virtualenv (the background builds start first).
VENV_LOCK="$STATE_DIR/venv.lock"

apt_install() {
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
}

venv() {
  [[ -x .venv/bin/python ]] || "${PYTHON:-python3}" -m venv .venv
  # Pinned versions resolve without backtracking; the pip cache lives outside git.
  .venv/bin/pip install -q --disable-pip-version-check -c constraints.txt -e ".[test]"
}

# The full sandbox image unpacked as the local runtime: gdpval run's default root, which
# tests/images and the local-runtime tests use (they call this and so wait for it). An unchanged
# image and runtime take 2-6 s (measured at load 11-19); a first unpack about 45 s.
runtime() {
  "$HACK_DIR/images.sh" sandbox-full
  # With the image cached this comes seconds after setup began, before the virtualenv is made.
  mkdir -p "$STATE_DIR"
  flock "$VENV_LOCK" true
  [[ -x .venv/bin/gdpval ]] || die "no virtualenv in $REPO_ROOT: run hack/setup.sh first"
  .venv/bin/gdpval runtime build >/dev/null
}

# Everything slow: the Go builds and the images (hack/cluster-prereqs.sh); beside them the runtime
# (it needs only the images); then the cluster up with the project's images, and the full image in
# it. Each writes a marker in $READY_DIR once ready, which the test scheduler reads
# (tests/infra/schedule.py) to start a tier as soon as its build is done. Kueue and LiteLLM build in
# the background and are not waited for (their tests wait on their build locks).
builds() {
  mkdir -p "$READY_DIR"
  { step "full runtime (beside the Go builds)" with_lock sandbox-runtime runtime && touch "$READY_DIR/runtime"; } &
  local full=$!
  step "cluster prerequisites" "$HACK_DIR/cluster-prereqs.sh"
  step "cluster up, project images imported" cluster_ready
  { nohup "$HACK_DIR/build-tools.sh" kueue && touch "$READY_DIR/kueue"; } >"$CACHE/logs/kueue-build.log" 2>&1 &
  # LiteLLM's proxy (tests/integration/test_litellm_proxy.py) installs into its own cached venv, in the
  # background too; the test waits on its lock and says so when the install failed.
  nohup "$HACK_DIR/litellm.sh" >"$CACHE/logs/litellm-install.log" 2>&1 &
  wait "$full" || die "the full runtime failed: its step line and output are above"
  step "full image into the cluster" "$REPO_ROOT/images/sandbox/build.sh" import
}

cluster_ready() {
  "$HACK_DIR/cluster.sh" up >/dev/null
  "$HACK_DIR/images.sh" all
  touch "$READY_DIR/cluster"
}

# What every test tier needs: the Debian packages and the trixie debs (quick), before any test.
test_packages() {
  step "apt packages and debs" "$HACK_DIR/cluster-prereqs.sh" --no-build
  rm -rf "$READY_DIR"  # builds makes it again, marker by marker
  mkdir -p "$CACHE/logs" "$STATE_DIR"
}

builds_background() {
  rm -f "$BUILDS_STATUS"
  # setsid and no inherited descriptors: the job outlives make's shell and holds no caller's lock.
  setsid bash -c '"$0" --builds >"$1" 2>&1; echo $? >"$2"' "$HACK_DIR/setup.sh" "$BUILDS_LOG" "$BUILDS_STATUS" \
    </dev/null >/dev/null 2>&1 8>&- 9>&- &
  log "builds started in the background (log: $BUILDS_LOG)"
}

# The report's browser test drives Debian's Chromium through Playwright (no browser download).
browser() {
  command -v chromium >/dev/null || step "chromium" apt_install chromium
}

wait_builds() {
  [[ -f "$BUILDS_LOG" ]] || die "no background setup to wait for: run hack/setup.sh --test --background"
  until [[ -s "$BUILDS_STATUS" ]]; do sleep 2; done
  grep -h '^\[step\]' "$BUILDS_LOG" >&2 || true
  local rc
  rc="$(cat "$BUILDS_STATUS")"
  [[ "$rc" == 0 ]] || { tail -30 "$BUILDS_LOG" >&2; die "background setup failed ($rc); log: $BUILDS_LOG"; }
}

case "${1:-}" in
  --wait) wait_builds; exit 0 ;;
  --runtime) with_lock sandbox-runtime runtime; exit 0 ;;
  --builds) builds; exit 0 ;;
esac

if ! command -v bwrap >/dev/null || ! command -v pasta >/dev/null || ! command -v ip >/dev/null; then
  step "bubblewrap, passt" apt_install bubblewrap passt iproute2
fi
# pasta (--network sandboxes) opens the tun device as the sandbox's unprivileged uid: Debian's udev makes it
# 0666 (creating an interface still needs CAP_NET_ADMIN in its namespace); machines without udev leave it 0600.
if [[ -c /dev/net/tun && "$(stat -c %a /dev/net/tun)" != 666 ]]; then chmod 0666 /dev/net/tun; fi
# The background builds start before the virtualenv (about a minute of downloads on a fresh machine):
# the Kubernetes build, on the cluster tier's critical path, needs none of it. Their one use of .venv,
# the runtime's unpack, waits on VENV_LOCK, held from before the job starts until the virtualenv is
# made: on a fresh machine that unpack comes half an hour in, with a cached image seconds in.
if [[ "${1:-} ${2:-}" == "--test --background" ]]; then
  test_packages
  exec 8>"$VENV_LOCK"
  flock 8
  builds_background
  step "virtualenv" venv
  exec 8>&-
  browser
else
  step "virtualenv" venv
  if [[ "${1:-}" == "--test" ]]; then
    test_packages
    builds
    browser
  fi
fi
