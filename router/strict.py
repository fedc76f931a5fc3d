"""Strict loading of config and model files: duplicate keys are errors, and every error names file:line.

PyYAML and json keep the last of two equal keys without a word, so a second ``action:`` skill or a
second ``viewer:`` role would silently replace the first. Here they are refused, and pydantic validation
errors are reported at the line of the offending key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import yaml

Lines = dict[tuple, int]


class StrictLoadError(ValueError):
    """A config or model file is malformed; the message starts with ``file:line:``."""


class _Loader(
    getattr(yaml, "CSafeLoader", yaml.SafeLoader)
):  # libyaml's parser: 8x faster on a large registry
    pass


def load_yaml(text: str, source: str) -> tuple[Any, Lines]:
    """Parse YAML, refusing duplicate keys and merge keys; return the data and a map from key path to
    line number (1-based) for error messages."""
    try:
        loader = _Loader(text)  # the reader refuses control characters at once
    except yaml.YAMLError as e:
        raise StrictLoadError(f"{source}:1: not valid YAML: {e}") from None
    except UnicodeEncodeError as e:  # a lone surrogate, which no file holds but a string can
        line = text[: e.start].count("\n") + 1
        raise StrictLoadError(f"{source}:{line}: not valid YAML: {e.reason} at character {e.start}") from None
    try:
        try:
            node = loader.get_single_node()
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark or e.context_mark
            line = f"{mark.line + 1}" if mark else "?"
            raise StrictLoadError(f"{source}:{line}: not valid YAML: {e.problem or e}") from None
        except yaml.reader.ReaderError as e:  # a control character, found by libyaml as it parses
            line = text[: max(e.position, 0)].count("\n") + 1
            raise StrictLoadError(f"{source}:{line}: not valid YAML: {e}") from None
        except yaml.YAMLError as e:
            raise StrictLoadError(f"{source}: not valid YAML: {e}") from None
        if node is None:
            return None, {}
        lines: Lines = {}
        _walk(loader, node, (), lines, source, set())
        try:
            data = loader.construct_document(node)
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark or e.context_mark
            line = f"{mark.line + 1}" if mark else "?"
            raise StrictLoadError(f"{source}:{line}: {e.problem or e}") from None
    finally:
        loader.dispose()
    return data, lines


def _walk(loader: _Loader, node: yaml.Node, path: tuple, lines: Lines, source: str, seen_nodes: set) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    if id(node) in seen_nodes:  # an alias: already checked
        return
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for k, v in node.value:
            line = k.start_mark.line + 1
            if k.tag == "tag:yaml.org,2002:merge":
                raise StrictLoadError(f"{source}:{line}: merge keys (<<) are not allowed")
            try:
                key = loader.construct_object(k, deep=True)
                hash(key)
            except Exception:
                raise StrictLoadError(f"{source}:{line}: a mapping key must be a plain value") from None
            if key in seen:
                raise StrictLoadError(
                    f"{source}:{line}: duplicate key {key!r} (first defined at line {seen[key]})"
                )
            seen[key] = line
            lines.setdefault((*path, key), line)
            _walk(loader, v, (*path, key), lines, source, seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(loader, item, (*path, i), lines, source, seen_nodes)


def line_of(lines: Lines, loc: Sequence[Any]) -> int | None:
    """The line of the longest prefix of ``loc`` that the file defines."""
    loc = tuple(loc)
    for n in range(len(loc), -1, -1):
        if loc[:n] in lines:
            return lines[loc[:n]]
    return None


def _named_line(lines: Lines, message: str) -> int | None:
    """For an error of the whole file (a rule across fields): the line of the field the message names
    first, else the first line."""
    named = [
        (m.start(), line)
        for path, line in lines.items()
        if path and isinstance(path[-1], str)
        for m in [re.search(rf"(?<![\w.]){re.escape(path[-1])}(?![\w])", message)]
        if m
    ]
    return min(named)[1] if named else line_of(lines, ())


def load_model(model, text: str, source: str, what: str):
    """YAML ``text`` validated strictly as the pydantic ``model`` (a mapping at the top); every error is a
    StrictLoadError naming ``source``, the line and the field."""
    data, lines = load_yaml(text, source)
    if not isinstance(data, dict):
        raise StrictLoadError(f"{source}:1: a {what} is a mapping")
    try:
        return model.model_validate(data)
    except ValueError as e:  # pydantic.ValidationError
        raise StrictLoadError(format_validation_error(e, source, lines, what)) from None


def format_validation_error(error: Exception, source: str, lines: Lines, what: str) -> str:
    """One ``file:line: path: message`` line per pydantic error."""
    errors = getattr(error, "errors", None)
    if not callable(errors):
        return f"{source}: invalid {what}: {error}"
    out = []
    for e in errors():
        loc = tuple(x for x in e.get("loc", ()))
        line = line_of(lines, loc) if loc else _named_line(lines, str(e.get("msg", "")))
        where = f"{source}:{line}" if line else source
        dotted = ".".join(str(x) for x in loc) or "(top level)"
        msg = e.get("msg", "invalid")
        if e.get("type") == "extra_forbidden":
            msg = "unknown field"
        elif e.get("type") == "bool_type":
            msg = f"must be true or false (a YAML boolean), got {e.get('input')!r}"
        out.append(f"{where}: {dotted}: {msg}")
    return (
        f"invalid {what}:\n" + "\n".join(out)
        if len(out) > 1
        else out[0]
        if out
        else f"{source}: invalid {what}"
    )


def _no_duplicates(source: str):
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in pairs:
            if k in out:
                raise StrictLoadError(f"{source}: duplicate key {k!r}")
            out[k] = v
        return out

    return hook


def load_json(text: str, source: str) -> Any:
    """json.loads refusing duplicate keys and NaN/Infinity; errors name file:line."""

    def bad_constant(name: str) -> Any:
        raise StrictLoadError(f"{source}: {name} is not valid JSON")

    try:
        return json.loads(text, object_pairs_hook=_no_duplicates(source), parse_constant=bad_constant)
    except json.JSONDecodeError as e:
        raise StrictLoadError(f"{source}:{e.lineno}: not valid JSON: {e.msg}") from None
