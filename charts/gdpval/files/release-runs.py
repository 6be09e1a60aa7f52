"""Uninstall hook of the gdpval chart: leave no GdpvalRun stuck on the operator's finalizer.

Runs in the operator image (it has the `kubernetes` client). Steps, each safe to repeat:
1. scale the operator Deployment to 0 and wait for its pods to go, so nothing re-adds a finalizer;
2. optionally delete every GdpvalRun in the watched namespaces (children follow by ownerReference);
3. remove the operator's finalizers from every GdpvalRun, deleting or not.

Configuration comes from the environment the hook Job sets.
"""

from __future__ import annotations

import os
import sys
import time

from kubernetes import client, config
from kubernetes.client.rest import ApiException

GROUP, VERSION, PLURAL = "gdpval.io", "v1alpha1", "gdpvalruns"


def log(message: str) -> None:
    print(message, flush=True)


def stop_operator(namespace: str, deployment: str, selector: str, timeout: float) -> None:
    apps, core = client.AppsV1Api(), client.CoreV1Api()
    try:
        apps.patch_namespaced_deployment_scale(deployment, namespace, {"spec": {"replicas": 0}})
        log(f"scaled deployment/{deployment} to 0")
    except ApiException as exc:
        if exc.status != 404:
            raise
        log(f"deployment/{deployment} is already gone")
    deadline = time.monotonic() + timeout
    while True:
        pods = core.list_namespaced_pod(namespace, label_selector=selector).items
        if not pods:
            return
        if time.monotonic() > deadline:
            # Finalizers are released anyway: a late operator pod at worst re-adds one, which the
            # next uninstall (or the README's one-line patch) clears.
            log(f"warning: {len(pods)} operator pod(s) still present after {timeout:.0f}s")
            return
        time.sleep(2)


def list_runs(api: client.CustomObjectsApi, namespaces: list[str]) -> list[dict]:
    try:
        if not namespaces:
            return api.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
        runs = []
        for ns in namespaces:
            runs += api.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"]
        return runs
    except ApiException as exc:
        if exc.status == 404:
            log("the GdpvalRun CRD is not installed: nothing to release")
            return []
        raise


def release(api: client.CustomObjectsApi, run: dict, finalizers: set[str], delete: bool) -> None:
    ns, name = run["metadata"]["namespace"], run["metadata"]["name"]
    if delete and not run["metadata"].get("deletionTimestamp"):
        api.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name, propagation_policy="Background")
        log(f"deleted gdpvalrun {ns}/{name}")
    for _ in range(5):
        current = run["metadata"].get("finalizers") or []
        keep = [f for f in current if f not in finalizers]
        if keep == current:
            return
        # resourceVersion makes the patch conditional: a concurrent writer gets a 409 and a retry.
        patch = {"metadata": {"finalizers": keep, "resourceVersion": run["metadata"]["resourceVersion"]}}
        try:
            api.patch_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name, patch)
            log(f"released gdpvalrun {ns}/{name}")
            return
        except ApiException as exc:
            if exc.status == 404:
                return
            if exc.status != 409:
                raise
        run = api.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
    raise RuntimeError(f"could not release gdpvalrun {ns}/{name}: kept conflicting")


def main() -> int:
    config.load_incluster_config()
    env = os.environ
    namespaces = env.get("WATCH_NAMESPACES", "").split()
    finalizers = set(env.get("FINALIZERS", "").split())
    delete = env.get("DELETE_RUNS", "false") == "true"
    stop_operator(env["RELEASE_NAMESPACE"], env["OPERATOR_DEPLOYMENT"], env["OPERATOR_SELECTOR"], float(env.get("STOP_TIMEOUT", "120")))
    api = client.CustomObjectsApi()
    runs = list_runs(api, namespaces)
    for run in runs:
        release(api, run, finalizers, delete)
    scope = " ".join(namespaces) or "all namespaces"
    log(f"done: {len(runs)} gdpvalrun(s) in {scope}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
