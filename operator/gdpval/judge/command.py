"""`gdpval judge`: a thin command over judge.run (imports stay lazy, so `gdpval --help` stays quick)."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Optional

import typer
from pydantic import ValidationError

from gdpval.contract import EXIT_JUDGE_UNRELIABLE as EXIT_UNRELIABLE
from gdpval.errors import GdpvalError
from gdpval.judge.usage import Prices
from gdpval.judge.verdicts import headline
from gdpval.judge.workdir import remove_own_on_sigterm
from gdpval.settings import DEFAULT_JUDGE_METHOD, MAX_INCONSISTENT, JudgeSettings, OutputSettings

KEY_ENV = "OPENAI_API_KEY"
DEFAULT_CACHE = Path.home() / ".cache" / "gdpval"
FLAGS = {"model": "--judge-model", "base_url": "--judge-base-url", "concurrency": "--concurrency", "tries": "--tries", "method": "--method"}


class Method(StrEnum):
    rubric = "rubric"
    pairwise = "pairwise"
    both = "both"


DEFAULT_METHOD = Method(DEFAULT_JUDGE_METHOD)


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
    method: Annotated[Method, typer.Option(help=_help("method"))] = DEFAULT_METHOD,
    against: Annotated[
        Optional[str], typer.Option(help="Pairwise against this run's deliverables (same storage) instead of the gold, on the common samples.")
    ] = None,
    only_failed: Annotated[bool, typer.Option(help="Pairwise: judge again only the pairs whose judging failed.")] = False,
    price_prompt: Annotated[Optional[float], typer.Option(min=0, help="Judge price per million prompt tokens, for the judge's cost.")] = None,
    price_completion: Annotated[Optional[float], typer.Option(min=0, help="Judge price per million completion tokens.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap interval (the same seed gives the same interval).")] = 0,
    best_of_n: Annotated[
        bool,
        typer.Option(
            "--best-of-n",
            help="Pairwise: also write a best-of-N package (runs/<run>/submission-best-of-n/): per task, the repeat the judge preferred; "
            "labelled as such, beside the per-repeat packages.",
        ),
    ] = False,
    cache_dir: Annotated[Path, typer.Option(help="Where the run's dataset is cached when a reference or gold file must come from it.")] = DEFAULT_CACHE,
    max_inconsistency: Annotated[
        float,
        typer.Option(min=0, max=1, help=_help("max_inconsistency")),
    ] = MAX_INCONSISTENT,
    require_consistency: Annotated[
        bool, typer.Option("--require-consistency", help=f"Pairwise: exit {EXIT_UNRELIABLE} when the estimate is labelled unreliable (position-biased).")
    ] = False,
) -> None:
    """Judge a run's deliverables with a judge model (rubric points, or wins-or-ties against the gold): a LOCAL ESTIMATE, not the official GDPval grade."""
    from gdpval.agent.client import PLACEHOLDER_KEY, make_client
    from gdpval.agent.client import preflight as check_endpoint
    from gdpval.judge.request import JudgeOptions

    remove_own_on_sigterm()
    pair = PairSettings.of(method, against, only_failed, seed, best_of_n, max_inconsistency)
    settings = _settings(judge_model, judge_base_url, concurrency, tries, method)
    key = _key(judge_api_key_env)
    storage = _storage(output, s3_endpoint, s3_region)
    client = make_client(judge_base_url, key or PLACEHOLDER_KEY, key_source=judge_api_key_env)
    if preflight:
        check_endpoint(client, settings.model)
    prices = _prices(price_prompt, price_completion)
    options = JudgeOptions(model=settings.model, concurrency=settings.concurrency, tries=settings.tries, cache_dir=cache_dir, prices=prices)
    summary: dict = {"run": run_name}
    if method is not Method.pairwise:
        summary |= _rubric(storage, run_name, client, options)
    if method is not Method.rubric:
        summary["pairwise"] = _pairwise(storage, run_name, client, options, pair)
    print(json.dumps(summary))
    _exit_unless_consistent(summary, require_consistency)


def _prices(prompt: float | None, completion: float | None) -> Prices | None:
    if (prompt is None) != (completion is None):
        raise GdpvalError("--price-prompt and --price-completion go together: give both, or neither")
    return Prices(prompt, completion) if prompt is not None and completion is not None else None


def _exit_unless_consistent(summary: dict, required: bool) -> None:
    """--require-consistency: a position-biased pairwise estimate fails the command, after its figures are written."""
    reliability = summary.get("pairwise", {}).get("reliability")
    if required and reliability:
        print(f"--require-consistency: the pairwise estimate is {reliability} (exit {EXIT_UNRELIABLE})", file=sys.stderr)
        raise typer.Exit(EXIT_UNRELIABLE)


def _settings(model: str, base_url: str, concurrency: int, tries: int, method: Method) -> JudgeSettings:
    """The flags as the judge's settings, an invalid one named by its flag."""
    try:
        return JudgeSettings(model=model, base_url=base_url, concurrency=concurrency, tries=tries, method=method.value)
    except ValidationError as exc:
        problem = exc.errors()[0]
        raise GdpvalError(f"{FLAGS.get(str(problem['loc'][0]), 'judge settings')}: {problem['msg']}") from None


def _key(env: str) -> str | None:
    """The judge's API key from the variable named; a key given in place of the name is refused, never echoed."""
    if not env.isidentifier():
        raise GdpvalError(f"--judge-api-key-env {env!r} must be the name of an environment variable, not a key")
    key = os.environ.get(env)
    if key is None and env != KEY_ENV:
        raise GdpvalError(f"--judge-api-key-env {env}: that environment variable is not set; set it to the judge's API key")
    return key


