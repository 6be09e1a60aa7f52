"""The `gdpval report` and `gdpval status` commands' work, kept out of cli.py: flags checked, records read, output written."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from gdpval.errors import GdpvalError
from gdpval.report import Prices, write_report
from gdpval.report.records import load_records
from gdpval.report.status import RunStatus, from_cluster, from_records
from gdpval.runner.progress import bar
from gdpval.settings import OutputSettings
from gdpval.storage import Storage, StorageError, open_storage


def prices(price_in: float | None, price_out: float | None) -> Prices | None:
    if (price_in is None) != (price_out is None):
        raise GdpvalError("give both --price-in and --price-out (per million tokens), or neither")
    return None if price_in is None or price_out is None else Prices(input=price_in, output=price_out)


def report_command(output: str, run: str, others: list[str], price_in: float | None, price_out: float | None) -> str:
    given = prices(price_in, price_out)
    if run in others:
        raise GdpvalError(f"--compare {run!r} is the run being reported; name another run")
    return write_report(open_storage(output), run, others, given)


def storage_status(storage: Storage, run: str) -> RunStatus:
    return from_records(load_records(storage, run, transcripts=False), storage.url(f"runs/{run}"), time.time())


def cluster_status(name: str, namespace: str, endpoint: str | None) -> RunStatus:
    """A GdpvalRun's status; its latest failures come from its folder when this machine can read it."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config import ConfigException

    from gdpval.api import v1alpha1 as api
    from gdpval.controller.effects.kube import load_config

    try:
        api_client = load_config()
    except ConfigException as exc:
        raise GdpvalError(f"no cluster to read GdpvalRun {namespace}/{name} from ({exc}): set KUBECONFIG") from None
    try:
        obj = client.CustomObjectsApi(api_client).get_namespaced_custom_object(api.GROUP, api.VERSION, namespace, api.PLURAL, name)
    except ApiException as exc:
        if exc.status == 404:
            raise GdpvalError(f"no GdpvalRun {namespace}/{name}: check the name and --namespace (kubectl get gdpvalruns -A)") from None
        raise GdpvalError(f"reading GdpvalRun {namespace}/{name}: {exc.status} {exc.reason}") from None
    return from_cluster(obj, _folder_status((obj.get("status") or {}).get("storageURI"), endpoint))


def _folder_status(uri: str | None, endpoint: str | None) -> RunStatus | None:
    if not uri or "/runs/" not in uri:
        return None
    root, run = uri.rsplit("/runs/", 1)
    try:
        return storage_status(open_storage(OutputSettings(url=root, endpoint=endpoint)), run)
    except (GdpvalError, StorageError, OSError):
        return None  # no credentials or no route to the bucket here: the cluster's figures still show
    except Exception as exc:  # botocore's errors have no common base worth importing here
        if type(exc).__module__.startswith(("botocore", "boto3")):
            return None
        raise


def _view(status: RunStatus) -> Table:
    return bar(status.done, status.total, "\n".join(status.lines()))


def watch(read: Callable[[], RunStatus], every: float, console: Console, once: bool) -> RunStatus:
    """Print the status; with `once` False, refresh every `every` seconds until the run has finished."""
    status = read()
    if once:
        console.print("\n".join(status.lines()), markup=False, highlight=False)
        return status
    if console.is_terminal:
        with Live(_view(status), console=console, refresh_per_second=2) as live:
            while not status.finished:
                time.sleep(every)
                status = read()
                live.update(_view(status))
        return status
    shown: list[str] = []
    while True:
        lines = status.lines()
        if lines != shown:
            console.print(Text("\n".join(lines)))
            shown = lines
        if status.finished:
            return status
        time.sleep(every)
        status = read()


def status_command(output: str | None, run: str | None, gdpvalrun: str | None, namespace: str, endpoint: str | None, every: float, once: bool) -> RunStatus:
    if bool(gdpvalrun) == bool(output):
        raise GdpvalError("give either --output with --run-name (a local folder or S3 prefix), or --gdpvalrun NAME (a run in the cluster)")
    if output and not run:
        raise GdpvalError("--run-name is required with --output")
    if gdpvalrun:
        read = partial(cluster_status, gdpvalrun, namespace, endpoint)
    else:
        assert output is not None and run is not None
        read = partial(storage_status, open_storage(OutputSettings(url=output, endpoint=endpoint)), run)
    return watch(read, every, Console(soft_wrap=True), once)


def report_after_build(storage: Storage, run: str, console: Console) -> str | None:
    """Write the report after a submission build; the package is what matters, so a report that fails only warns."""
    try:
        uri = write_report(storage, run)
    except Exception as exc:  # any failure: the submission is already written whole
        console.print(f"warning: the report was not written ({type(exc).__name__}: {exc}); run `gdpval report` to retry", markup=False, highlight=False)
        return None
    console.print(f"report: {uri}", markup=False, highlight=False)
    return uri
