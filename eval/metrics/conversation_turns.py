"""Conversations: the router run turn by turn, each turn with the Decision of the turn before it.

A conversation file is JSON Lines, one conversation a line (data/conversations/README.md):

    {"turns": [{"text": "restart the indexing service in us-east", "label": "ACTION"},
               {"text": "the same for the EU cluster", "label": "ACTION", "kind": "slot_change"}]}

The first turn is a request, labelled with its intent. Every later turn has a ``kind`` and the label the
router should give it:
- a continuation (kind ``confirmation``, ``refinement``, ``slot_change``, ``selection``, ``retry`` or
  ``correction``) is labelled with the conversation's intent, and is *resolved* when the router gives it
  that intent;
- a social message (label ``OUT_OF_SCOPE``, kind one of the corpus's out-of-scope kinds) is *not
  routed* when the router gives it no intent;
- a switch (kind ``switch``) is labelled with its own intent, and is *kept* when the router gives it that.

The router runs as a service would call it: ``route(text, role, previous=<the Decision of the turn
before>)``, with no verifier unless one is given. Continuations are also routed alone, without the turn
before, to show what the context adds.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from eval.readers.sources import DataError
from eval.reports.text_tables import cell, f, pct, table
from router.intents import OUT_OF_SCOPE
from router.manifest import sha256_file

CONTINUATION_KINDS = ("confirmation", "refinement", "slot_change", "selection", "retry", "correction")
SWITCH = "switch"
MAX_MISSES = 60


@dataclass(frozen=True)
class Turn:
    text: str
    label: str
    kind: str | None = None

    @property
    def role(self) -> str:
        """``continuation``, ``social`` or ``switch`` (``request`` for a first turn)."""
        if self.kind is None:
            return "request"
        if self.kind in CONTINUATION_KINDS:
            return "continuation"
        return SWITCH if self.kind == SWITCH else "social"


@dataclass(frozen=True)
class Conversation:
    line: int
    turns: tuple[Turn, ...]


def load_conversations(path: str | Path, intents: tuple[str, ...]) -> list[Conversation]:
    """Read and check a conversation file whose turns name ``intents`` (a model's); a bad line is a
    DataError naming file and line."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such conversation file")
    out = []
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            out.append(Conversation(n, _turns(json.loads(raw), intents)))
        except (ValueError, TypeError, KeyError) as e:
            raise DataError(f"{path}:{n}: {e}") from None
    if not out:
        raise DataError(f"{path}: no conversations")
    return out


def _turns(obj, intents: tuple[str, ...]) -> tuple[Turn, ...]:
    turns = obj.get("turns") if isinstance(obj, dict) else None
    if not isinstance(turns, list) or len(turns) < 2:
        raise ValueError("a conversation is an object with 'turns': a list of at least two turns")
    out = []
    for i, t in enumerate(turns):
        text, label, kind = t.get("text"), t.get("label"), t.get("kind")
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"turn {i + 1}: 'text' must be a non-empty string")
        if i == 0:
            if label not in intents:
                raise ValueError(f"turn 1 must be a request labelled with an intent ({', '.join(intents)})")
            out.append(Turn(text, label))
            continue
        if not isinstance(kind, str) or not kind:
            raise ValueError(
                f"turn {i + 1}: a later turn needs a 'kind' (a continuation kind, switch, or social)"
            )
        turn = Turn(text, label, kind)
        if turn.role == "social" and label != OUT_OF_SCOPE:
            raise ValueError(f"turn {i + 1}: a social turn (kind {kind!r}) is labelled {OUT_OF_SCOPE}")
        if turn.role != "social" and label not in intents:
            raise ValueError(f"turn {i + 1}: a {turn.role} is labelled with an intent, got {label!r}")
        out.append(turn)
    return tuple(out)


def _share(hits: list[bool]) -> float | None:
    return round(sum(hits) / len(hits), 6) if hits else None