def _storage(output: str, endpoint: str | None, region: str | None):
    from gdpval.storage import open_storage

    return open_storage(_where(output, endpoint, region))


def _where(output: str, endpoint: str | None, region: str | None) -> OutputSettings:
    try:
        return OutputSettings(url=output, endpoint=endpoint, region=region)
    except ValidationError as exc:
        raise GdpvalError(f"--output/--s3-*: {exc.errors()[0]['msg']}") from None


def _rubric(storage, run_name: str, client, options) -> dict:
    from gdpval.judge.run import judge_run

    def line(score, cached: bool) -> None:
        shown = f"{score.points:g}/{score.max_points:g}" if score.counted else score.error
        print(f"{score.sample_id}: {score.status}{' (cached)' if cached else ''} {shown}", file=sys.stderr, flush=True)

    judged = judge_run(storage, run_name, client, options, line)
    overall, usage = judged.results.overall, judged.results.usage
    estimate = f"{overall.score:.1%}" if overall.score is not None else "none"
    print(
        f"judge {options.model!r}: {overall.samples} samples ({overall.scored} scored, {overall.no_deliverable} without deliverable, "
        f"{overall.failed} judge failures, {judged.cached} from cache); {estimate} = {overall.points:g}/{overall.max_points:g} points; "
        f"{spend(usage)}. A {judged.results.label}. Results: {judged.uri}",
        file=sys.stderr,
    )
    return {"label": judged.results.label, "results": judged.uri, "cached": judged.cached, **overall.model_dump(), "usage": usage.model_dump()}


def spend(usage) -> str:
    """The judge's calls, tokens and cost in one phrase (apart from the agent's spend)."""
    cost = f", cost {usage.cost:.4f}" if usage.cost is not None else ""
    return f"judge calls {usage.calls} (+{usage.cached_calls} cached), tokens {usage.prompt_tokens}+{usage.completion_tokens}{cost}"


@dataclass(frozen=True)
class PairSettings:
    """The pairwise flags of `gdpval judge`."""

    against: str | None
    only_failed: bool
    seed: int
    best_of_n: bool
    max_inconsistent: float

    @classmethod
    def of(cls, method: Method, against: str | None, only_failed: bool, seed: int, best_of_n: bool, max_inconsistent: float) -> PairSettings:
        if (against or only_failed or best_of_n) and method is Method.rubric:
            raise GdpvalError("--against, --only-failed and --best-of-n are for pairwise judging: add --method pairwise")
        return cls(against, only_failed, seed, best_of_n, max_inconsistent)


def _pairwise(storage, run_name: str, client, options, flags: PairSettings) -> dict:
    from gdpval.judge.inputs import Inputs
    from gdpval.judge.pairwise import PairOptions, judge_pairs
    from gdpval.records import load_record

    def line(score, reused: bool) -> None:
        flags = "".join(f" ({f})" for f, on in (("reused", reused), ("inconsistent", score.inconsistent), ("no deliverable", score.no_deliverable)) if on)
        print(f"{score.sample_id}: {score.verdict}{flags}{' ' + score.error if score.verdict == 'failed' else ''}", file=sys.stderr, flush=True)

    pair_options = PairOptions(options, flags.against, flags.only_failed, flags.seed, flags.max_inconsistent)
    inputs = Inputs(storage, load_record(storage, run_name), options.cache_dir)
    judged = judge_pairs(storage, run_name, client, pair_options, inputs, line)
    overall, usage = judged.results.overall, judged.results.usage
    print(
        f"pairwise {options.model!r} against {pair_options.against}: {headline(overall, flags.max_inconsistent)}; {overall.wins} wins, {overall.ties} ties "
        f"({overall.inconsistent} inconsistent), {overall.losses} losses ({overall.no_deliverable} without deliverable), {overall.failed} failed "
        f"(left out); {spend(usage)}. "
        f"A {judged.results.label}. Results: {judged.uri}",
        file=sys.stderr,
    )
    for line_ in agreement_lines(judged.results.agreement):
        print(line_, file=sys.stderr)
    summary = {"label": judged.results.label, "results": judged.uri, "reused": judged.reused, **overall.model_dump(), "usage": usage.model_dump()}
    summary["agreement"] = [a.model_dump() | {"rate": a.rate} for a in judged.results.agreement]
    if flags.best_of_n:
        summary["best_of_n"] = _best_of_n(storage, run_name, judged.results)
    return summary


def agreement_lines(agreements) -> list[str]:
    """One line per other judge model of the run: how often its verdict was this one's, beside the paper's figures."""
    from gdpval.judge.verdicts import PAPER_AGREEMENT

    paper = ", ".join(f"{who} {rate:.0%}" for who, rate in PAPER_AGREEMENT.items())
    return [
        f"agreement with judge {a.judge_model!r}: {a.agreed} of {a.pairs} pairs judged by both"
        + (f" ({a.rate:.0%})" if a.rate is not None else "")
        + f"; the GDPval paper reports {paper}"
        for a in agreements
    ]


def _best_of_n(storage, run_name: str, results) -> str:
    """Build the best-of-N package from the judge's choice among each task's repeats; its URI."""
    from gdpval.judge.verdicts import best_of_n
    from gdpval.storage import layout
    from gdpval.submission.build import build_best_of_n

    best = {task: score.sample_id for task, score in best_of_n(results.samples).items()}
    info = build_best_of_n(storage, run_name, best, results.judge_model, results.against, results.overall.reliability)
    uri = storage.url(layout.best_of_n_package(run_name))
    print(f"best-of-{info.repeats} package ({info.counts.ready} of {info.counts.total} tasks ready): {uri}", file=sys.stderr)
    return uri
