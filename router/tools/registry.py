"""The tool registry: the functions an agent may call, each under the skill (MCP server, function
catalogue) it belongs to, beside the router config whose skills they extend.

A registry is a YAML (or JSON) file: ``tools``, a list of

- ``name``: unique in the registry;
- ``description``: what the tool does, in words (not empty: tool search reads it);
- ``skill``: the router config's skill it belongs to;
- ``input_schema``: a JSON Schema of its arguments (an object schema; default: no arguments);
- ``permissions``: what a caller's role must hold, beside the skill's own (router.rbac);
- ``requires_confirmation``: the agent should ask before calling it;
- ``examples``: requests the tool serves, written by hand or from its description (``tools examples``
  adds them from (request, tool) pairs). Tool search reads them beside the description; the agent's
  definition of the tool leaves them out.

It is loaded strictly (router.strict): an unknown field, a duplicate key or name, an empty description or
a schema that is not JSON Schema is an error naming the file, the line where it can, and the field.
``check_skills`` checks it against a router config. ``digest`` names its content, for caches of what is
computed from it (the tools' embeddings).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from router.strict import StrictLoadError, load_json, load_model

MAX_EXAMPLE_CHARS = 2000
MAX_DESCRIPTION_CHARS = 20_000
CACHE_DIR = ".tool-cache"
CHECKED = "metaschema_checked"
JSON_TYPES = {"object", "array", "string", "number", "integer", "boolean", "null"}


class ToolRegistryError(ValueError):
    """A registry or a tool spec that cannot be used; the message names the file and the field."""


class Tool(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = Field(min_length=1, max_length=128)
    description: str
    skill: str = Field(min_length=1)
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    permissions: list[str] = Field(default_factory=list)
    requires_confirmation: bool = False
    examples: list[str] = Field(default_factory=list)

    @field_validator("examples")
    @classmethod
    def _examples(cls, v: list[str]) -> list[str]:
        for i, text in enumerate(v):
            if not text.strip():
                raise ValueError(f"examples.{i} is empty")
            if len(text) > MAX_EXAMPLE_CHARS:
                raise ValueError(f"examples.{i} has {len(text)} characters, more than {MAX_EXAMPLE_CHARS}")
        return v

    @field_validator("description")
    @classmethod
    def _described(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("the description is empty: tool search reads it, so say what the tool does")
        if len(v) > MAX_DESCRIPTION_CHARS:
            raise ValueError(
                f"the description has {len(v):,} characters, more than {MAX_DESCRIPTION_CHARS:,}: an agent "
                "loads it whole into its context, so keep it to what the tool does"
            )
        return v

    @field_validator("input_schema")
    @classmethod
    def _schema(cls, v: dict, info: ValidationInfo) -> dict:
        # a registry read back from its cache was checked against the metaschema when it was written
        check_json_schema(v, metaschema=not (info.context or {}).get(CHECKED))
        return v

    def definition(self) -> dict:
        """The tool as an agent loads it (name, description, input schema)."""
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}


def check_json_schema(schema: Any, where: str = "input_schema", metaschema: bool = True) -> None:
    """Raise ValueError unless ``schema`` is a JSON Schema of a tool's arguments: an object schema whose
    keywords are well formed (checked in full against the 2020-12 metaschema when ``jsonschema`` is
    installed and ``metaschema``; about 1.5 ms a schema, so each distinct schema is checked once)."""
    if not isinstance(schema, dict):
        raise ValueError(f"{where} must be a JSON Schema object, got {type(schema).__name__}")
    kind = schema.get("type", "object")
    if kind != "object":
        raise ValueError(f"{where}: a tool's arguments are an object schema, got type {kind!r}")
    props = schema.get("properties", {})
    if not isinstance(props, dict) or not all(isinstance(p, dict) for p in props.values()):
        raise ValueError(f"{where}.properties must map each argument to a schema")
    for name, prop in props.items():
        types = prop.get("type")
        for t in types if isinstance(types, list) else [types] if types is not None else []:
            if t not in JSON_TYPES:
                raise ValueError(f"{where}.properties.{name}.type {t!r} is not a JSON Schema type")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise ValueError(f"{where}.required must be a list of argument names")
    if not metaschema:
        return
    # the schema without its properties, then each property: the metaschema checks each property's schema
    # alone anyway, and apart (and without their descriptions) most are alike, so most checks are repeats
    top = {k: v for k, v in _bare(schema).items() if k != "properties"}
    parts = [("", {**top, "properties": {}} if "properties" in schema else top)]
    parts += [(f"properties.{name}", _bare(prop)) for name, prop in props.items()]
    for prefix, part in parts:
        problem = _metaschema_problem(json.dumps(part, sort_keys=True))
        if problem is not None:
            path = ".".join(p for p in (prefix, problem[0]) if p)
            raise ValueError(f"{where}{'.' + path if path else ''}: not JSON Schema ({problem[1]})")


def _bare(schema: dict) -> dict:
    """A schema without the descriptions and titles that are text (the metaschema only asks that they are)."""
    return {k: v for k, v in schema.items() if not (k in ("description", "title") and isinstance(v, str))}


def forget_checked_schemas() -> None:
    """Forget which schemas were checked against the metaschema (a benchmark's first load checks all)."""
    _metaschema_problem.cache_clear()


@functools.lru_cache(maxsize=4096)
def _metaschema_problem(schema_json: str) -> tuple[str, str] | None:
    """(the path, the message) of the first metaschema error of a schema given as canonical JSON, or None;
    None too without ``jsonschema``."""
    try:
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import SchemaError
    except ImportError:
        return None
    try:
        Draft202012Validator.check_schema(json.loads(schema_json))
    except SchemaError as e:
        return ".".join(str(p) for p in e.path), e.message
    return None


class ToolRegistry(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    tools: list[Tool] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> ToolRegistry:
        seen: set[str] = set()
        for i, t in enumerate(self.tools):
            if t.name in seen:
                raise ValueError(f"tools.{i}.name {t.name!r} repeats another tool's name")
            seen.add(t.name)
        return self

    @property
    def digest(self) -> str:
        """The first 16 hex digits of the sha256 of the registry's canonical JSON."""
        text = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]

    def by_name(self) -> dict[str, Tool]:
        return {t.name: t for t in self.tools}

    def check_skills(self, skills: Iterable[str], source: str = "the tool registry") -> None:
        """Raise ToolRegistryError naming each tool of a skill the router config does not register."""
        known = set(skills)
        bad = [
            f"tools.{i}.skill {t.skill!r} ({t.name})"
            for i, t in enumerate(self.tools)
            if t.skill not in known
        ]
        if bad:
            raise ToolRegistryError(
                f"{source}: {'; '.join(bad)}: not a skill of the router config "
                f"(its skills: {', '.join(sorted(known))})"
            )

    def extended(self, tools: Sequence[Tool], source: str) -> ToolRegistry:
        """This registry with ``tools`` added; a name already registered is an error naming ``source``."""
        have = self.by_name()
        clash = [t.name for t in tools if t.name in have]
        if clash:
            raise ToolRegistryError(f"{source}: tool(s) {', '.join(clash)} are in the registry already")
        return ToolRegistry(tools=[*self.tools, *tools])

    @classmethod
    def load(cls, path: str | Path, cache: bool = False) -> ToolRegistry:
        """The registry in ``path``. With ``cache``, a registry already read is read back from
        ``.tool-cache/`` beside it, as JSON named by the file's sha256, without the YAML parse and the
        metaschema checks; the first read writes it there (when the folder can be written)."""
        p = Path(path)
        if not p.is_file():
            raise ToolRegistryError(
                f"tool registry not found: {p} (`intent-router tools import FILE --format mcp|openai|anthropic "
                f"--skill NAME --registry {p}` writes one)"
            )
        raw = p.read_bytes()
        if not cache:
            return cls.loads(_utf8(raw, p), str(p))
        cached = p.parent / CACHE_DIR / f"registry-{p.stem}-{hashlib.sha256(raw).hexdigest()[:16]}.json"
        if cached.is_file():
            try:
                return cls.model_validate_json(cached.read_bytes(), context={CHECKED: True})
            except ValueError:
                pass  # a cache file damaged or of another version: read the registry itself
        registry = cls.loads(_utf8(raw, p), str(p))
        _write_cache(registry, cached)
        return registry

    @classmethod
    def loads(cls, text: str, source: str = "<tools>") -> ToolRegistry:
        try:
            return load_model(cls, text, source, "tool registry")
        except StrictLoadError as e:
            raise ToolRegistryError(str(e)) from None

    def save(self, path: str | Path) -> Path:
        """Write the registry as YAML, atomically."""
        import yaml

        p = Path(path)
        tmp = p.with_suffix(p.suffix + ".tmp")
        data = self.model_dump(mode="json")
        tmp.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=110), encoding="utf-8")
        tmp.replace(p)
        return p


def _write_cache(registry: ToolRegistry, path: Path) -> None:
    """Write the cache file atomically and remove the same registry's older ones; a folder that cannot be
    written leaves the registry uncached."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(registry.model_dump_json(), encoding="utf-8")
        tmp.replace(path)
        same = re.compile(re.escape(path.name[: -len("0123456789abcdef.json")]) + r"[0-9a-f]{16}\.json")
        for old in path.parent.iterdir():
            if old != path and same.fullmatch(old.name):
                old.unlink(missing_ok=True)
    except OSError:
        pass


def read_utf8(path: Path) -> str:
    """A file's text; a file that is not UTF-8 is a ToolRegistryError naming the byte."""
    return _utf8(path.read_bytes(), path)


def _utf8(raw: bytes, path: Path) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ToolRegistryError(
            f"{path}: not UTF-8 (byte {e.start}: {raw[e.start : e.start + 1]!r})"
        ) from None


def read_json(path: Path) -> Any:
    """A JSON file, strictly (router.strict.load_json), as UTF-8."""
    try:
        return load_json(read_utf8(path), str(path))
    except StrictLoadError as e:
        raise ToolRegistryError(str(e)) from None
