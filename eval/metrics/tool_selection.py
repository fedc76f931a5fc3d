"""Tools: which of a registry's tools the router picks for each message, against the tools it needs.

A tool file is JSON Lines, one request a line (data/tools/README.md):

    {"text": "mail the Q3 deck to priya", "tools": ["send_email"]}
    {"text": "thanks, that's all", "tools": []}

``tools`` names the registry's tools the request needs, best all of them; an empty list says no tool
applies (small talk, or a request no tool of the registry serves). ``role`` (optional, default
``admin``) is the caller's role.

Two readings, both through the router that ships (router.tools):

- *routed*: ``route_batch`` with the registry, as a service calls it: the decided intents' skills, RBAC,
  the config's ``tool_search`` (k, min_score, token budget). Recall@k is the share of a request's tools
  among its picks, averaged over requests that need one; *all needed* the share of those with every tool
  picked; the needed tools of a skill the Decision did not grant (a wrong intent, or an intent whose
  skills in the router config leave the tool's out) are counted apart; *none applies* is scored as a prediction of an empty list (precision and recall); the tokens are
  the Decision's (the picks' definitions, and those of the candidates and of the whole registry not
  loaded);
- *search*: the registry's own ranking, with no intent gating (``tools search``): Recall@1 and @k and all
  needed in the top k, among the tools the role may use.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from eval.readers.sources import DataError
from eval.reports.text_tables import cell, f, pct, table
from router.manifest import sha256_file

MAX_MISSES = 40
DEFAULT_ROLE = "admin"


@dataclass(frozen=True)
class ToolRow:
    line: int
    text: str
    tools: tuple[str, ...]
    role: str = DEFAULT_ROLE


def load_tool_rows(path: str | Path, known: set[str]) -> list[ToolRow]:
    """Read and check a tool file against the registry's tool names ``known``; a bad line is a DataError
    naming the file, the line and the field."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such tool file")
    rows = []
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            rows.append(_row(n, json.loads(raw), known))
        except (ValueError, TypeError) as e:
            raise DataError(f"{path}:{n}: {e}") from None
    if not rows:
        raise DataError(f"{path}: no rows")
    return rows


def _row(line: int, obj, known: set[str]) -> ToolRow:
    if not isinstance(obj, dict):
        raise ValueError("each line is an object with text and tools")
    extra = set(obj) - {"text", "tools", "role"}
    if extra:
        raise ValueError(f"unknown field(s) {sorted(extra)}: a row has text, tools and role")
    text, tools = obj.get("text"), obj.get("tools")
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text: a non-empty string")
    if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools):
        raise ValueError("tools: a list of tool names ([] when none applies)")
    unknown = [t for t in tools if t not in known]
    if unknown:
        raise ValueError(f"tools: {unknown} not in the registry")
    role = obj.get("role", DEFAULT_ROLE)
    if not isinstance(role, str) or not role:
        raise ValueError("role: a role of the router config")
    return ToolRow(line, text, tuple(dict.fromkeys(tools)), role)


def tool_section(router, path: str | Path) -> dict:
    """The tools section of ``path``'s rows, routed by ``router`` (a Router with a tool registry)."""
    if router.tools is None:
        raise ValueError("the router has no tool registry")
    return evaluate_tools(router, load_tool_rows(path, set(router.tools.named)), path)


def evaluate_tools(router, rows: list[ToolRow], source: str | Path) -> dict:
    """The tools section of an eval report: ``router`` (router.routing.Router with a tool registry) routes
    every row, and its registry's index ranks each row alone."""
    stage = router.tools
    if stage is None:
        raise ValueError("the router has no tool registry")
    k = router.config.tool_search.k
    decisions = []
    for role in dict.fromkeys(r.role for r in rows):
        group = [r for r in rows if r.role == role]
        decisions += list(zip(group, router.route_batch([r.text for r in group], role=role), strict=True))
    decisions.sort(key=lambda rd: rd[0].line)
    return {
        "source": str(source),
        "sha256": sha256_file(source),
        "n": len(rows),
        "needing": sum(1 for r in rows if r.tools),
        "registry": {"digest": stage.registry.digest, "tools": len(stage.registry.tools)},
        "k": k,
        "routed": _routed(decisions, stage),
        "search": _search(rows, stage, k),
        "misses": _misses(decisions),
    }


