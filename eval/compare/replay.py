"""Replay: logged traffic routed again by a candidate model, before anyone has labelled it.

A decision log (router.decision_log) holds what was served. ``replay_log`` routes each logged message again
with the candidate, read after its previous message when the record holds one, and reports what would
change if the candidate served:
- *flips*: messages whose answer changes (the intents, or no intent), with the commonest changes and
  examples of each;
- the *intent mix*: the share of messages that get each intent, and no intent, before and after;
- the *reason mix*: the share of each reason code before and after;
- *confident disagreements*: messages both sides accept at the threshold with different top intents, the
  changes nobody would be asked about;
- latency: the candidate's route() milliseconds, and with ``incumbent`` the incumbent's beside it, timed
  interleaved on the same messages (eval.compare.report.route_both).

The "before" side is the log itself, or, with ``incumbent``, that model routed again now: then both sides
run without a verifier on this machine, and the log's agreement with the incumbent is reported so that a
log from another model or config shows up. No label is needed: this is the check before labels exist;
``compare`` is the gate once they do.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from eval.compare.figures import ACCEPTED, CompareError, percentile
from eval.compare.report import ROLE, WARMUP, open_router

REPLAY_KIND = "intent-router-replay"
REPLAY_VERSION = 1
NONE = "(no intent)"
EXAMPLES = 3  # messages shown per kind of flip
TOP_FLIPS = 10  # kinds of flip listed


@dataclass(frozen=True)
class Answer:
    """What one side made of a message: its intents (empty: none), reason code and confidence."""

    intents: tuple[str, ...]
    reason: str
    confidence: float

    @property
    def key(self) -> str:
        return "+".join(self.intents) or NONE

    @property
    def accepted(self) -> bool:
        return self.reason in ACCEPTED


def answer_of(decision) -> Answer:
    """The Answer of a Decision, or of a logged one (its JSON)."""
    if isinstance(decision, Mapping):
        return Answer(tuple(decision.get("intents") or ()), decision["reason_code"], decision["confidence"])
    return Answer(tuple(decision.intents), decision.reason_code.value, decision.confidence)


@dataclass(frozen=True)
class Logged:
    """One logged message: its text, the previous turn's message if the record holds it, what was served."""

    message: str
    previous: str | None
    served: Answer


def read_records(log: str | Path, limit: int | None = None) -> tuple[list[Logged], dict]:
    """The replayable records of a decision log (file or folder), and counts of what was left out."""
    from router.decision_log import read_log

    out, left_out = [], Counter()
    try:
        for r in read_log(log):
            if limit is not None and len(out) >= limit:
                break
            message, decision = r.get("message"), r.get("decision")
            if not isinstance(message, str) or not message.strip() or not isinstance(decision, Mapping):
                left_out["no message"] += 1
                continue
            if decision.get("reason_code") in (None, "guardrail_rejected"):
                left_out["refused by the guardrail"] += 1
                continue
            left_out["redacted (replayed as logged)"] += bool(r.get("redacted"))
            out.append(Logged(message, r.get("previous_message"), answer_of(decision)))
    except (OSError, ValueError) as e:
        raise CompareError(f"decision log {log}: {e}") from e
    if not out:
        raise CompareError(f"decision log {log}: no record with a message to replay")
    return out, {k: v for k, v in left_out.items() if v}


