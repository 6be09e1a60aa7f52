#!/usr/bin/env bash
# The operator in one command (`make cluster-demo`): the local cluster, MinIO and the scripted model
# on the node address, `helm install` of the chart with the local images, a 12-task GdpvalRun over
# the stress dataset (current revision, with rubrics; two tasks from each of six sectors), followed
# live with `gdpval status --watch`; the run's folder is copied to ./out/cluster-demo/ and the
# submission and report locations are printed. `make cluster-demo-down` removes all of it (the
# cluster itself stays up: `make cluster-down` stops it).
#
#   hack/cluster-demo.sh [up]    idempotent: a second `up` replaces the run with a new one
#   hack/cluster-demo.sh down
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO_ROOT"

NODE_IP=10.250.0.1 # hack/cluster.sh's node address: servers pods use listen on it
DEMO="$WORKDIR/cluster-demo"
NS=gdpval-demo
RELEASE=gdpval-demo
RUN=demo
BUCKET=gdpval-demo
OUT="${GDPVAL_DEMO_OUT:-$REPO_ROOT/out/cluster-demo}"
PY=.venv/bin/python
export KUBECONFIG="$WORKDIR/kubeconfig/admin.conf"
kubectl() { "$KUBECTL_BIN" "$@"; }
helm() { "$TOOLS_BIN/helm" "$@"; }

alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }
free_port() { "$PY" -c 'import socket,sys; s=socket.socket(); s.bind((sys.argv[1], 0)); print(s.getsockname()[1])' "$NODE_IP"; }

# wait_http URL SECONDS WHAT: poll until the URL answers, or fail naming what never came up.
wait_http() {
  local deadline=$((SECONDS + $2))
  until curl -fs -o /dev/null --max-time 2 "$1"; do
    ((SECONDS < deadline)) || die "$3 did not answer at $1 within $2 s"
    sleep 0.3
  done
}

start_minio() {
  if ! alive "$DEMO/minio.pid"; then
    [[ -f "$DEMO/s3.env" ]] || {
      echo "AWS_ACCESS_KEY_ID=demo-$(head -c 6 /dev/urandom | od -An -tx1 | tr -d ' \n')"
      echo "AWS_SECRET_ACCESS_KEY=$(head -c 24 /dev/urandom | base64 | tr -d '/+=')"
      echo "AWS_ENDPOINT_URL=http://$NODE_IP:$(free_port)"
      echo "AWS_REGION=us-east-1"
    } >"$DEMO/s3.env"
    set -a && . "$DEMO/s3.env" && set +a
    log "MinIO on $AWS_ENDPOINT_URL"
    MINIO_ROOT_USER="$AWS_ACCESS_KEY_ID" MINIO_ROOT_PASSWORD="$AWS_SECRET_ACCESS_KEY" MINIO_BROWSER=off MINIO_UPDATE=off \
      setsid "$MINIO_BIN" server --quiet --address "${AWS_ENDPOINT_URL#http://}" --console-address "$NODE_IP:$(free_port)" \
      "$DEMO/minio-data" >"$DEMO/minio.log" 2>&1 </dev/null &
    echo $! >"$DEMO/minio.pid"
  fi
  set -a && . "$DEMO/s3.env" && set +a
  wait_http "$AWS_ENDPOINT_URL/minio/health/ready" 60 MinIO
}

start_model() {
  if ! alive "$DEMO/model.pid"; then
    echo "http://$NODE_IP:$(free_port)/v1" >"$DEMO/model.url"
    local url port
    url="$(cat "$DEMO/model.url")" && port="${url##*:}" && port="${port%/v1}"
    log "scripted model on $url"
    setsid .venv/bin/gdpval fake-model --host "$NODE_IP" --port "$port" >"$DEMO/model.log" 2>&1 </dev/null &
    echo $! >"$DEMO/model.pid"
  fi
  wait_http "$(cat "$DEMO/model.url")/models" 60 "the scripted model"
}

# The stress dataset in the bucket; prints the chosen task ids as a JSON list.
upload_dataset() {
  "$PY" - "$DEMO/dataset" "$BUCKET" <<'PY'
import json, sys
from pathlib import Path
sys.path.insert(0, "tests")
import boto3
from support import stress
root, bucket = Path(sys.argv[1]), sys.argv[2]
if not (root / stress.PARQUET).exists():
    stress.make_stress_dataset(root, "current")
s3 = boto3.client("s3")
if bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
    s3.create_bucket(Bucket=bucket)
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        s3.upload_file(str(path), bucket, f"dataset/{path.relative_to(root).as_posix()}")
by_sector = {}
for row in stress.stress_rows("current"):
    by_sector.setdefault(row["sector"], []).append(row["task_id"])
print(json.dumps([task for tasks in list(by_sector.values())[:6] for task in tasks[:2]]))
PY
}

