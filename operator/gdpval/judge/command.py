"""`gdpval judge`: a thin command over judge.run (imports stay lazy, so `gdpval --help` stays quick)."""

from __future__ import annotations

import json
import os
import sys
from typing import Annotated, Optional

import typer
from pydantic import ValidationError

from gdpval.errors import GdpvalError
from gdpval.settings import JudgeSettings, OutputSettings

KEY_ENV = "OPENAI_API_KEY"
FLAGS = {"model": "--judge-model", "base_url": "--judge-base-url", "concurrency": "--concurrency", "tries": "--tries"}


def _help(field: str) -> str:
    """A flag's help is its setting's description (the same text as the GdpvalRun's spec.judge)."""
    return JudgeSettings.model_fields[field].description or ""


def judge_command(
    output: Annotated[str, typer.Option("--output", "-o", help="Local folder or s3://bucket/prefix holding the run.")],
    run_name: Annotated[str, typer.Option("--run-name", help="The run to judge; judging it again resumes (judged samples are kept).")],
    judge_model: Annotated[str, typer.Option("--judge-model", help=_help("model"))],
    judge_base_url: Annotated[str, typer.Option("--judge-base-url", help=_help("base_url"))],
    judge_api_key_env: Annotated[
        str, typer.Option(help="Name of the environment variable holding the judge's API key (the key itself is never an option).")
    ] = KEY_ENV,
    concurrency: Annotated[int, typer.Option(help=_help("concurrency"))] = 4,
    tries: Annotated[int, typer.Option(help=_help("tries"))] = 3,
    preflight: Annotated[bool, typer.Option(help="Check the judge endpoint before starting.")] = True,
    s3_endpoint: Annotated[Optional[str], typer.Option("--s3-endpoint", help=OutputSettings.model_fields["endpoint"].description)] = None,
    s3_region: Annotated[Optional[str], typer.Option("--s3-region", help=OutputSettings.model_fields["region"].description)] = None,
) -> None:
    """Score a run's deliverables against each task's rubric with a judge model: a LOCAL ESTIMATE, not the official GDPval grade."""
    from gdpval.agent.client import PLACEHOLDER_KEY, make_client
    from gdpval.agent.client import preflight as check_endpoint
    from gdpval.judge.run import JudgeOptions, judge_run
    from gdpval.storage import open_storage

    try:
        settings = JudgeSettings(model=judge_model, base_url=judge_base_url, concurrency=concurrency, tries=tries)
    except ValidationError as exc:
        problem = exc.errors()[0]
        raise GdpvalError(f"{FLAGS.get(str(problem['loc'][0]), 'judge settings')}: {problem['msg']}") from None
    if not judge_api_key_env.isidentifier():
        raise GdpvalError(f"--judge-api-key-env {judge_api_key_env!r} must be the name of an environment variable, not a key")
    key = os.environ.get(judge_api_key_env)
    if key is None and judge_api_key_env != KEY_ENV:
        raise GdpvalError(f"--judge-api-key-env {judge_api_key_env}: that environment variable is not set; set it to the judge's API key")
    try:
        where = OutputSettings(url=output, endpoint=s3_endpoint, region=s3_region)
    except ValidationError as exc:
        raise GdpvalError(f"--output/--s3-*: {exc.errors()[0]['msg']}") from None
    storage = open_storage(where)
    client = make_client(judge_base_url, key or PLACEHOLDER_KEY, key_source=judge_api_key_env)
    if preflight:
        check_endpoint(client, settings.model)
    options = JudgeOptions(model=settings.model, concurrency=settings.concurrency, tries=settings.tries)

    def line(score, cached: bool) -> None:
        shown = f"{score.points:g}/{score.max_points:g}" if score.counted else score.error
        print(f"{score.sample_id}: {score.status}{' (cached)' if cached else ''} {shown}", file=sys.stderr, flush=True)

    judged = judge_run(storage, run_name, client, options, line)
    overall = judged.results.overall
    estimate = f"{overall.score:.1%}" if overall.score is not None else "none"
    print(
        f"judge {judge_model!r}: {overall.samples} samples ({overall.scored} scored, {overall.no_deliverable} without deliverable, "
        f"{overall.failed} judge failures, {judged.cached} from cache); {estimate} = {overall.points:g}/{overall.max_points:g} points. "
        f"A {judged.results.label}. Results: {judged.uri}",
        file=sys.stderr,
    )
    summary = {"run": run_name, "label": judged.results.label, "results": judged.uri, "cached": judged.cached, **overall.model_dump()}
    print(json.dumps(summary))