def _routed(decisions, stage) -> dict:
    need = [(r, d) for r, d in decisions if r.tools]
    recall = [len(set(r.tools) & _picked(d)) / len(r.tools) for r, d in need]
    said_none = [r for r, d in decisions if d.tools is not None and d.tools.none_applies]
    none_rows = [r for r, _ in decisions if not r.tools]
    registry_tokens = sum(stage.tokens.values())
    loaded = np.array([d.tools.tokens_loaded for _, d in decisions], dtype=float)
    candidates = np.array([d.tools.tokens_loaded + d.tools.tokens_saved for _, d in decisions], dtype=float)
    named = stage.named
    outside = [named[t].skill not in d.skills.all for r, d in need for t in r.tools]
    return {
        "recall_at_k": _mean(recall),
        "all_needed": _mean([set(r.tools) <= _picked(d) for r, d in need]),
        "needed_outside_granted_skills": _mean(outside),
        "tools_per_message": _mean([len(d.tools.tools) for _, d in decisions]),
        "none_applies": {
            "rows": len(none_rows),
            "said": len(said_none),
            "precision": _mean([not r.tools for r in said_none]),
            "recall": _mean([d.tools.none_applies for r, d in decisions if not r.tools]),
        },
        "tokens": {
            "loaded_mean": round(float(loaded.mean()), 1),
            "candidates_mean": round(float(candidates.mean()), 1),
            "registry": registry_tokens,
            "saved_of_candidates": _share(candidates.sum() - loaded.sum(), candidates.sum()),
            "saved_of_registry": _share(
                registry_tokens * len(loaded) - loaded.sum(), registry_tokens * len(loaded)
            ),
        },
    }


def _search(rows: list[ToolRow], stage, k: int) -> dict:
    """Search as ``tools search`` answers it: the top k of the tools the role may use, those with no word
    in common with the request left out."""
    need = [r for r in rows if r.tools]
    ranked = [[h.name for h in stage.search(r.text, k, r.role)] for r in need]
    out = {}
    for at in sorted({1, k}):
        out[f"recall_at_{at}"] = _mean(
            [len(set(r.tools) & set(n[:at])) / len(r.tools) for r, n in zip(need, ranked, strict=True)]
        )
    out["all_needed"] = _mean([set(r.tools) <= set(n) for r, n in zip(need, ranked, strict=True)])
    return out


def _misses(decisions) -> list[dict]:
    out = []
    for r, d in decisions:
        picked = [p.name for p in d.tools.tools]
        if set(r.tools) <= set(picked) and (r.tools or not picked):
            continue
        out.append(
            {
                "line": r.line,
                "text": r.text,
                "needed": list(r.tools),
                "picked": picked,
                "intents": list(d.intents),
                "reason_code": str(d.reason_code),
            }
        )
    return out[:MAX_MISSES]


def _picked(d) -> set[str]:
    return {p.name for p in d.tools.tools} if d.tools is not None else set()


def _mean(values) -> float | None:
    values = [float(v) for v in values]
    return round(float(np.mean(values)), 4) if values else None


def _share(part: float, whole: float) -> float | None:
    return round(float(part / whole), 4) if whole else None


