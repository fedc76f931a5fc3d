"""(request, tool) pairs: requests each tool serves, kept in the registry as the tool's ``examples``.

A pairs file is JSON Lines, ``{"text": "...", "tool": "NAME"}`` a line: requests users sent, or requests
written from the tool descriptions. A request that needs several tools (a task of several steps) is
``{"text": "...", "tools": ["NAME", ...]}`` and becomes an example of each: a step the request does not
name ("save the deck") is then found by the words of the tasks it serves. ``read_pairs`` checks every
line first (a tool the registry does not have, an empty text or tool list, a field that is not one of
the two) and names the file and line of each error; nothing is added unless all are good. A request
already among the tool's examples is skipped.
"""

from __future__ import annotations

import json
from pathlib import Path

from router.tools.registry import MAX_EXAMPLE_CHARS, ToolRegistry, ToolRegistryError, read_utf8

MAX_ERRORS = 20


def read_pairs(path: str | Path, registry: ToolRegistry) -> list[tuple[str, str]]:
    """The (text, tool) pairs of a JSONL file, each checked against ``registry``."""
    path = Path(path)
    if not path.is_file():
        raise ToolRegistryError(f"pairs file not found: {path}")
    names = registry.by_name()
    pairs, errors = [], []
    for n, raw in enumerate(read_utf8(path).splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            pairs.extend(_pairs(json.loads(raw), names))
        except (ValueError, TypeError) as e:
            errors.append(f"{path}:{n}: {e}")
    if errors:
        more = f" (and {len(errors) - MAX_ERRORS} more)" if len(errors) > MAX_ERRORS else ""
        raise ToolRegistryError("; ".join(errors[:MAX_ERRORS]) + more)
    if not pairs:
        raise ToolRegistryError(f"{path}: no pairs")
    return pairs


def _pairs(obj, names) -> list[tuple[str, str]]:
    """A line's (text, tool) pairs: one, or one per tool of a ``tools`` list."""
    if not isinstance(obj, dict) or set(obj) not in ({"text", "tool"}, {"text", "tools"}):
        raise ValueError(
            'each line is {"text": REQUEST, "tool": NAME} or {"text": REQUEST, "tools": [NAME, ...]}'
        )
    text = obj["text"]
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text: a non-empty request")
    if len(text) > MAX_EXAMPLE_CHARS:
        raise ValueError(f"text: {len(text)} characters, more than {MAX_EXAMPLE_CHARS}")
    tools = [obj["tool"]] if "tool" in obj else obj["tools"]
    if not isinstance(tools, list) or not tools:
        raise ValueError("tools: a non-empty list of tool names")
    for tool in tools:
        if not isinstance(tool, str) or tool not in names:
            raise ValueError(f"tool {tool!r} is not in the registry")
    return [(text.strip(), tool) for tool in dict.fromkeys(tools)]


def add_examples(registry: ToolRegistry, pairs: list[tuple[str, str]]) -> tuple[ToolRegistry, int]:
    """The registry with each pair's text among its tool's examples, and how many were new."""
    examples = {t.name: list(t.examples) for t in registry.tools}
    added = 0
    for text, tool in pairs:
        if text not in examples[tool]:
            examples[tool].append(text)
            added += 1
    tools = [t.model_copy(update={"examples": examples[t.name]}) for t in registry.tools]
    return ToolRegistry(tools=tools), added
