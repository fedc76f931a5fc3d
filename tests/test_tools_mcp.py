"""Tool search as an MCP server: `intent-router tools mcp` started as a real process over stdio, asked by
the MCP SDK's own client, as an agent would."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from router.config import RouterConfig
from router.tools.registry import ToolRegistry
from router.tools.stage import ToolStage
from tests.test_tools_routing import TOOLS

pytest.importorskip("mcp")

CLI = str(Path(sys.executable).with_name("intent-router"))


def _call(args: list[str], query: dict) -> tuple[list[str], dict, bool]:
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    async def run():
        params = StdioServerParameters(command=CLI, args=["tools", "mcp", *args], env=dict(os.environ))
        async with stdio_client(params) as streams, ClientSession(*streams) as session:
            await session.initialize()
            listed = [t.name for t in (await session.list_tools()).tools]
            result = await session.call_tool("search_tools", query)
            error = bool(getattr(result, "is_error", getattr(result, "isError", False)))
            text = result.content[0].text
            return listed, (json.loads(text) if not error else {"error": text}), error

    return anyio.run(run)


def test_an_agent_lists_search_tools_and_gets_definitions_for_its_role(tmp_path):
    path = ToolRegistry(tools=TOOLS).save(tmp_path / "tools.yaml")
    listed, answer, error = _call(
        ["--registry", str(path)], {"query": "email the quarterly report to anna", "k": 2}
    )
    assert listed == ["search_tools"] and not error
    first = answer["tools"][0]
    assert first["name"] == "send_email" and first["skill"] == "action"
    assert first["input_schema"] == {"type": "object", "properties": {}} and "examples" not in first
    assert len(answer["tools"]) <= 2

    _, viewer, _ = _call(
        ["--registry", str(path), "--role", "viewer"], {"query": "fetch ticket 4411 and email it"}
    )
    assert viewer["tools"] and {t["skill"] for t in viewer["tools"]} == {"retrieval"}  # no action tool


def test_a_bad_query_is_an_error_answer_not_a_crash(tmp_path):
    path = ToolRegistry(tools=TOOLS).save(tmp_path / "tools.yaml")
    _, answer, error = _call(["--registry", str(path)], {"query": "   "})
    assert error and "query is empty" in answer["error"]


def test_the_answer_is_tools_search_s_ranking():
    from router.tools.mcp_server import search

    stage = ToolStage(ToolRegistry(tools=TOOLS), RouterConfig.load())
    answer = search(stage, "restart the billing worker", 3, None)
    assert [t["name"] for t in answer["tools"]] == [
        h.name for h in stage.index.search("restart the billing worker", 3) if h.lexical > 0
    ]
    with pytest.raises(ValueError, match="k must be between 1 and 50"):
        search(stage, "restart", 0, None)
