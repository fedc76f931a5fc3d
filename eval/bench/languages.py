"""Messages in languages the model was not trained on, routed as a service routes them
(``intent-router bench languages``): under the labelling contract none is out of scope for its language,
so each should be routed to its labelled intent or carry reason ``unsupported_language`` (sent to the
verifier, else the fallback). Small talk is counted apart: out of scope, or unsupported_language.

The file is JSONL with ``text``, ``label`` and ``lang`` (data/blind_languages.jsonl, evaluation only;
data/dev_languages.jsonl, on which the language check's bars were chosen).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from router.decision import ReasonCode
from router.intents import OUT_OF_SCOPE

OUTCOMES = ("routed_right", "unsupported_language", "routed_wrong", "out_of_scope", "other")


def read_language_file(path: str | Path) -> list[dict]:
    """The rows of ``path``; each needs ``text``, ``label`` and ``lang``."""
    rows = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        missing = [k for k in ("text", "label", "lang") if not isinstance(row.get(k), str)]
        if missing:
            raise ValueError(f"{path}:{n}: needs string field(s) {', '.join(missing)}")
        rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no rows")
    return rows


def outcome(label: str, decision) -> str:
    """What the router did with a message of ``label``: one of OUTCOMES."""
    reason = decision.reason_code
    if reason == ReasonCode.UNSUPPORTED_LANGUAGE:
        return "unsupported_language"
    if reason == ReasonCode.OUT_OF_SCOPE:
        return "out_of_scope"
    if label == OUT_OF_SCOPE:
        return "routed_wrong" if decision.intents else "other"
    if decision.intents:
        return "routed_right" if label in decision.intents else "routed_wrong"
    return "other"


def language_figures(rows: list[dict], decisions) -> dict:
    """Outcome counts for requests and small talk, overall and per language, and the requests that were
    called out of scope or routed wrong."""
    requests: Counter = Counter()
    small_talk: Counter = Counter()
    per: dict[str, Counter] = {}
    misses = []
    for row, d in zip(rows, decisions, strict=True):
        o = outcome(row["label"], d)
        if row["label"] == OUT_OF_SCOPE:
            small_talk[o] += 1
            continue
        requests[o] += 1
        per.setdefault(row["lang"], Counter())[o] += 1
        if o in ("out_of_scope", "routed_wrong"):
            misses.append(
                {"text": row["text"], "lang": row["lang"], "label": row["label"], "intents": d.intents}
            )
    n = sum(requests.values())
    return {
        "requests": n,
        "outcomes": {o: requests[o] for o in OUTCOMES},
        "right_or_unsupported": round((requests["routed_right"] + requests["unsupported_language"]) / n, 6)
        if n
        else None,
        "small_talk": dict(small_talk),
        "per_language": {lang: {o: c[o] for o in OUTCOMES} for lang, c in sorted(per.items())},
        "misses": misses,
    }


def run_language_check(path: str | Path, model: str | Path | None = None, role: str | None = None) -> dict:
    """Route every message of ``path`` with the model (default: the shipped one), no verifier."""
    from router import Router

    rows = read_language_file(path)
    router = Router.load(model)
    role = role or next(iter(router.config.roles))
    decisions = router.route_batch([r["text"] for r in rows], role)
    return {
        "benchmark": "languages",
        "file": str(path),
        "model_id": router.classifier.model_id,
        "languages": router.classifier.languages,
        **language_figures(rows, decisions),
    }
