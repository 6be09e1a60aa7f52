"""The `gdpval` command line: thin commands over the runner, storage and submission modules."""

from __future__ import annotations

import inspect
import json
import logging
import os
import re
import sys
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional, cast, get_args

import typer
from pydantic import ValidationError

from gdpval import contract
from gdpval.controller.effects.entry import operator_command
from gdpval.errors import GdpvalError
from gdpval.judge.command import judge_command
from gdpval.sandbox.runtime_cli import runtime_app
from gdpval.settings import FlagSpec, Path_, flag_specs

if TYPE_CHECKING:
    from rich.console import Console

    from gdpval.storage import Storage

# Click's own help layout (rich_markup_mode=None): it wraps long flag names instead of cutting them
# at 80 columns, as rich's panels did ("--missing-referen…").
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="Run OpenAI's GDPval benchmark and build a submission.",
)
submission_app = typer.Typer(no_args_is_help=True, help="Build or inspect a submission package.")
app.add_typer(submission_app, name="submission")
app.add_typer(runtime_app, name="runtime")


@cache
def err() -> Console:
    """The stderr console, made on first use: the in-pod commands (stage, sample) never print with rich."""
    from rich.console import Console

    return Console(stderr=True)


DEFAULT_CACHE = Path.home() / ".cache" / "gdpval"

Output = Annotated[str, typer.Option("--output", "-o", help="Local folder or s3://bucket/prefix.")]
RunName = Annotated[str, typer.Option("--run-name", help="Name of the run.")]
CacheDir = Annotated[Path, typer.Option(help="Where dataset files are cached.")]


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:40] or "run"


def _option(spec: FlagSpec) -> inspect.Parameter:
    kind: Any = list.__class_getitem__(spec.kind) if spec.multiple else spec.kind
    if spec.default is None:
        kind = Optional[kind]
    option = typer.Option(*spec.names, help=spec.help, show_default=spec.default is not None)
    return inspect.Parameter(spec.param, inspect.Parameter.KEYWORD_ONLY, default=spec.default, annotation=Annotated[kind, option])


def settings_options(command):
    """Give a command one option per run setting (declared once, in gdpval.settings) and a typer.Context.

    The options reach the command through **options; `given_settings` keeps those the user typed.
    """
    own = [p for p in inspect.signature(command, eval_str=True).parameters.values() if p.kind is not p.VAR_KEYWORD]
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own] + [_option(spec) for spec in flag_specs()]
    command.__signature__ = inspect.Signature(params)
    command.__annotations__ = {p.name: p.annotation for p in params}
    return command


def given_settings(ctx: typer.Context, options: dict[str, Any]) -> dict[Path_, Any]:
    """The settings given on the command line or by environment (defaults are not "given")."""
    given: dict[Path_, Any] = {}
    for spec in flag_specs():
        source = ctx.get_parameter_source(spec.param)
        if source is None or source.name in ("DEFAULT", "DEFAULT_MAP"):  # by name: typer may bundle its own click
            continue
        value = options[spec.param]
        if spec.json:
            value = _json_object(value, spec.flag)
        elif spec.text_file and isinstance(value, str) and value.startswith("@"):
            value = _read_text(value[1:], spec.flag)
        given[spec.path] = value
    return given


