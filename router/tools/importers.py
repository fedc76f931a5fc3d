"""Tool specs in the shapes agents already hold them, read into the registry's Tools (router.tools.registry):

- ``mcp``: an MCP server's ``tools/list`` answer: ``{"tools": [{"name", "description", "inputSchema",
  "annotations"}]}``, or the whole JSON-RPC response around it (``{"result": {"tools": [...]}}``). A tool
  whose annotations say ``destructiveHint: true`` (and not ``readOnlyHint``) requires confirmation;
- ``openai``: OpenAI function tools: a list (or ``{"tools": [...]}``) of ``{"type": "function",
  "function": {"name", "description", "parameters"}}``; the older bare ``{"name", "description",
  "parameters"}`` is read too;
- ``anthropic``: Anthropic tool definitions: a list (or ``{"tools": [...]}``) of ``{"name",
  "description", "input_schema"}``.

Every tool gets the skill given on the command line. Each error names the file and the tool's place in it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from router.tools.registry import Tool, ToolRegistryError, read_json

FORMATS = ("mcp", "openai", "anthropic")
EMPTY = {"type": "object", "properties": {}}


def _tool_list(data: Any, source: str) -> list:
    """The list of tool specs: the data itself, or under ``tools`` (of a JSON-RPC ``result``)."""
    if isinstance(data, Mapping) and isinstance(data.get("result"), Mapping):
        data = data["result"]
    if isinstance(data, Mapping) and "tools" in data:
        data = data["tools"]
    if not isinstance(data, list):
        raise ToolRegistryError(f"{source}: expected a list of tools, or an object with 'tools'")
    return data


def _mcp(spec: Mapping) -> dict:
    notes = spec.get("annotations") or {}
    destructive = bool(notes.get("destructiveHint")) and not notes.get("readOnlyHint")
    return {
        "name": spec.get("name"),
        "description": spec.get("description") or spec.get("title") or "",
        "input_schema": spec.get("inputSchema", EMPTY),
        "requires_confirmation": destructive,
    }


def _openai(spec: Mapping) -> dict:
    fn = spec.get("function", spec) if spec.get("type", "function") == "function" else None
    if not isinstance(fn, Mapping):
        raise ValueError(f"type {spec.get('type')!r} is not a function tool")
    return {
        "name": fn.get("name"),
        "description": fn.get("description", ""),
        "input_schema": fn.get("parameters", EMPTY),
    }


def _anthropic(spec: Mapping) -> dict:
    return {
        "name": spec.get("name"),
        "description": spec.get("description", ""),
        "input_schema": spec.get("input_schema", EMPTY),
    }


READERS: dict[str, Callable[[Mapping], dict]] = {"mcp": _mcp, "openai": _openai, "anthropic": _anthropic}


def import_tools(path: str | Path, fmt: str, skill: str) -> list[Tool]:
    """The tools of the spec file at ``path`` in format ``fmt``, each under ``skill``."""
    if fmt not in FORMATS:
        raise ToolRegistryError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    path = Path(path)
    if not path.is_file():
        raise ToolRegistryError(f"{path}: no such file")
    data = read_json(path)
    read = READERS[fmt]
    specs = _tool_list(data, str(path))
    tools = []
    for i, spec in enumerate(specs):
        name = spec.get("name") if isinstance(spec, Mapping) else None
        where = f"{path}: tool {i}" + (f" ({name})" if isinstance(name, str) else "")
        if not isinstance(spec, Mapping):
            raise ToolRegistryError(f"{where}: a tool spec is a JSON object")
        try:
            tools.append(Tool.model_validate({**read(spec), "skill": skill}))
        except ValueError as e:
            raise ToolRegistryError(f"{where}: {_first_error(e)}") from None
    if not tools:
        raise ToolRegistryError(f"{path}: no tools")
    return tools


def _first_error(e: ValueError) -> str:
    errors = getattr(e, "errors", None)
    if callable(errors):
        first = errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        return f"{field}: {first['msg'].removeprefix('Value error, ')}" if field else first["msg"]
    return str(e)
