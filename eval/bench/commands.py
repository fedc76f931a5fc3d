"""Benchmarks that need no training: the HTTP service under load, log scoring's throughput, and messages
in other languages routed as a service routes them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

from router.console import (
    ModelDir,
    Opt,
    bench_app,
    command,
    console,
    fail,
    say,
    table,
)


@bench_app.command("serve")
@command(extra="serve")
def bench_serve(
    rates: str = Opt("100,200,300,400,500", help="Open-loop requests/s to try."),
    seconds: float = Opt(8.0, help="Seconds per open-loop rate / closed-loop run."),
    sequential: int = Opt(500, help="Requests sent one at a time, each beside an in-process route()."),
    skip_faults: bool = Opt(False, "--skip-faults", help="Skip the 1,000 malformed requests."),
    server_args: str = Opt("", help="Extra `serve` arguments, e.g. --server-args='--ort-threads 2'."),
    data: Path = Opt(Path("data/test.jsonl"), help="JSONL messages to send."),
    reload: Annotated[
        list[Path] | None,
        Opt(help="Model directory to reload to during the first rate (admin reload); repeat for several."),
    ] = None,
) -> dict:
    """Load-test `intent-router serve` on 127.0.0.1 (extra 'serve'): HTTP overhead, open- and closed-loop load, reloads under load, malformed requests."""
    from eval.bench.serve_load import run_bench_serve

    rate_list = [float(x) for x in rates.split(",")]
    reloads = [str(p.resolve()) for p in reload or []]
    result = run_bench_serve(
        rate_list, seconds, sequential, not skip_faults, server_args.split(), data, reloads
    )
    print(json.dumps(result, indent=2))
    return result


@bench_app.command("score")
@command(extra="scale")
def bench_score(
    rows: int = Opt(20_000, help="Synthetic rows to score."),
    ray_workers: int = Opt(2, help="Ray actors for the --ray run; 0: skip the Ray run."),
    skip_local: bool = Opt(False, "--skip-local", help="Skip the local (one process) run."),
    window_rows: int = Opt(10_000, help="Rows per Ray window."),
    data: Path = Opt(Path("data"), help="Corpus folder: its train, dev and test JSONL give the messages."),
) -> dict:
    """Throughput of `intent-router score` on synthetic rows, locally and on a local Ray (extra 'scale')."""
    from eval.bench.score_throughput import run_bench_score

    result = run_bench_score(rows, ray_workers, skip_local, window_rows, data)
    print(json.dumps(result, indent=2))
    return result


@bench_app.command("languages")
@command()
def bench_languages(
    path: Path = Opt(Path("data/blind_languages.jsonl"), help="JSONL with text, label and lang."),
    model: ModelDir = None,
    role: Annotated[str | None, Opt(help="Role to route as (default: the config's first).")] = None,
    out: Path | None = Opt(None, help="Write the results JSON here."),
) -> dict:
    """Messages in languages the model was not trained on: each request should be routed right or carry
    reason unsupported_language, never be called out of scope (eval/bench/languages.py)."""

    from eval.bench.languages import OUTCOMES, run_language_check

    try:
        result = run_language_check(path, model, role)
    except (ValueError, OSError) as e:
        raise fail(str(e), code=2) from None
    rows = [[lang, *(str(c[o]) for o in OUTCOMES)] for lang, c in result["per_language"].items()]
    rows.append(["all", *(str(result["outcomes"][o]) for o in OUTCOMES)])
    table(f"{result['requests']} requests, {result['model_id']}", ["language", *OUTCOMES], rows)
    say(
        f"routed right or unsupported_language: {result['right_or_unsupported']:.1%}; small talk: {result['small_talk']}"
    )
    for m in result["misses"]:
        say(f"  {m['lang']} {m['label']} -> {'+'.join(m['intents']) or 'out of scope'}: {m['text']}")
    if out:
        from eval.reports.report_files import write_json

        console.print(f"wrote {write_json(result, out, ensure_ascii=False)}")
    return result