def route_logged(routers: Mapping[str, object], rows: Sequence[Logged], report) -> dict:
    """Each router's Answers and route() milliseconds, interleaved per message (the order alternates),
    each message read after its logged previous message."""
    for row in rows[:WARMUP]:
        for r in routers.values():
            r.route(row.message, ROLE, context=row.previous)
    out = {key: ([], []) for key in routers}
    keys, step = list(routers), max(1, len(rows) // 10)
    for i, row in enumerate(rows):
        for key in keys if i % 2 == 0 else keys[::-1]:
            t0 = time.perf_counter()
            d = routers[key].route(row.message, ROLE, context=row.previous)
            out[key][1].append((time.perf_counter() - t0) * 1000)
            out[key][0].append(answer_of(d))
        if (i + 1) % step == 0 or i + 1 == len(rows):
            report(f"replayed {i + 1}/{len(rows)} messages")
    return out


def mix(answers: Sequence[Answer], of: Callable[[Answer], Sequence[str]]) -> Counter:
    counts = Counter()
    for a in answers:
        counts.update(of(a))
    return counts


def mix_shift(before: Sequence[Answer], after: Sequence[Answer], of) -> list[dict]:
    """Per name (an intent, or a reason code), the share of messages before and after, in points."""
    n, b, a = len(before), mix(before, of), mix(after, of)
    rows = [
        {
            "name": name,
            "before": round(b[name] / n, 6),
            "after": round(a[name] / n, 6),
            "shift_points": round(100 * (a[name] - b[name]) / n, 3),
        }
        for name in sorted(set(b) | set(a))
    ]
    return sorted(rows, key=lambda r: -abs(r["shift_points"]))


def flips(rows: Sequence[Logged], before: Sequence[Answer], after: Sequence[Answer]) -> dict:
    """How many answers change, the commonest changes (before -> after) with examples, and the confident
    disagreements: both sides accepted, different top intents."""
    changed = Counter()
    examples: dict[tuple[str, str], list[dict]] = {}
    confident = []
    for row, b, a in zip(rows, before, after, strict=True):
        if b.key == a.key:
            continue
        changed[b.key, a.key] += 1
        shown = examples.setdefault((b.key, a.key), [])
        if len(shown) < EXAMPLES:
            shown.append(
                {
                    "message": row.message,
                    "previous": row.previous,
                    "before": b.confidence,
                    "after": a.confidence,
                }
            )
        if b.accepted and a.accepted and b.intents[:1] != a.intents[:1]:
            confident.append(
                {
                    "message": row.message,
                    "previous": row.previous,
                    "before": b.key,
                    "after": a.key,
                    "confidence": [b.confidence, a.confidence],
                }
            )
    n, total = len(rows), sum(changed.values())
    return {
        "flipped": total,
        "flip_rate": round(total / n, 6),
        "kinds": [
            {"before": k[0], "after": k[1], "count": c, "examples": examples[k]}
            for k, c in changed.most_common(TOP_FLIPS)
        ],
        "confident_disagreements": len(confident),
        "confident_disagreement_rate": round(len(confident) / n, 6),
        "confident_examples": confident[: TOP_FLIPS * EXAMPLES],
    }


def latency(ms: Sequence[float]) -> dict:
    return {f"p{q}": round(percentile(ms, q), 4) for q in (50, 90, 99)} | {"samples": len(ms)}


def replay_log(
    log: str | Path,
    candidate: str | Path,
    *,
    incumbent: str | Path | None = None,
    config: str | Path | None = None,
    limit: int | None = None,
    report: Callable[[str], None] = lambda _: None,
) -> dict:
    """Replay ``log`` through ``candidate`` (and ``incumbent``, when given: the "before" side); the
    content of replay.json."""
    rows, left_out = read_records(log, limit)
    routers = {"candidate": open_router(candidate, config, "--candidate")}
    if incumbent is not None:
        routers["incumbent"] = open_router(incumbent, config, "--incumbent")
    report(f"replaying {len(rows)} logged messages through {', '.join(routers)}")
    runs = route_logged(routers, rows, report)
    served = [r.served for r in rows]
    after = runs["candidate"][0]
    before = runs["incumbent"][0] if incumbent is not None else served
    out = {
        "kind": REPLAY_KIND,
        "schema_version": REPLAY_VERSION,
        "created_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "log": str(log),
        "messages": len(rows),
        "with_previous_message": sum(r.previous is not None for r in rows),
        "left_out": left_out,
        "before": "incumbent" if incumbent is not None else "log",
        "models": {key: r.classifier.model_id for key, r in routers.items()},
        **flips(rows, before, after),
        "intent_mix": mix_shift(before, after, lambda a: a.intents or (NONE,)),
        "reason_mix": mix_shift(before, after, lambda a: (a.reason,)),
        "latency_ms": {key: latency(ms) for key, (_, ms) in runs.items()},
    }
    if incumbent is not None:
        same = sum(s.key == b.key for s, b in zip(served, before, strict=True))
        out["log_agreement"] = round(same / len(rows), 6)  # the incumbent now against what was served
        inc, cand = out["latency_ms"]["incumbent"], out["latency_ms"]["candidate"]
        out["latency_ratio"] = {q: round(cand[q] / inc[q], 4) for q in ("p50", "p99") if inc[q]}
    return out


def render_markdown(result: Mapping) -> str:
    """replay.md: the figures, the flips with examples, the mix shifts and the latency."""
    before = "the log" if result["before"] == "log" else f"the incumbent `{result['models']['incumbent']}`"
    lines = [
        f"# Replay: `{result['models']['candidate']}` on {result['messages']} logged messages",
        "",
        f"- log: `{result['log']}`; before: {before}; {result['with_previous_message']} messages read after "
        "their previous message",
        f"- flipped: {result['flipped']} ({100 * result['flip_rate']:.1f}%); confident disagreements: "
        f"{result['confident_disagreements']} ({100 * result['confident_disagreement_rate']:.1f}%)",
    ]
    if "log_agreement" in result:
        lines.append(
            f"- the incumbent, routed again, gives what was served for {100 * result['log_agreement']:.1f}%"
        )
    lines += [f"- left out: {k} {v}" for k, v in result["left_out"].items()]
    lines += ["", "## Flips", "", "| before | after | messages | examples |", "|---|---|---:|---|"]
    for k in result["kinds"]:
        shown = "; ".join(f"“{e['message']}”" for e in k["examples"])
        lines.append(f"| {k['before']} | {k['after']} | {k['count']} | {shown} |")
    for title, key in (("Intent mix", "intent_mix"), ("Reason mix", "reason_mix")):
        lines += ["", f"## {title}", "", "| name | before | after | shift (points) |", "|---|---:|---:|---:|"]
        for r in result[key]:
            lines.append(
                f"| {r['name']} | {100 * r['before']:.1f}% | {100 * r['after']:.1f}% | {r['shift_points']:+.1f} |"
            )
    lines += ["", "## Latency (route(), ms)", "", "| model | p50 | p90 | p99 |", "|---|---:|---:|---:|"]
    for key, m in result["latency_ms"].items():
        lines.append(f"| {key} | {m['p50']:.3f} | {m['p90']:.3f} | {m['p99']:.3f} |")
    return "\n".join(lines) + "\n"


def write_replay(result: Mapping, out_dir: str | Path) -> dict[str, Path]:
    """replay.json and replay.md in ``out_dir``."""
    import json

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "replay.json", "markdown": out / "replay.md"}
    paths["json"].write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    paths["markdown"].write_text(render_markdown(result), encoding="utf-8")
    return paths