def conversation_metrics(router, conversations: list[Conversation], role: str = "admin") -> dict:
    """Route every conversation turn by turn (the previous turn's Decision as ``previous``) and score the
    later turns by their role; ``role`` only picks the skills, never the intent."""
    got: dict[str, list[bool]] = {"continuation": [], "social": [], "switch": [], "request": []}
    by_kind: dict[str, list[bool]] = {}
    reasons: Counter = Counter()
    alone_routed: list[bool] = []
    ms = {"request": [], "continuation": [], "continuation_after_message": []}
    misses = []
    for conv in conversations:
        previous = None
        for i, turn in enumerate(conv.turns):
            d = router.route(turn.text, role, previous=previous)
            routed = list(d.intents)
            ok = not routed if turn.role == "social" else d.intent == turn.label
            got[turn.role].append(ok)
            if i:
                reasons[d.reason_code.value] += 1
                by_kind.setdefault(turn.kind, []).append(ok)
            if turn.role in ms:
                ms[turn.role].append(d.latency.total_ms)
            if turn.role == "continuation":
                alone_routed.append(router.route(turn.text, role).intent is not None)
                # the same turn with only the previous message as context: that message is routed too
                ms["continuation_after_message"].append(
                    router.route(turn.text, role, context=conv.turns[i - 1].text).latency.total_ms
                )
            if not ok and len(misses) < MAX_MISSES:
                misses.append(
                    {
                        "line": conv.line,
                        "turn": i + 1,
                        "kind": turn.kind,
                        "text": turn.text,
                        "expected": turn.label,
                        "routed": routed,
                        "reason_code": d.reason_code.value,
                        "confidence": d.confidence,
                    }
                )
            previous = d
    return {
        "conversations": len(conversations),
        "turns": sum(len(c.turns) for c in conversations),
        "requests": {"n": len(got["request"]), "accuracy": _share(got["request"])},
        "social": {"n": len(got["social"]), "not_routed": _share(got["social"])},
        "continuation": {
            "n": len(got["continuation"]),
            "resolved": _share(got["continuation"]),
            "routed_without_previous": _share(alone_routed),
        },
        "switch": {"n": len(got["switch"]), "kept": _share(got["switch"])},
        "by_kind": {k: {"n": len(v), "right": _share(v)} for k, v in sorted(by_kind.items())},
        "reason_codes": dict(reasons.most_common()),
        "median_ms": {k: round(statistics.median(v), 4) if v else None for k, v in ms.items()},
        "misses": misses,
    }


def evaluate_conversations(router, path: str | Path, role: str = "admin") -> dict:
    """The report's ``conversation`` section for one conversation file."""
    intents = router.intents
    conversations = load_conversations(path, intents)
    return {
        "source": str(path),
        "sha256": sha256_file(path),
        **conversation_metrics(router, conversations, role),
    }


def markdown_lines(cv: dict | None) -> list[str]:
    """Conversations (eval/metrics/conversation_turns.py): later turns scored by what they are."""
    if not cv:
        return []
    c, s, w = cv["continuation"], cv["social"], cv["switch"]
    lines = [
        "## Conversations",
        "",
        f"`{cv['source']}`: {cv['conversations']} conversations, {cv['turns']} turns, each routed after the "
        "Decision of the turn before it, with no verifier.",
        "",
    ]
    lines += table(
        ["", "value"],
        [
            [f"first turns: accuracy (n={cv['requests']['n']})", pct(cv["requests"]["accuracy"])],
            [f"social messages after a request: not routed (n={s['n']})", pct(s["not_routed"])],
            [f"continuations: the conversation's intent (n={c['n']})", pct(c["resolved"])],
            [
                "continuations routed to an intent without the previous turn",
                pct(c["routed_without_previous"]),
            ],
            [f"intent switches: their own intent kept (n={w['n']})", pct(w["kept"])],
            [
                "median route() ms: first turns / continuations after a Decision / after a message",
                " / ".join(
                    f(cv["median_ms"].get(k), 2)
                    for k in ("request", "continuation", "continuation_after_message")
                ),
            ],
        ],
    )
    lines += ["By kind of later turn:", ""]
    lines += table(["kind", "n", "right"], [[k, v["n"], pct(v["right"])] for k, v in cv["by_kind"].items()])
    if cv["misses"]:
        lines += ["Misses:", ""]
        lines += table(
            ["line", "turn", "kind", "text", "expected", "routed", "reason"],
            [
                [
                    m["line"],
                    m["turn"],
                    m["kind"],
                    cell(m["text"]),
                    m["expected"],
                    "+".join(m["routed"]) or "-",
                    m["reason_code"],
                ]
                for m in cv["misses"]
            ],
        )
    return [*lines, ""]