install_chart() {
  local operator sandbox
  operator="$(cat "$CACHE/images/refs/operator")" sandbox="$(cat "$CACHE/images/refs/sandbox-slim")"
  kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: $NS
  labels: {pod-security.kubernetes.io/enforce: restricted, pod-security.kubernetes.io/enforce-version: latest}
EOF
  kubectl -n "$NS" create secret generic s3-credentials --from-literal=AWS_ACCESS_KEY_ID="$AWS_ACCESS_KEY_ID" \
    --from-literal=AWS_SECRET_ACCESS_KEY="$AWS_SECRET_ACCESS_KEY" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  # CRDs applied by hand (or kept by another release) are handed to this release, as the chart's tests do.
  if kubectl get crd gdpvalruns.gdpval.io >/dev/null 2>&1 || kubectl get crd gdpvalpools.gdpval.io >/dev/null 2>&1; then
    kubectl apply --server-side --force-conflicts -f crds/ >/dev/null
    for crd in gdpvalruns.gdpval.io gdpvalpools.gdpval.io; do
      kubectl label crd "$crd" --overwrite app.kubernetes.io/managed-by=Helm >/dev/null
      kubectl annotate crd "$crd" --overwrite meta.helm.sh/release-name="$RELEASE" meta.helm.sh/release-namespace="$NS" >/dev/null
    done
  fi
  log "helm install $RELEASE (operator $operator, sandbox $sandbox)"
  helm upgrade --install "$RELEASE" charts/gdpval --namespace "$NS" --wait --timeout 5m \
    --set image.repository="${operator%:*}" --set image.tag="${operator##*:}" --set image.pullPolicy=Never \
    --set sandboxImage.repository="${sandbox%:*}" --set sandboxImage.tag="${sandbox##*:}" >/dev/null
}

apply_run() {
  kubectl -n "$NS" delete gdpvalrun "$RUN" --ignore-not-found --wait --timeout=120s >/dev/null
  kubectl apply -f - >/dev/null <<EOF
apiVersion: gdpval.io/v1alpha1
kind: GdpvalRun
metadata: {name: $RUN, namespace: $NS}
spec:
  model: {name: scripted, baseURL: "$(cat "$DEMO/model.url")"}
  dataset: {id: "s3://$BUCKET/dataset"}
  selection: {taskIds: $1}
  output: {url: "s3://$BUCKET/out", endpoint: "$AWS_ENDPOINT_URL", region: us-east-1, credentialsSecret: {name: s3-credentials}}
  images: {pullPolicy: Never}
  parallelism: 4
  agent: {sampleDeadlineSeconds: 900}
EOF
}

# Copy the run's folder here, so the report opens with its transcript and deliverable links.
fetch_run() {
  "$PY" - "$1" "$OUT" <<'PY'
import sys
from pathlib import Path
from gdpval.storage import open_storage
uri, dest = sys.argv[1], Path(sys.argv[2])
root, run = uri.rsplit("/runs/", 1)
storage = open_storage(root)
for key in storage.list(f"runs/{run}"):
    storage.get_file(key, dest / key)
PY
}

up() {
  hack/setup.sh --test
  hack/cluster.sh up
  hack/images.sh
  mkdir -p "$DEMO"
  start_minio
  start_model
  local tasks
  tasks="$(upload_dataset)"
  install_chart
  apply_run "$tasks"
  log "GdpvalRun $NS/$RUN applied: 12 tasks; following it (Ctrl-C stops following, not the run)"
  .venv/bin/gdpval status --gdpvalrun "$RUN" --namespace "$NS" --s3-endpoint "$AWS_ENDPOINT_URL" --watch --interval 2
  local state storage submission report
  field() { kubectl -n "$NS" get gdpvalrun "$RUN" -o jsonpath="{.status.$1}"; }
  state="$(field state)" storage="$(field storageURI)" submission="$(field submissionURI)" report="$(field reportURI)"
  rm -rf "$OUT" && fetch_run "$storage"
  echo
  echo "GdpvalRun $NS/$RUN: $state"
  echo "submission: $submission"
  echo "report:     $report"
  echo "a copy of the run's folder: $OUT/${storage#*/out/}  (open report.html there in a browser)"
  echo "S3: endpoint $AWS_ENDPOINT_URL, credentials in $DEMO/s3.env; remove everything with: make cluster-demo-down"
  [[ "$state" == Succeeded ]]
}

down() {
  if [[ -f "$KUBECONFIG" ]] && kubectl get namespace "$NS" >/dev/null 2>&1; then
    kubectl -n "$NS" delete gdpvalruns --all --wait --timeout=120s >/dev/null || true
    helm uninstall "$RELEASE" --namespace "$NS" --ignore-not-found --wait >/dev/null || true
    kubectl delete namespace "$NS" --wait --timeout=120s >/dev/null || true
  fi
  for name in model minio; do
    if alive "$DEMO/$name.pid"; then
      kill "$(cat "$DEMO/$name.pid")"
      log "stopped the demo's $name (pid $(cat "$DEMO/$name.pid"))"
    fi
  done
  rm -rf "$DEMO"
  log "cluster demo removed (the cluster stays up; make cluster-down stops it)"
}

case "${1:-up}" in
  up) up ;;
  down) down ;;
  *) die "usage: $0 [up|down]" ;;
esac
