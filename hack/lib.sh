# Common settings for the hack/ scripts. Source it; it does not run anything.
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$HACK_DIR/.." && pwd)"
# shellcheck source=versions.sh
. "$HACK_DIR/versions.sh"

# Slow artifacts (Go builds, debs, images), keyed by version; safe to keep across clones.
CACHE="${GDPVAL_CACHE:-/var/cache/gdpval-dev}"
# Running state of the local cluster (pki, etcd data, logs, kubeconfig, containerd root).
WORKDIR="${GDPVAL_WORKDIR:-/var/lib/gdpval-dev}"

K8S_BIN="$CACHE/kubernetes/$K8S_VERSION/bin"
MINIO_BIN="$CACHE/minio/$MINIO_VERSION/bin/minio"
TOOLS_BIN="$CACHE/tools/bin"
KUBECTL_BIN="$TOOLS_BIN/kubectl"
KUBE_ROUTER_BIN="$CACHE/kube-router/$KUBE_ROUTER_VERSION/bin/kube-router"
GVISOR_BIN="$CACHE/gvisor/$GVISOR_VERSION/bin"
KUEUE_DIR="$CACHE/kueue/$KUEUE_VERSION"

export GOTOOLCHAIN=local
export GOFLAGS="${GOFLAGS:--buildvcs=false}"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# Run "$@" while holding an exclusive lock named $1 (so parallel callers build once).
with_lock() {
  local name="$1"; shift
  mkdir -p "$CACHE/locks"
  (
    flock 9
    "$@"
  ) 9>"$CACHE/locks/$name.lock"
}

# step NAME COMMAND...: run a step of the setup and print one line with its duration and the CPU its
# processes used (those it waited for; not the daemons it leaves running), so a setup's log lists
# where its time went (`grep '^\[step\]'`): on a machine whose cores are busy throughout, the CPU is what to cut.
# `times` (this shell's finished children) runs here, not in a command substitution's subshell.
step() {
  local name="$1" t0 rc=0 cpu
  shift
  cpu="$(mktemp)"
  t0="$(date +%s.%N)"
  times >"$cpu"
  "$@" || rc=$?
  times >>"$cpu"
  awk -v n="$name" -v a="$t0" -v b="$(date +%s.%N)" -v rc="$rc" '
    function seconds(field, parts) { split(field, parts, "m"); return parts[1] * 60 + parts[2] }
    NR == 2 || NR == 4 { c[NR] = seconds($1) + seconds($2) }
    END { printf "[step] %-36s %7.1f s (CPU %.1f s)%s\n", n, b - a, c[4] - c[2], rc ? " (failed)" : "" }' "$cpu" >&2
  rm -f "$cpu"
  return "$rc"
}

# Build Go code at low priority (GO_NICE, default 15): the machine is shared with tests. What the
# cluster tier waits on (Kubernetes, kube-router) and MinIO build at the tests' own priority.
# The compiler collects garbage less often (GOGC 400, not 100): a fifth less CPU for about a third
# more memory per compile (bench/go_build.py), and a fresh machine is short of CPU, not of memory.
nice_go() { GOGC="${GO_BUILD_GOGC:-400}" nice -n "${GO_NICE:-15}" go "$@"; }
