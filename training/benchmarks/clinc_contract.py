"""CLINC150's messages as the labelling contract reads them (``intent-router bench scope --contract FILE``).

CLINC150's intent names say what a banking or travel assistant should do, not what data/INTENTS.md says:
some of its side-effect messages are lookups ("find me a hotel with good reviews"), some of its live-data
messages ask for general knowledge ("what type of plug do they use in france"), and most of ``oos_test``
asks for one of the five intents in another domain ("how do i get a girlfriend" asks for a plan). A
contract file says, for each message, what the contract asks of a router, so its figures can be read
against what a router that follows the contract would do.

The file holds one JSON line per message: ``{"group": "oos_test", "id": 17, "intents": ["PLANNING"],
"ambiguous": false}``. ``group`` is one of clinc_scope's groups; ``id`` the message's place in it
(clinc_scope.scope_groups, the order of CLINC150's file); ``intents`` one or two of the model's intents,
the end goal first, or ``["OUT_OF_SCOPE"]`` for a message that needs none; ``ambiguous`` that the
annotator found two readings equally defensible. The shipped file was written by annotators who had only
data/INTENTS.md and the messages, in shuffled order: never CLINC150's intent names nor a router's answer.
Nothing is trained on it.

Figures per labelled group (``contract_figures``): the share of messages the contract gives an intent; the
share a router treats as the contract does (its first intent among the Decision's intents, or, for
``OUT_OF_SCOPE``, no intent routed); both for the messages that ask for an intent and for those that ask
for none; per contract label; and the same over the unambiguous messages.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from training.benchmarks.shares import share

NO_INTENT = "OUT_OF_SCOPE"
GROUPS = ("side_effect", "information", "small_talk", "oos_test")


def read_contract(path: str | Path) -> dict[str, dict[int, dict]]:
    """The contract's labels per group and id; a ValueError that names the line for a malformed one."""
    labels: dict[str, dict[int, dict]] = {}
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            group, i, intents = row["group"], row["id"], row["intents"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(f"{path}:{n}: a contract line needs group, id and intents ({e})") from None
        if group not in GROUPS:
            raise ValueError(f"{path}:{n}: group {group!r} is not one of {', '.join(GROUPS)}")
        if not isinstance(i, int) or not intents or not all(isinstance(x, str) for x in intents):
            raise ValueError(f"{path}:{n}: id must be a number and intents a list of labels")
        if i in labels.setdefault(group, {}):
            raise ValueError(f"{path}:{n}: {group} message {i} is labelled twice")
        labels[group][i] = {"intents": list(intents), "ambiguous": bool(row.get("ambiguous", False))}
    return labels


def check_contract(labels: dict[str, dict[int, dict]], sizes: dict[str, int], intents: Sequence[str]) -> None:
    """A ValueError when a label names an id outside its group or an intent the model does not have."""
    known = {*intents, NO_INTENT}
    for group, rows in labels.items():
        outside = sorted(i for i in rows if not 0 <= i < sizes.get(group, 0))
        if outside:
            raise ValueError(
                f"contract: {group} has {sizes.get(group, 0)} messages; ids {outside[:5]} are outside it"
            )
        unknown = sorted({x for r in rows.values() for x in r["intents"]} - known)
        if unknown:
            raise ValueError(f"contract: {group} names {unknown}, which the model does not know")


def _as_contract(label: dict, decision) -> bool:
    """Whether the Decision does what the contract asks: its first intent routed, or none at all."""
    first = label["intents"][0]
    return not decision.intents if first == NO_INTENT else first in decision.intents


def _shares(pairs: list[tuple[dict, object]]) -> dict:
    """n, the share asking for an intent, and the share treated as the contract says: all, asking, not."""
    asks = [(lab, d) for lab, d in pairs if lab["intents"][0] != NO_INTENT]
    none = [(lab, d) for lab, d in pairs if lab["intents"][0] == NO_INTENT]

    def treated(rows):
        return share(_as_contract(lab, d) for lab, d in rows)

    return {
        "n": len(pairs),
        "asks_for_an_intent": share(lab["intents"][0] != NO_INTENT for lab, _ in pairs),
        "as_contract": treated(pairs),
        "asking_routed_to_it": treated(asks),
        "asking_none_not_routed": treated(none),
    }


def contract_figures(
    decisions: Sequence,
    cases: Sequence[tuple[str, str]],
    labels: dict[int, dict],
    live_intents: Sequence[str] = (),
) -> dict:
    """A group's figures against its contract labels (the module's docstring); ``cases`` are the group's
    (text, CLINC150 intent) pairs, in the order of ``decisions``; ``live_intents``: the CLINC150 intents
    whose messages the benchmark counts as live data (their SEARCH figures against the contract's)."""
    pairs = [(labels[i], d) for i, d in enumerate(decisions) if i in labels]
    per: dict[str, dict] = {}
    for lab, d in pairs:
        row = per.setdefault(lab["intents"][0], {"n": 0, "as_contract": 0})
        row["n"] += 1
        row["as_contract"] += int(_as_contract(lab, d))
    out = {
        **_shares(pairs),
        "ambiguous": share(lab["ambiguous"] for lab, _ in pairs),
        "unambiguous": _shares([(lab, d) for lab, d in pairs if not lab["ambiguous"]]),
        "per_label": per,
    }
    live = _live_data(decisions, cases, labels, set(live_intents))
    if live is not None:
        out["live_data"] = live
    return out


def _live_data(
    decisions: Sequence, cases: Sequence[tuple[str, str]], labels: dict[int, dict], live: set[str]
) -> dict | None:
    """For the live-data intents: the share the contract calls SEARCH (the most a router that follows it
    routes to SEARCH), and SEARCH among those; None for a group without them."""
    rows = [
        (labels[i], d)
        for i, ((_, y), d) in enumerate(zip(cases, decisions, strict=True))
        if y in live and i in labels
    ]
    if not rows:
        return None
    search = [d for lab, d in rows if "SEARCH" in lab["intents"]]
    return {
        "n": len(rows),
        "contract_search": share("SEARCH" in lab["intents"] for lab, _ in rows),
        "search_of_contract_search": share("SEARCH" in d.intents for d in search),
    }
