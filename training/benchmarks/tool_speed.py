"""What a large tool registry costs route() (``intent-router bench tools --speed``): LiveMCPBench's tools with
their examples, copied until there are ``n_tools``, spread over the router config's skills, loaded from a
YAML file the first time and from its cache the second, then the same messages routed with and without the
registry, one after the other, so that the two medians come from the same moments of the host.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from router.tools.registry import ToolRegistry, forget_checked_schemas

Reporter = Callable[[str], None]
SKILLS = ("retrieval", "action", "synthesis", "memory", "planner", "graph")


def copies(registry: ToolRegistry, n_tools: int, skills: Sequence[str] = SKILLS) -> ToolRegistry:
    """``n_tools`` tools: ``registry``'s, copied under new names as often as needed, each given one of
    ``skills`` in turn."""
    tools = []
    while len(tools) < n_tools:
        copy = len(tools) // max(len(registry.tools), 1)
        for t in registry.tools[: n_tools - len(tools)]:
            tools.append(
                t.model_copy(update={"name": f"{t.name}#{copy}", "skill": skills[len(tools) % len(skills)]})
            )
    return ToolRegistry(tools=tools)


def tool_speed(
    registry: ToolRegistry, model: str | Path, texts: Sequence[str], rounds: int = 3, report: Reporter = print
) -> dict:
    """Load times of ``registry`` (first, then from the cache) and route() p50 over ``texts`` without it and
    with it, interleaved message by message for ``rounds`` rounds."""
    from router.routing import Router
    from router.tools.stage import ToolStage

    plain = Router.load(model)
    with tempfile.TemporaryDirectory(prefix="tools-") as tmp:
        path = registry.save(Path(tmp) / "tools.yaml")
        loads = []
        forget_checked_schemas()
        for _ in range(2):
            t0 = time.perf_counter()
            stage = ToolStage(ToolRegistry.load(path, cache=True), plain.config)
            loads.append(time.perf_counter() - t0)
    with_tools = Router(plain.classifier, plain.config, tools=stage.registry)
    report(f"{len(registry.tools)} tools: loaded in {loads[0]:.2f} s, from the cache in {loads[1]:.2f} s")
    without, with_, step = [], [], []
    for _ in range(rounds):
        for text in texts:
            t0 = time.perf_counter()
            plain.route(text, role="admin")
            without.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            d = with_tools.route(text, role="admin")
            with_.append(time.perf_counter() - t0)
            step += [s.ms for s in d.trace if s.stage == "tools"]
    p50 = (statistics.median(without) * 1000, statistics.median(with_) * 1000)
    report(f"route() p50 {p50[0]:.3f} ms without, {p50[1]:.3f} ms with them: {p50[1] - p50[0]:+.3f} ms")
    return {
        "tools": len(registry.tools),
        "examples": sum(len(t.examples) for t in registry.tools),
        "load_s": round(loads[0], 3),
        "load_cached_s": round(loads[1], 3),
        "messages": len(texts) * rounds,
        "route_p50_ms_without": round(p50[0], 3),
        "route_p50_ms_with": round(p50[1], 3),
        "added_p50_ms": round(p50[1] - p50[0], 3),
        "tools_stage_p50_ms": round(statistics.median(step), 4) if step else None,
    }
