#!/usr/bin/env bash
# Set up this checkout on a fresh machine: bubblewrap for local sandboxes and a virtualenv (.venv)
# with the package and its test tools. With --test, also everything the test suite starts itself
# (MinIO, Kubernetes binaries, helm, images: see hack/cluster-prereqs.sh; the full sandbox image unpacked
# as local runs' runtime: gdpval runtime build). Idempotent.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v bwrap >/dev/null || ! command -v pasta >/dev/null || ! command -v ip >/dev/null; then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends bubblewrap passt iproute2
fi
# pasta (--network sandboxes) opens the tun device as the sandbox's unprivileged uid: Debian's udev makes it
# 0666 (creating an interface still needs CAP_NET_ADMIN in its namespace); machines without udev leave it 0600.
if [[ -c /dev/net/tun && "$(stat -c %a /dev/net/tun)" != 666 ]]; then chmod 0666 /dev/net/tun; fi

python="${PYTHON:-python3}"
[[ -x .venv/bin/python ]] || "$python" -m venv .venv
# Pinned versions resolve without backtracking; the pip cache lives outside git.
.venv/bin/pip install -q --disable-pip-version-check -c constraints.txt -e ".[test]"

if [[ "${1:-}" == "--test" ]]; then
  # The report's browser test drives Debian's Chromium through Playwright (no browser download).
  if ! command -v chromium >/dev/null; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium
  fi
  hack/cluster-prereqs.sh
  # Kueue (tests/cluster/test_kueue.py only) builds in the background, off setup's critical path;
  # the test waits for it on the build lock. A cached build returns at once.
  logs="${GDPVAL_CACHE:-/var/cache/gdpval-dev}/logs"
  mkdir -p "$logs" && nohup hack/build-tools.sh kueue >"$logs/kueue-build.log" 2>&1 &
  # LiteLLM's proxy (tests/integration/test_litellm_proxy.py) installs into its own cached venv, in the
  # background too; the test waits on its lock and says so when the install failed.
  nohup hack/litellm.sh >"$logs/litellm-install.log" 2>&1 &
  # The full sandbox image (built just above) unpacked as the local runtime: gdpval run's default root,
  # which tests/images and the local-runtime tests use. About 25 s once; an unchanged image, 1 s.
  .venv/bin/gdpval runtime build >/dev/null
fi
