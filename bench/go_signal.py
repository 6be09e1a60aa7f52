"""How fast an annotation reaches a running pod through a downward-API file (the go of a pod started ahead).

One pod on the local cluster (hack/README.md, never stopped) whose bash reads a downward-API file of its
annotation every 10 ms and prints the time it sees each new value; the bench sets the annotation
`--patches` times with kubectl and compares. Both clocks are the machine's (the node is local). A delay is
from kubectl's return, so a value the pod sees before kubectl exits shows as a small negative figure.

Usage: .venv/bin/python bench/go_signal.py [--patches 20] [--every 1.3] --json
"""

from __future__ import annotations

import argparse
import json
import secrets
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from bench import measure  # noqa: E402

from conftest import ClusterUsers  # noqa: E402
from infra import cluster as local_cluster  # noqa: E402

WATCHER = 'last=; while :; do v=$(</go/value); if [[ "$v" != "$last" ]]; then echo "$EPOCHREALTIME $v"; last=$v; fi; sleep 0.01; done'


def probe_pod(image: str) -> dict:
    item = {"path": "value", "fieldRef": {"fieldPath": "metadata.annotations['go']"}}
    container = {"name": "c", "image": image, "imagePullPolicy": "IfNotPresent", "command": ["bash", "-c", WATCHER]}
    container["volumeMounts"] = [{"name": "go", "mountPath": "/go"}]
    spec = {"terminationGracePeriodSeconds": 0, "automountServiceAccountToken": False, "containers": [container]}
    spec["volumes"] = [{"name": "go", "downwardAPI": {"items": [item]}}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "go-signal", "annotations": {"go": "0"}}, "spec": spec}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--patches", type=int, default=20)
    parser.add_argument("--every", type=float, default=1.3, help="seconds between patches")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    users = ClusterUsers()
    cluster = local_cluster.bring_up(images=False)
    namespace = f"gdpval-bench-go-{secrets.token_hex(3)}"

    def kubectl(*argv: str, stdin: str | None = None) -> str:
        command = [cluster.kubectl_path, "--kubeconfig", str(cluster.kubeconfig), "-n", namespace, *argv]
        return subprocess.run(command, check=True, capture_output=True, text=True, input=stdin).stdout

    try:
        subprocess.run([cluster.kubectl_path, "--kubeconfig", str(cluster.kubeconfig), "create", "namespace", namespace], check=True, capture_output=True)
        kubectl("apply", "-f", "-", stdin=json.dumps(probe_pod(cluster.images["sandbox-slim"])))
        kubectl("wait", "--for=condition=Ready", "pod/go-signal", "--timeout=300s")
        time.sleep(2)
        sent = {}
        for i in range(1, args.patches + 1):
            kubectl("annotate", "--overwrite", "pod/go-signal", f"go={i}")
            sent[str(i)] = time.time()
            time.sleep(args.every)
        time.sleep(3)
        seen = dict(reversed(line.split()) for line in kubectl("logs", "go-signal").splitlines() if len(line.split()) == 2)
    finally:
        subprocess.run([cluster.kubectl_path, "--kubeconfig", str(cluster.kubeconfig), "delete", "namespace", namespace, "--wait=false"], capture_output=True)
        users.release()
    delays = [float(seen[v]) - t for v, t in sent.items() if v in seen]
    report = {
        "patches": len(sent),
        "seen": len(delays),
        "after_kubectl_returned": {
            "p50_s": round(measure.percentile(delays, 50) or 0, 3),
            "p99_s": round(measure.percentile(delays, 99) or 0, 3),
            "max_s": round(max(delays, default=0), 3),
        },
    }
    print(json.dumps(report, indent=2) if args.json else f"{len(delays)}/{len(sent)} seen, p50 {report['after_kubectl_returned']['p50_s']} s")


if __name__ == "__main__":
    main()