def _read_text(path: str, flag: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise GdpvalError(f"{flag} @{path}: cannot read the file ({exc.__class__.__name__}: {exc})") from None


def _json_object(text: str | None, flag: str) -> dict[str, Any] | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GdpvalError(f"{flag} is not valid JSON ({exc.msg}); pass an object such as '{{\"top_p\": 0.9}}'") from None
    if not isinstance(value, dict):
        raise GdpvalError(f"{flag} must be a JSON object")
    return value


def _output(given: dict[Path_, Any]):
    """The output storage named by --output and the --s3-* flags (never by a stored run)."""
    from gdpval.settings import OutputSettings, nest
    from gdpval.storage import open_storage

    try:
        output = OutputSettings.model_validate(nest(given).get("output", {}))
    except ValidationError as exc:
        raise GdpvalError(f"output: {exc.errors()[0]['msg']}") from None
    storage = open_storage(output)
    storage.check()
    return storage


@app.command()
@settings_options
def run(
    ctx: typer.Context,
    run_name: Annotated[Optional[str], typer.Option("--run-name", help="Run name (default: from the model name); re-using it resumes.")] = None,
    isolation: Annotated[str, typer.Option(help="Sandbox isolation: auto, bwrap or none.")] = "auto",
    retry_failed: Annotated[bool, typer.Option(help="On resume, also run again samples whose result is a failure.")] = False,
    preflight: Annotated[bool, typer.Option(help="Check the model endpoint before starting.")] = True,
    cache_dir: CacheDir = DEFAULT_CACHE,
    **options: Any,
) -> None:
    """Run GDPval samples in local sandboxes and build the submission.

    The options from --model on are the run settings: pinned when the run starts, except
    --parallelism, --base-url and --stream. Exit status: 0 every sample succeeded, 1 some failed or
    are missing, 2 bad input, 3 some did not finish (run again to resume).
    """
    from rich.console import Console

    from gdpval.agent.client import make_client
    from gdpval.agent.client import preflight as check_endpoint
    from gdpval.fakemodel.model import FakeModelConfig
    from gdpval.runner.local import LocalOptions, LocalRunner, choose_runtime, pending, runtime_notes
    from gdpval.runner.prepare import load_and_plan, save_or_resume
    from gdpval.runner.progress import Progress, Tally
    from gdpval.sandbox.local import Isolation
    from gdpval.storage import layout

    if isolation not in get_args(Isolation):
        raise GdpvalError(f"--isolation must be auto, bwrap or none, not {isolation!r}")
    mode = cast(Isolation, isolation)
    given = given_settings(ctx, options)
    if not run_name and ("model", "name") not in given:
        raise GdpvalError("--model is required (with --run-name alone, an existing run resumes)")
    run_name = run_name or slug(given[("model", "name")])
    storage = _output(given)
    loaded, record, entries = load_and_plan(storage, run_name, given, cache_dir)
    settings = record.settings
    client = make_client(settings.model.base_url)
    if preflight:
        check_endpoint(client, settings.model.name)
    record, system = choose_runtime(record, mode)
    record, entries, _ = save_or_resume(storage, record, entries)
    for note in runtime_notes(record, system, FakeModelConfig.model):
        print(note, file=sys.stderr, flush=True)
    todo = pending(entries, list(storage.list(layout.samples(run_name))), retry_failed, storage, run_name)
    out = Console(soft_wrap=True)
    out.print(f"run {run_name!r}: {len(entries)} samples, {len(entries) - len(todo)} already committed, {len(todo)} to run -> {storage.uri}", highlight=False)
    tally = Tally(total=len(entries), skipped=len(entries) - len(todo))
    try:
        with Progress(tally, out) as progress:
            runner = LocalRunner(storage, record, loaded, client, LocalOptions(settings.parallelism, mode, retry_failed, runtime=system), progress.event)
            runner.run(todo)
    except KeyboardInterrupt:
        err().print("interrupted: committed samples are kept; run the same command again to resume")
        sys.stdout.flush()
        os._exit(130)  # worker threads may sit in model calls; their sandboxes are already stopped
    raise typer.Exit(_finish_run(storage, run_name, out, tally.crashed, runner.budget_stopped()))


def _finish_run(storage: Storage, run_name: str, out: Console, crashed: int, budget_stopped: bool) -> int:
    """Build the submission and the report, print their line and what to do next; the run's exit status."""
    from gdpval.report.cli import report_after_build
    from gdpval.submission.build import build_submission

    _check(storage, run_name, out)
    info = build_submission(storage, run_name)
    report_after_build(storage, run_name, out)
    c = info.counts
    counts = f"samples {c.total}, succeeded {c.succeeded}, failed {c.failed}, missing {c.missing}"
    grading = f", grading_ready {info.grading_ready:.2f}" if info.grading_ready is not None else ""
    out.print(f"submission: {info.uri}  ({counts}; submission_ready {info.submission_ready:.2f}, completed {info.completed:.2f}{grading})", highlight=False)
    code = run_exit_status(c.total, c.succeeded, crashed, budget_stopped)
    if code == contract.EXIT_UNFINISHED and not crashed:
        err().print(f"the run budget stopped the run (exit {code}): the same command with a higher limit runs the rest")
    elif code == contract.EXIT_UNFINISHED:
        err().print(f"{crashed} sample(s) did not finish; re-run the same command to resume them")
    elif code == contract.EXIT_SAMPLES_FAILED:
        err().print(f"{c.total - c.succeeded} of {c.total} sample(s) have no committed success (exit {code}); --retry-failed runs the failed ones again")
        if not c.succeeded:
            err().print(_cause_line(storage, run_name), markup=False, highlight=False, soft_wrap=True)
    return code


def _cause_line(storage: Storage, run_name: str) -> str:
    """When nothing succeeded, the last line says why: the most common cause among the failures."""
    from gdpval.report.records import load_records
    from gdpval.sample import common_cause

    results = list(load_records(storage, run_name, transcripts=False).results.values())
    found = common_cause(results)
    if found is None:
        return "no sample has a committed result"
    n, cause = found
    return f"all {n} failed: {cause}" if n == len(results) else f"{n} of {len(results)} failed with: {cause}"


def run_exit_status(total: int, succeeded: int, crashed: int, budget_stopped: bool = False) -> int:
    """0 when every selected sample has a committed success; else why not (see gdpval.contract).
    Samples the run budget cut or kept from starting are unfinished: a resume with a higher limit runs them."""
    if crashed or budget_stopped:
        return contract.EXIT_UNFINISHED
    return 0 if succeeded == total else contract.EXIT_SAMPLES_FAILED


@app.command()
def prepare(
    run_name: Annotated[str, typer.Option("--run-name", help="Name of the run; re-using it resumes the run.")],
    settings: Annotated[str, typer.Option(envvar=contract.SETTINGS_ENV, help="The run settings as a JSON object (camelCase, as in run.json).")],
    owner: Annotated[Optional[str], typer.Option(help="namespace/name/uid of the GdpvalRun; run.json of another owner is refused.")] = None,
    cache_dir: CacheDir = DEFAULT_CACHE,
) -> None:
    """Pin the dataset, choose samples, mirror references and write the manifest (the prepare Job)."""
    from gdpval.errors import RunConflict
    from gdpval.manifest import RunOwner
    from gdpval.runner.prepare import describe_invalid, load_and_plan, mirror_references, save_or_resume
    from gdpval.settings import RunSettings, leaves

    try:
        parsed = RunSettings.model_validate_json(settings)
    except ValidationError as exc:
        raise GdpvalError(describe_invalid(exc, flags=False)) from None
    try:
        run_owner = RunOwner.parse(owner) if owner else None
    except ValueError:
        raise GdpvalError(f"--owner {owner!r}: use namespace/name/uid") from None
    given = leaves(parsed)
    storage = _output(given)
    try:
        loaded, record, entries = load_and_plan(storage, run_name, given, cache_dir, flags=False, owner=run_owner)
        record, entries, resumed = save_or_resume(storage, record, mirror_references(storage, loaded, entries))
    except RunConflict as exc:
        exc.exit_code = contract.EXIT_RUN_CONFLICT
        raise
    print(json.dumps({"run": record.run_name, "samples": len(entries), "revision": record.dataset.revision, "resumed": resumed}))


@app.command()
def stage(
    run_name: RunName,
    output: Output,
    sample: Annotated[str, typer.Option(help="Sample id from the manifest.")],
    dest: Annotated[Path, typer.Option(help="Folder to lay out as <hash>/<name>.")] = Path(contract.REFERENCES),
) -> None:
    """Copy one sample's reference files from storage (the stage init container)."""
    from gdpval.runner.pod import stage as stage_refs
    from gdpval.storage import open_storage

    staged = stage_refs(open_storage(output), run_name, sample, dest)
    print(json.dumps({"sample": sample, "staged": len(staged)}))


@app.command(name="sample")
def sample_cmd(
    run_name: RunName,
    output: Output,
    sample: Annotated[str, typer.Option(help="Sample id from the manifest.")],
    attempt: Annotated[int, typer.Option(min=1, help="Attempt number.")],
    sandbox: Annotated[str, typer.Option(help="Tool server address.")] = contract.SANDBOX_URL,
    go: Annotated[Path | None, typer.Option(help="A pod started ahead: wait for this file to say go before the first model request.")] = None,
) -> None:
    """Run one sample attempt against the sidecar sandbox and commit it (the agent container)."""
    from gdpval.runner.pod import ModelUnavailable, run_sample
    from gdpval.storage import open_storage

    try:
        result = run_sample(open_storage(output), run_name, sample, attempt, sandbox, go)
    except ModelUnavailable:
        print(f"ModelUnavailable: the model endpoint's outage ended attempt {attempt}; nothing committed, it runs again", file=sys.stderr)
        raise typer.Exit(contract.EXIT_MODEL_UNAVAILABLE) from None
    print(json.dumps({"sample": sample, "attempt": attempt, "status": result.status.value, "error_kind": result.error_kind}))


@app.command(name="pool-sample")
def pool_sample_cmd(
    claim_dir: Annotated[Path, typer.Option(help="The claim folder: the claim, its Secret and the go file.")] = Path(contract.CLAIM_DIR),
    sandbox: Annotated[str, typer.Option(help="Tool server address.")] = contract.SANDBOX_URL,
) -> None:
    """Wait in a GdpvalPool's pod for a run's claim, then run the claimed sample attempt (the pool pod's agent)."""
    from gdpval.runner.pod import ModelUnavailable, run_pooled

    try:
        result = run_pooled(claim_dir, sandbox)
    except ModelUnavailable:
        print("ModelUnavailable: the model endpoint's outage ended the claimed attempt; nothing committed, it runs again", file=sys.stderr)
        raise typer.Exit(contract.EXIT_MODEL_UNAVAILABLE) from None
    print(json.dumps({"sample": result.sample_id, "status": result.status.value, "error_kind": result.error_kind}))


def _check(storage, run_name: str, console: Console):
    """Grading readiness of the run's deliverables (runs/<run>/check.json); each sample with a problem is printed."""
    from gdpval.records import load_record
    from gdpval.render.check import TEXT_ONLY, check_run

    def show(sample) -> None:
        if sample.problems or sample.fonts_substituted:
            fonts = [f"fonts substituted: {', '.join(sample.fonts_substituted)}"] if sample.fonts_substituted else []
            console.print(f"check {sample.task_id} {sample.sample_id}: {'; '.join(sample.problems + fonts)}", highlight=False, markup=False)

    results = check_run(storage, run_name, show)
    ready = sum(s.grading_ready for s in results.samples)
    console.print(
        f"check: {ready} of {len(results.samples)} samples grading-ready ({results.grading_ready:.2f}), rendered by {results.renderer}", highlight=False
    )
    if results.text_only:
        console.print(f"check: TEXT ONLY: {TEXT_ONLY}", highlight=False, markup=False)
    hint = host_runtime_hint(load_record(storage, run_name).runtime, sum(bool(s.missing_types) for s in results.samples))
    if hint:
        console.print(f"check: {hint}", highlight=False, markup=False)
    return results


def host_runtime_hint(runtime: str | None, missing: int) -> str | None:
    """One line for a run whose samples ran on the host's Python and so often lacked the libraries that make office files."""
    from gdpval.sandbox.runtime import HOST

    if runtime != HOST or not missing:
        return None
    return (
        f"{missing} sample(s) lack a file type their prompt asks for, and they ran in the host runtime, whose Python may have no "
        "openpyxl, python-docx, python-pptx or reportlab: `gdpval runtime build` makes the full runtime (the pods' image); run again with a new --run-name"
    )


@app.command()
def check(run_name: RunName, output: Output) -> None:
    """Grading readiness, no model call: each deliverable opened in the runtime (pages, sheets, slides), empty files,
    file types the prompt asks for and that are missing, substituted fonts; writes runs/<run>/check.json."""
    from gdpval.storage import layout, open_storage

    storage = open_storage(output)
    results = _check(storage, run_name, err())
    ready = sum(s.grading_ready for s in results.samples)
    print(
        json.dumps(
            {"check": storage.url(layout.check_results(run_name)), "samples": len(results.samples), "grading_ready": results.grading_ready, "ready": ready}
        )
    )


@submission_app.command("build")
def submission_build(
    run_name: RunName,
    output: Output,
    report: Annotated[bool, typer.Option(help="Also write the run's HTML report beside it (runs/<run>/report.html).")] = True,
    check: Annotated[bool, typer.Option(help="First check grading readiness (`gdpval check`), for grading_ready in submission_info.json.")] = True,
) -> None:
    """Assemble the submission package from committed results (the final Job)."""
    from gdpval.report.cli import report_after_build
    from gdpval.storage import open_storage
    from gdpval.submission.build import build_submission

    storage = open_storage(output)
    if check:
        _check(storage, run_name, err())
    info = build_submission(storage, run_name)
    if report:
        report_after_build(storage, run_name, err())
    print(info.model_dump_json())


@app.command()
def report(
    run_name: RunName,
    output: Output,
    compare: Annotated[Optional[list[str]], typer.Option(help="Another run in the same output to compare with (repeatable).")] = None,
    price_in: Annotated[Optional[float], typer.Option(min=0, help="Price per million input tokens, for an estimated cost.")] = None,
    price_out: Annotated[Optional[float], typer.Option(min=0, help="Price per million output tokens, for an estimated cost.")] = None,
) -> None:
    """Write one self-contained HTML report beside the run (runs/<run>/report.html)."""
    from gdpval.report.cli import report_command

    print(report_command(output, run_name, compare or [], price_in, price_out))


@app.command()
def status(
    output: Annotated[Optional[str], typer.Option("--output", "-o", help="The run's output: a local folder or s3://bucket/prefix.")] = None,
    run_name: Annotated[Optional[str], typer.Option("--run-name", help="The run, with --output.")] = None,
    gdpvalrun: Annotated[Optional[str], typer.Option(help="A GdpvalRun in the cluster of the current kubeconfig (instead of --output).")] = None,
    namespace: Annotated[str, typer.Option("--namespace", "-n", help="The GdpvalRun's namespace.")] = "default",
    s3_endpoint: Annotated[Optional[str], typer.Option(help="S3-compatible endpoint URL for the run's folder.")] = None,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Refresh until the run has finished.")] = False,
    interval: Annotated[float, typer.Option(min=0.2, help="Seconds between refreshes with --watch.")] = 5.0,
) -> None:
    """Where a run stands: done/total, running, failed, tokens, ETA, progress per sector, the latest failures."""
    from gdpval.report.cli import status_command

    status_command(output, run_name, gdpvalrun, namespace, s3_endpoint, interval, not watch)


@app.command("fake-model")
def fake_model(
    port: Annotated[int, typer.Option(help="Port to listen on (0 picks one).")] = 8000,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    model: Annotated[str, typer.Option(help="Model name to serve.")] = "scripted",
    api_key: Annotated[Optional[str], typer.Option(envvar="FAKE_MODEL_API_KEY", help="Require this bearer key.")] = None,
    fault: Annotated[Optional[list[str]], typer.Option(help="Inject a fault: KIND=RATE, e.g. 429=0.2 (repeatable).")] = None,
    seed: Annotated[int, typer.Option(help="Seed for fault decisions.")] = 0,
    latency: Annotated[float, typer.Option(help="Seconds added to every response.")] = 0.0,
    hold_after: Annotated[Optional[int], typer.Option(help="Hold chat replies after the first N, until POST /fake/release.")] = None,
    fault_repeats: Annotated[int, typer.Option(min=1, help="Times one request gets its fault before a retry of it passes.")] = 1,
    judge_prefers: Annotated[
        str,
        typer.Option(
            help="Pairwise judge requests: first, second, content (a hash of each set), text:TEXT or not-text:TEXT (the set containing or lacking TEXT)."
        ),
    ] = "content",
    dialect: Annotated[Optional[list[str]], typer.Option(help="Speak a dialect of real servers, e.g. stream-only (repeatable; see README).")] = None,
    retry_after: Annotated[float, typer.Option(min=0, help="Seconds of Retry-After on an injected 429.")] = 1.0,
    outage: Annotated[Optional[str], typer.Option(help="AFTER:SECONDS: after AFTER chat requests, answer every model request 503 for SECONDS.")] = None,
    max_concurrent: Annotated[Optional[int], typer.Option(min=1, help="Answer 429 to a chat request arriving while N others are in flight.")] = None,
    make_files: Annotated[
        bool, typer.Option("--make-files", help="Also make a file of each type a prompt asks for (xlsx with a formula, docx, pptx, pdf, ...): the demo.")
    ] = False,
) -> None:
    """Serve a scripted OpenAI-compatible model that drives the real tools, for smoke tests."""
    from gdpval.fakemodel.dialects import validate
    from gdpval.fakemodel.judge import check_preference
    from gdpval.fakemodel.server import serve

    try:
        check_preference(judge_prefers)
    except ValueError as exc:
        raise GdpvalError(f"--judge-prefers: {exc}") from None
    try:
        spoken = validate(dialect or [])
    except ValueError as exc:
        raise GdpvalError(f"--dialect: {exc}") from None
    faults = _fault_rates(fault or [])
    outage_after, outage_seconds = _outage(outage)
    serve(
        host,
        port,
        model=model,
        api_key=api_key,
        faults=faults,
        seed=seed,
        latency=latency,
        hold_after=hold_after,
        fault_repeats=fault_repeats,
        judge_prefers=judge_prefers,
        dialects=spoken,
        retry_after=retry_after,
        outage_after=outage_after,
        outage_seconds=outage_seconds,
        max_concurrent=max_concurrent,
        make_files=make_files,
    )


def _fault_rates(items: list[str]) -> dict[str, float]:
    """--fault KIND=RATE, repeatable; a bare KIND always fails."""
    faults = {}
    for item in items:
        kind, sep, rate = item.partition("=")
        try:
            faults[kind] = float(rate) if sep else 1.0
        except ValueError:
            raise GdpvalError(f"--fault {item!r}: use KIND=RATE with RATE between 0 and 1") from None
    return faults


def _outage(outage: str | None) -> tuple[int | None, float]:
    """--outage AFTER:SECONDS as (chat requests before it, its length); (None, 0) without one."""
    if not outage:
        return None, 0.0
    after, _, seconds = outage.partition(":")
    try:
        return int(after), float(seconds)
    except ValueError:
        raise GdpvalError(f"--outage {outage!r}: use AFTER:SECONDS, e.g. 100:600") from None


app.command("operator")(operator_command)
app.command("judge")(judge_command)


@app.command()
def crd() -> None:
    """Print the GdpvalRun and GdpvalPool CustomResourceDefinitions (generated from the typed models)."""
    from gdpval.api.crd import render_all

    sys.stdout.write(render_all())


def main() -> None:
    os.environ.setdefault("TQDM_DISABLE", "1")  # modelscope draws a bar per file; ours is the progress
    logging.basicConfig(level=logging.WARNING, format="gdpval: %(levelname)s: %(message)s")
    try:
        app()
    except GdpvalError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        # Skip interpreter teardown: pyarrow's C++ thread pool can abort the process while it
        # unwinds (seen as SIGABRT instead of exit 2), and nothing is left to clean up here.
        os._exit(exc.exit_code)
