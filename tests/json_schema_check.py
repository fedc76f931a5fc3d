"""Validate a report against its JSON Schema: jsonschema when installed, else a small validator."""

import math


def validate_json(instance, schema):
    """jsonschema when installed, else a small validator for the keywords the schema uses."""
    try:
        import jsonschema
    except ImportError:
        mini_validate(instance, schema, schema, "$")
    else:
        jsonschema.validate(instance, schema)


TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def is_type(x, t):
    if t == "integer":
        return isinstance(x, int) and not isinstance(x, bool)
    if t == "number":
        return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
    return isinstance(x, TYPES[t])


def mini_validate(x, s, root, path):
    if "$ref" in s:
        target = root
        for part in s["$ref"].lstrip("#/").split("/"):
            target = target[part]
        mini_validate(x, target, root, path)
    for sub in s.get("allOf", []):
        mini_validate(x, sub, root, path)
    if "oneOf" in s:
        ok = 0
        for sub in s["oneOf"]:
            try:
                mini_validate(x, sub, root, path)
                ok += 1
            except AssertionError:
                pass
        assert ok == 1, f"{path}: matches {ok} of oneOf"
    if "type" in s:
        types = s["type"] if isinstance(s["type"], list) else [s["type"]]
        assert any(is_type(x, t) for t in types), f"{path}: {x!r} is not {types}"
    if "const" in s:
        assert x == s["const"], f"{path}: {x!r} != {s['const']!r}"
    if "enum" in s:
        assert x in s["enum"], f"{path}: {x!r} not in {s['enum']}"
    if is_type(x, "number"):
        assert x >= s.get("minimum", -math.inf) and x <= s.get("maximum", math.inf), (
            f"{path}: {x} out of range"
        )
        assert x > s.get("exclusiveMinimum", -math.inf), f"{path}: {x} out of range"
    if isinstance(x, dict):
        for k in s.get("required", []):
            assert k in x, f"{path}: missing {k!r}"
        props = s.get("properties", {})
        for k, v in x.items():
            if k in props:
                mini_validate(v, props[k], root, f"{path}.{k}")
            elif isinstance(s.get("additionalProperties"), dict):
                mini_validate(v, s["additionalProperties"], root, f"{path}.{k}")
    if isinstance(x, list):
        assert len(x) >= s.get("minItems", 0), f"{path}: too few items"
        for i, v in enumerate(x):
            if "items" in s:
                mini_validate(v, s["items"], root, f"{path}[{i}]")
