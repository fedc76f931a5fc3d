"""Tool search as an MCP server (``intent-router tools mcp``, extra ``mcp``): an agent whose client speaks the
Model Context Protocol gets one tool, ``search_tools``, instead of every definition of a large registry,
and loads the few definitions it returns.

``search_tools(query, k)`` ranks the registry's tools for ``query`` as ``tools search`` does (router.tools.
search: BM25 over each tool's words, its skill's description and its examples, fused with the router
config's ``tool_search.encoder`` when it names one), among the tools ``role`` may use when the server is
started for one, and returns at most ``k``: each tool's definition (name, description, input schema),
skill, BM25 score (and the encoder's similarity) and whether it needs confirmation. The registry is read
once, at start.
"""

from __future__ import annotations

from pathlib import Path

from router.config import RouterConfig
from router.tools.stage import ToolStage

MAX_K = 50
INSTRUCTIONS = (
    "This server finds the tools a request needs out of a large registry. Call search_tools with the "
    "user's request (or one step of it) and load only the tool definitions it returns."
)


def search(stage: ToolStage, query: str, k: int, role: str | None) -> dict:
    """The answer of ``search_tools``: the top ``k`` tools (at most ``MAX_K``) for ``query`` (ToolStage.search)."""
    if not query.strip():
        raise ValueError("query is empty: give the request to find tools for")
    if not 1 <= k <= MAX_K:
        raise ValueError(f"k must be between 1 and {MAX_K}, got {k}")
    return {
        "query": query,
        "tools": [
            {
                **stage.named[h.name].definition(),
                "skill": h.skill,
                "score": h.lexical,
                **({"dense": h.dense} if h.dense is not None else {}),
                "requires_confirmation": h.requires_confirmation,
            }
            for h in stage.search(query, k, role)
        ],
    }


def build_server(registry: str | Path, config: str | Path | None = None, role: str | None = None):
    """An MCPServer exposing ``search_tools`` over ``registry`` (checked against the router config)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    cfg = RouterConfig.load(config)
    stage = ToolStage.of(Path(registry), cfg)
    if role is not None and role not in cfg.roles:
        raise ValueError(f"unknown role {role!r} (roles: {', '.join(sorted(cfg.roles))})")
    server = MCPServer(name="intent-router-tools", instructions=INSTRUCTIONS)

    @server.tool(
        name="search_tools",
        description=(
            f"Find the tools a request needs among {len(stage.registry.tools)} tools. Returns at most k "
            "(default 5) tool definitions, best first, each with its input schema and whether it needs the "
            "user's confirmation."
        ),
    )
    def search_tools(query: str, k: int = 5) -> dict:
        try:
            return search(stage, query, k, role)
        except ValueError as e:  # told to the agent as it is, not as an unexpected failure
            raise ToolError(str(e)) from None

    return server
