"""Compound requests: a message that asks for two things (find the deck, then email it) carries two
intents, primary first. The graph scores every intent one-vs-rest beside the softmax (manifest
``compound``); the one rule that turns those scores into a second intent lives here, so that the router,
the evaluator and the verifier agree on it. Skills of several intents are merged here too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from router.intents import INTENTS

MAX_INTENTS = 2


def secondary_intent(
    primary: str | None, scores: Mapping[str, float] | None, threshold: float | None
) -> str | None:
    """The second intent of a message whose primary intent is ``primary``: the other intent with the
    highest one-vs-rest score, if that score reaches ``threshold``; else None (a single-intent message)."""
    if primary not in INTENTS or not scores or threshold is None:
        return None
    best, score = None, -1.0
    for intent, s in scores.items():
        if intent != primary and intent in INTENTS and s > score:
            best, score = intent, float(s)
    return best if best is not None and score >= threshold else None


def ordered_intents(primary: str | None, secondary: str | None) -> list[str]:
    """[primary, secondary] without repeats or gaps; [] without a primary."""
    if primary is None:
        return []
    return [primary] + ([secondary] if secondary not in (None, primary) else [])


def merge_skills(specs: Sequence) -> tuple[list[str], list[str], int]:
    """(required, optional, context budget) of several intents' skill specs (router.config.IntentSkills).

    Skills are the union, a skill required by any intent required. The budget starts from the largest
    intent's and adds the budget of each other intent that brings a required skill not loaded yet: the
    SEARCH + REASONING fallback costs REASONING's budget (its skills include retrieval), SEARCH + ACTION
    costs both."""
    required = _unique(s for spec in specs for s in spec.required)
    optional = _unique(s for spec in specs for s in spec.optional if s not in required)
    budget, loaded = 0, set()
    for spec in sorted(specs, key=lambda sp: -sp.context_budget):
        if not budget or not set(spec.required) <= loaded:
            budget += spec.context_budget
        loaded.update(spec.required)
    return required, optional, budget


def _unique(items) -> list[str]:
    out: list[str] = []
    for x in items:
        if x not in out:
            out.append(x)
    return out
