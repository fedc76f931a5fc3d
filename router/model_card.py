"""What an exported graph depends on, stamped into the graph's own ONNX metadata.

The manifest's sha256 entries protect the files they list, but not the manifest itself: reversing its
``labels`` or setting ``max_seq_length: 4`` changed what the router decides without touching a hashed
byte. The labels in head order, the token window and the calibration temperature are therefore also
written into the ONNX file (``metadata_props``), where the file's sha256 covers them, and the loader
refuses a manifest that disagrees with them.

Export calls ``stamp_graph(path, labels=..., max_seq_length=..., temperature=...)`` on each graph
before it records the graph's sha256. A graph without the metadata is refused.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from router.manifest import Manifest, ModelError

PREFIX = "intent_router."
VERSION = "1"
KEY_VERSION = PREFIX + "metadata_version"
KEY_LABELS = PREFIX + "labels"
KEY_MAX_SEQ = PREFIX + "max_seq_length"
KEY_TEMPERATURE = PREFIX + "temperature"
KEY_IN_SCOPE = PREFIX + "in_scope"
KEY_COMPOUND = PREFIX + "compound"


def graph_scope_metadata(manifest: Manifest) -> dict[str, Any] | None:
    """The in-scope and compound settings a graph depends on (its extra outputs and their thresholds),
    for ``extra``."""
    s, c = manifest.in_scope, manifest.compound
    out: dict[str, Any] = {}
    if s is not None:
        out["in_scope"] = {"output": s.output, "threshold": s.threshold, "classes": list(s.classes)}
    if c is not None:
        out["compound"] = c.model_dump(
            mode="json", exclude={"fitted_on", "max_single_compound"}, exclude_none=True
        )
    return out or None


def graph_metadata(
    labels: list[str], max_seq_length: int, temperature: float, extra: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """The key -> string map stamped into a graph. ``extra`` (e.g. in-scope settings) is JSON-encoded
    under ``intent_router.<key>`` and checked against ``Manifest.<key>`` only by callers that know it."""
    if not math.isfinite(float(temperature)) or float(temperature) <= 0:
        raise ValueError(f"temperature must be finite and > 0, got {temperature}")
    meta = {
        KEY_VERSION: VERSION,
        KEY_LABELS: json.dumps(list(labels)),
        KEY_MAX_SEQ: str(int(max_seq_length)),
        KEY_TEMPERATURE: repr(float(temperature)),
    }
    for k, v in (extra or {}).items():
        meta[PREFIX + k] = json.dumps(v, sort_keys=True)
    return meta


def stamp_graph(
    path: str | Path,
    *,
    labels: list[str],
    max_seq_length: int,
    temperature: float,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """Write the metadata into the ONNX file at ``path`` (in place; needs the ``onnx`` package, which
    export has). Earlier ``intent_router.*`` entries are replaced; other metadata is kept."""
    import onnx

    meta = graph_metadata(labels, max_seq_length, temperature, extra)
    model = onnx.load(str(path), load_external_data=False)
    kept = [(p.key, p.value) for p in model.metadata_props if not p.key.startswith(PREFIX)]
    del model.metadata_props[:]
    for k, v in [*kept, *sorted(meta.items())]:
        entry = model.metadata_props.add()
        entry.key, entry.value = k, v
    tmp = Path(str(path) + ".tmp")
    onnx.save(model, str(tmp))
    tmp.replace(path)
    return meta


def read_graph_metadata(custom: Mapping[str, str]) -> dict[str, Any] | None:
    """Decode the ``intent_router.*`` entries of an ONNX model's custom metadata map
    (``session.get_modelmeta().custom_metadata_map``); None when the graph has none (an old export)."""
    if KEY_LABELS not in custom and KEY_VERSION not in custom:
        return None
    try:
        out: dict[str, Any] = {
            "metadata_version": custom.get(KEY_VERSION),
            "labels": json.loads(custom[KEY_LABELS]),
            "max_seq_length": int(custom[KEY_MAX_SEQ]),
            "temperature": float(custom[KEY_TEMPERATURE]),
            "in_scope": json.loads(custom[KEY_IN_SCOPE]) if KEY_IN_SCOPE in custom else None,
            "compound": json.loads(custom[KEY_COMPOUND]) if KEY_COMPOUND in custom else None,
        }
    except (KeyError, ValueError, TypeError) as e:
        raise ModelError(f"the graph's intent_router metadata is incomplete or malformed: {e}") from None
    if not isinstance(out["labels"], list) or not all(isinstance(x, str) for x in out["labels"]):
        raise ModelError("the graph's intent_router.labels is not a list of names")
    return out


def check_graph_metadata(meta: Mapping[str, Any], manifest: Manifest, source: str) -> None:
    """Refuse a manifest that disagrees with the graph it describes."""
    problems = []
    if list(meta["labels"]) != list(manifest.labels):
        problems.append(f"labels {manifest.labels} in the manifest, {meta['labels']} in the graph")
    if meta["max_seq_length"] != manifest.max_seq_length:
        problems.append(
            f"max_seq_length {manifest.max_seq_length} in the manifest, {meta['max_seq_length']} in the graph"
        )
    if not math.isclose(meta["temperature"], manifest.temperature, rel_tol=1e-9, abs_tol=0.0):
        problems.append(
            f"temperature {manifest.temperature!r} in the manifest, {meta['temperature']!r} in the graph"
        )
    for key in ("in_scope", "compound"):
        ours = (graph_scope_metadata(manifest) or {}).get(key)
        if meta.get(key) != ours:
            problems.append(f"{key} {ours} in the manifest, {meta.get(key)} in the graph")
    if problems:
        raise ModelError(
            f"{source}: the manifest disagrees with the graph's own metadata ({'; '.join(problems)}): "
            "the manifest was edited or belongs to another export; refused"
        )