def markdown_lines(section: dict | None) -> list[str]:
    """The tools section of report.md."""
    if not section:
        return []
    r, s, k = section["routed"], section["search"], section["k"]
    none, tok = r["none_applies"], r["tokens"]
    lines = [
        "## Tools",
        "",
        f"`{section['source']}`: {section['n']} requests ({section['needing']} need a tool) against a registry "
        f"of {section['registry']['tools']} tools, routed with it (k = {k}), and searched with no intent gating.",
        "",
    ]
    lines += table(
        ["", "value"],
        [
            [f"routed: needed tools among the picks (recall@{k})", pct(r["recall_at_k"])],
            ["routed: every needed tool picked", pct(r["all_needed"])],
            ["routed: tools per message", f(r["tools_per_message"], 2)],
            [
                "routed: needed tools of a skill the decision did not grant",
                pct(r["needed_outside_granted_skills"]),
            ],
            [
                f"routed: none applies, precision / recall (said {none['said']}, {none['rows']} rows need none)",
                f"{pct(none['precision'])} / {pct(none['recall'])}",
            ],
            [
                "routed: definition tokens loaded per message (of the candidates', of the registry's)",
                f"{f(tok['loaded_mean'], 1)} ({f(tok['candidates_mean'], 1)}, {tok['registry']})",
            ],
            [
                "routed: definition tokens saved, of the candidates' / of the registry's",
                f"{pct(tok['saved_of_candidates'])} / {pct(tok['saved_of_registry'])}",
            ],
            *[[f"search: {key.replace('_', ' ')}", pct(v)] for key, v in s.items()],
        ],
    )
    if section["misses"]:
        lines += ["", f"Misses (first {len(section['misses'])}):", ""]
        lines += table(
            ["line", "text", "needed", "picked", "intents"],
            [
                [
                    str(m["line"]),
                    cell(m["text"]),
                    ", ".join(m["needed"]) or "-",
                    ", ".join(m["picked"]) or "-",
                    "+".join(m["intents"]) or "-",
                ]
                for m in section["misses"]
            ],
        )
    return [*lines, ""]


def fit_tool_floor(router, rows: list[ToolRow], max_recall_loss: float = 0.01) -> dict:
    """The ``tool_search.min_score`` for ``router``'s registry, fitted on ``rows`` (a dev split): of the
    floors at which routed recall@k stays within ``max_recall_loss`` of the recall with no floor, the one
    whose "none applies" has the best F1 (the lowest on a tie), so it is said where it costs (almost) no
    needed tool. ``router``'s config has the floor
    at 0: each message is routed once, and a higher floor keeps a prefix of its picks."""
    if router.tools is None or router.config.tool_search.min_score != 0:
        raise ValueError("fit the floor with a router whose registry is searched with min_score 0")
    picks = []
    for role in dict.fromkeys(r.role for r in rows):
        group = [r for r in rows if r.role == role]
        for r, d in zip(group, router.route_batch([r.text for r in group], role=role), strict=True):
            picks.append((r, [(p.name, p.score) for p in d.tools.tools]))
    candidates = sorted({0.0, *(round(s, 4) for _, ps in picks for _, s in ps)})
    sweep = [_at_floor(picks, f) for f in candidates]
    base = sweep[0]["recall_at_k"] or 0.0
    allowed = [r for r in sweep if (r["recall_at_k"] or 0.0) >= base - max_recall_loss - 1e-12]
    best = max(allowed, key=lambda r: (_f1(r), -r["floor"]))
    return {
        "max_recall_loss": max_recall_loss,
        "min_score": best["floor"],
        "at_floor": best,
        "no_floor": sweep[0],
    }


def _f1(row: dict) -> float:
    p, r = row["none_applies_precision"] or 0.0, row["none_applies_recall"] or 0.0
    return 2 * p * r / (p + r) if p + r else 0.0


def _at_floor(picks, floor: float) -> dict:
    need, said, right, none_rows, caught = [], 0, 0, 0, 0
    for r, ps in picks:
        kept = {n for n, s in ps if s > floor}
        if r.tools:
            need.append(len(set(r.tools) & kept) / len(r.tools))
        else:
            none_rows += 1
            caught += not kept
        if not kept:
            said += 1
            right += not r.tools
    return {
        "floor": floor,
        "recall_at_k": _mean(need),
        "none_applies_said": said,
        "none_applies_precision": _share(right, said),
        "none_applies_recall": _share(caught, none_rows),
    }
