"""`intent-router tools import` and `tools search`: the tool registry from the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from router.console import Opt, RouterConfigFile, command, fail, say, tools_app

Registry = Annotated[Path, Opt("--registry", help="Tool registry YAML to write or read.")]


@tools_app.command("import")
@command()
def tools_import(
    spec: Path = typer.Argument(
        ..., help="Tool specs: an MCP tools/list answer, or OpenAI or Anthropic tools."
    ),
    fmt: str = Opt(..., "--format", help="mcp, openai or anthropic."),
    skill: str = Opt(
        ..., help="The router config's skill (the MCP server, the catalogue) the tools belong to."
    ),
    registry: Registry = Path("tools.yaml"),
    config: RouterConfigFile = None,
) -> None:
    """Read tool specs into the registry (created, or extended): each tool under --skill, checked against
    the router config's skills; nothing is written on any error."""
    from router.config import RouterConfig
    from router.strict import StrictLoadError
    from router.tools.importers import import_tools
    from router.tools.registry import ToolRegistry, ToolRegistryError

    try:
        cfg = RouterConfig.load(config)
        tools = import_tools(spec, fmt, skill)
        current = ToolRegistry.load(registry) if registry.exists() else ToolRegistry()
        updated = current.extended(tools, str(spec))
        updated.check_skills(cfg.skills, str(spec))
    except (ToolRegistryError, StrictLoadError, FileNotFoundError) as e:
        raise fail(str(e), code=2) from None
    updated.save(registry)
    say(f"{len(tools)} tools of skill {skill!r} from {spec} -> {registry} ({len(updated.tools)} tools)")


@tools_app.command("search")
@command()
def tools_search(
    queries: list[str] = typer.Argument(..., help="Request(s) to find tools for."),
    registry: Registry = Path("tools.yaml"),
    k: int = Opt(5, min=1, help="Tools per request."),
    config: RouterConfigFile = None,
    encoder: Path | None = Opt(
        None,
        help="A sentence encoder ('intent-router tools encoder') to fuse with BM25; default: the config's "
        "tool_search.encoder.",
    ),
) -> None:
    """The top k tools of the registry for each request, with no intent gating: BM25 over their words, their
    skill's description in the router config and their examples, fused by reciprocal rank with a sentence
    encoder when one is given. One JSON line per request ({query, tools: [{name, skill, score, lexical,
    dense, requires_confirmation, definition}]})."""
    from router.config import RouterConfig
    from router.manifest import ModelError
    from router.strict import StrictLoadError
    from router.tools.registry import CACHE_DIR, ToolRegistry, ToolRegistryError
    from router.tools.stage import search_index

    try:
        reg = ToolRegistry.load(registry, cache=True)
        cfg = RouterConfig.load(config)
        if encoder is not None:
            cfg = cfg.model_copy(
                update={"tool_search": cfg.tool_search.model_copy(update={"encoder": str(encoder)})}
            )
        index = search_index(reg, cfg, registry.parent / CACHE_DIR)
    except (ToolRegistryError, StrictLoadError, FileNotFoundError, ModelError) as e:
        raise fail(str(e), code=2) from None
    defs = reg.by_name()
    for q in queries:
        tools = [{**h.to_dict(), "definition": defs[h.name].definition()} for h in index.search(q, k)]
        print(json.dumps({"query": q, "tools": tools}, ensure_ascii=False))


@tools_app.command("examples")
@command()
def tools_examples(
    pairs: Path = typer.Argument(
        ...,
        help='(request, tool) pairs, JSON Lines: {"text": ..., "tool": ...}, or {"text": ..., "tools": [...]} '
        "for a request that needs several (an example of each).",
    ),
    registry: Registry = Path("tools.yaml"),
) -> None:
    """Add each pair's request to its tool's examples, which tool search reads beside the description;
    every line is checked first, and nothing is written on any error."""
    from router.tools.examples import add_examples, read_pairs
    from router.tools.registry import ToolRegistry, ToolRegistryError

    try:
        current = ToolRegistry.load(registry)
        updated, added = add_examples(current, read_pairs(pairs, current))
    except ToolRegistryError as e:
        raise fail(str(e), code=2) from None
    updated.save(registry)
    with_examples = sum(1 for t in updated.tools if t.examples)
    say(
        f"{added} examples from {pairs} -> {registry} ({with_examples} of {len(updated.tools)} tools have examples)"
    )


@tools_app.command("mcp")
@command()
def tools_mcp(
    registry: Registry = Path("tools.yaml"),
    config: RouterConfigFile = None,
    role: str | None = Opt(None, help="Search only the tools this role of the router config may use."),
    transport: str = Opt("stdio", help="stdio (an agent starts the server) or streamable-http."),
    host: str = Opt("127.0.0.1", help="With streamable-http: the address to listen on."),
    port: int = Opt(8765, help="With streamable-http: the port."),
) -> None:
    """Serve tool search over the Model Context Protocol (extra 'mcp'): one tool, search_tools(query, k),
    returning the definitions of the registry's few tools a request needs."""
    from router.manifest import ModelError
    from router.strict import StrictLoadError
    from router.tools.mcp_server import build_server  # imports the MCP SDK only when it builds the server
    from router.tools.registry import ToolRegistryError

    if transport not in ("stdio", "streamable-http"):
        raise fail(f"--transport must be stdio or streamable-http, got {transport!r}", code=2)
    try:
        server = build_server(registry, config, role)
    except ImportError:
        raise fail("the MCP server needs the 'mcp' extra: pip install 'intent-router[mcp]'", code=2) from None
    except (ToolRegistryError, StrictLoadError, FileNotFoundError, ValueError, ModelError) as e:
        raise fail(str(e), code=2) from None
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=host, port=port)
