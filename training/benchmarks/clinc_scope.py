"""A public check of the out-of-scope boundary: what a trained router does with CLINC150 test messages it
never saw (``intent-router bench scope``). Nothing is trained on them, and no corpus row is written from
them.

Four groups of CLINC150's test split are routed one message at a time, with no previous turn and no
verifier, as a service would route them:

* ``side_effect``: the 19 intents whose messages ask for an operation with side effects now (text a
  contact, get a ride, add to a list, play music, set an alarm, book, order, cancel a reservation, ...).
  Under the labelling contract (data/INTENTS.md) they are ACTION whatever the domain. Reported: the share
  routed with ACTION among their intents, and the share called out of scope.
* ``information``: the 33 intents whose messages ask for a fact or a piece of general knowledge. Under the
  contract the 18 live-data intents (weather, exchange rates, flight status, ...) are SEARCH and the 15
  general-knowledge ones (definitions, translations, conversions, cooking times, ...) REASONING; none is out
  of scope. Reported: the share routed to one of the intents with confidence, the share called out of
  scope, the share below the threshold, and SEARCH among the live-data intents. Read message by message
  (``--contract``), 83% of the live-data messages are SEARCH: a time zone, a plug type or a visa rule is
  general knowledge.
* ``small_talk``: 15 chit-chat intents (greetings, thanks, jokes, questions about the assistant, and the
  bare replies yes, no and maybe, which with no turn before them ask for nothing): the share not routed
  to any intent.
* ``oos_test``: CLINC150's out-of-scope test queries: the share not routed. These are requests a bank or
  travel assistant cannot serve ("how do i get a girlfriend"), many of which are requests for one of the
  five intents in another domain, so a router that holds its intents outside its corpus routes some; the
  figure is reported beside the others, not held to a bar. Read by the contract, 985 of the 1,000 ask for
  one of the five (``--contract``, training/benchmarks/clinc_contract.py).

Each figure is also given per way the router can call a message out of scope: the trained class alone,
the in-scope distance alone, or both (router.steps.scope_of), so a change of the distance can be judged on
both sides of the boundary.
"""

from __future__ import annotations

import platform
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path

from router.decision import ReasonCode
from training.benchmarks.clinc_contract import check_contract, contract_figures, read_contract
from training.benchmarks.public_data import read_clinc150
from training.benchmarks.shares import percent, share

SIDE_EFFECT_INTENTS = (
    "text",
    "share_location",
    "uber",
    "shopping_list_update",
    "todo_list_update",
    "play_music",
    "change_volume",
    "sync_device",
    "make_call",
    "alarm",
    "timer",
    "reminder_update",
    "calendar_update",
    "order",
    "cancel_reservation",
    "restaurant_reservation",
    "book_hotel",
    "book_flight",
    "car_rental",
)
SMALL_TALK_INTENTS = (  # the 15 of docs/benchmarks.md: chit-chat, and bare replies with nothing before them
    "greeting",
    "goodbye",
    "thank_you",
    "tell_joke",
    "are_you_a_bot",
    "what_is_your_name",
    "how_old_are_you",
    "what_are_your_hobbies",
    "do_you_have_pets",
    "where_are_you_from",
    "who_made_you",
    "who_do_you_work_for",
    "yes",
    "no",
    "maybe",
)
# Messages that ask for a fact or a piece of general knowledge: under the labelling contract, live or
# external facts are SEARCH and general-knowledge answers REASONING; none is out of scope.
LIVE_DATA_INTENTS = (  # the live or external facts: SEARCH
    *("weather", "exchange_rate", "time", "timezone", "date", "traffic", "flight_status", "distance"),
    *("directions", "next_holiday", "current_location", "travel_alert", "international_visa", "plug_type"),
    *("gas", "mpg", "find_phone", "what_song"),
)
GENERAL_KNOWLEDGE_INTENTS = (
    *("definition", "spelling", "translate", "measurement_conversion", "calculator", "nutrition_info"),
    *("calories", "food_last", "cook_time", "restaurant_reviews", "tire_pressure", "ingredient_substitution"),
    *("recipe", "oil_change_how", "jump_start"),
)
INFORMATION_INTENTS = LIVE_DATA_INTENTS + GENERAL_KNOWLEDGE_INTENTS
UNSURE_REASONS = tuple(  # below the threshold with no verifier answer: the fallback, or a clarification
    r.value
    for r in (
        ReasonCode.NO_VERIFIER,
        ReasonCode.VERIFIER_FAILED,
        ReasonCode.VERIFIER_CIRCUIT_OPEN,
        ReasonCode.CLARIFY,
    )
)
DISTANCE_CHOICES = ("model", "off")  # the model's threshold, or no distance at all

Reporter = Callable[[str], None]


def scope_groups(source: str | Path) -> dict[str, list[tuple[str, str]]]:
    """(text, CLINC150 intent) of each group, from the test split and ``oos_test``."""
    splits = read_clinc150(source)
    test = list(zip(splits["test"].texts, splits["test"].labels, strict=True))
    return {
        "side_effect": [(t, y) for t, y in test if y in SIDE_EFFECT_INTENTS],
        "information": [(t, y) for t, y in test if y in INFORMATION_INTENTS],
        "small_talk": [(t, y) for t, y in test if y in SMALL_TALK_INTENTS],
        "oos_test": [(t, "oos") for t in splits["oos_test"].texts],
    }


def _signal(d) -> str:
    """How a Decision called its message out of scope: classifier, distance, both, or verifier."""
    signals = set((d.scope.signals if d.scope is not None else None) or [])
    if {"classifier", "distance"} <= signals:
        return "classifier+distance"
    return next(iter(signals), "other")


def group_figures(decisions: Sequence, cases: Sequence[tuple[str, str]], group: str) -> dict:
    """A group's shares: routed to ACTION (side-effect intents only), routed at all, called out of scope,
    and the out-of-scope calls by signal; the side-effect intents also per CLINC150 intent."""
    n = len(decisions)
    oos = [d for d in decisions if d.reason_code == "out_of_scope"]
    out: dict = {
        "n": n,
        "routed": share(bool(d.intents) for d in decisions),
        "not_routed": share(not d.intents for d in decisions),
        "out_of_scope": share(d.reason_code == "out_of_scope" for d in decisions),
        "out_of_scope_by": dict(Counter(_signal(d) for d in oos)),
    }
    if group == "information":
        out.update(information_figures(decisions, cases))
    if group == "side_effect":
        action = [("ACTION" in d.intents) for d in decisions]
        out["action"] = share(action)
        per: dict[str, dict] = {}
        for (_, intent), d, a in zip(cases, decisions, action, strict=True):
            row = per.setdefault(intent, {"n": 0, "action": 0, "out_of_scope": 0})
            row["n"] += 1
            row["action"] += int(a)
            row["out_of_scope"] += int(d.reason_code == "out_of_scope")
        out["per_intent"] = per
        out["top_intents"] = dict(
            Counter("+".join(d.intents) or d.reason_code for d in decisions).most_common(8)
        )
    return out


def information_figures(decisions: Sequence, cases: Sequence[tuple[str, str]]) -> dict:
    """The information intents' shares: routed to one of the intents with confidence (no fallback), below
    the threshold, SEARCH among the live-data intents, and each figure per CLINC150 intent."""
    confident = [bool(d.intents) and d.reason_code not in UNSURE_REASONS for d in decisions]
    live = [
        ("SEARCH" in d.intents) for (_, y), d in zip(cases, decisions, strict=True) if y in LIVE_DATA_INTENTS
    ]
    per: dict[str, dict] = {}
    for (_, intent), d, c in zip(cases, decisions, confident, strict=True):
        row = per.setdefault(intent, {"n": 0, "routed": 0, "search": 0, "out_of_scope": 0, "unsure": 0})
        row["n"] += 1
        row["routed"] += int(c)
        row["search"] += int("SEARCH" in d.intents)
        row["out_of_scope"] += int(d.reason_code == "out_of_scope")
        row["unsure"] += int(d.reason_code in UNSURE_REASONS)
    return {
        "routed_confident": share(confident),
        "below_threshold": share([d.reason_code in UNSURE_REASONS for d in decisions]),
        "live_data_n": len(live),
        "live_data_search": share(live),
        "per_intent": per,
        "top_intents": dict(Counter("+".join(d.intents) or d.reason_code for d in decisions).most_common(8)),
    }


def run_scope_check(
    source: str | Path,
    model: str | Path | None = None,
    role: str | None = None,
    distance: Sequence[str] = DISTANCE_CHOICES,
    report: Reporter = print,
    contract: str | Path | None = None,
) -> dict:
    """Route the four groups with the model (default: the shipped one) once per ``distance`` choice and
    return the figures (``scope_groups``, ``group_figures``); with a ``contract`` file, each labelled group's
    figures against it too (training.benchmarks.clinc_contract)."""
    from router import Router

    unknown = [d for d in distance if d not in DISTANCE_CHOICES]
    if unknown:
        raise ValueError(f"distance choice(s) {unknown}: use {', '.join(DISTANCE_CHOICES)}")
    groups = scope_groups(source)
    router = Router.load(model)
    labels = read_contract(contract) if contract is not None else {}
    check_contract(labels, {g: len(c) for g, c in groups.items()}, router.intents)
    role = role or next(iter(router.config.roles))
    fitted = router.classifier.distance_threshold
    runs: dict[str, dict] = {}
    for choice in distance:
        router.classifier.distance_threshold = fitted if choice == "model" else None
        figures = {}
        for group, cases in groups.items():  # route_batch plans its own length-sorted batches
            decisions = router.route_batch([t for t, _ in cases], role)
            figures[group] = group_figures(decisions, cases, group)
            if group in labels:
                figures[group]["contract"] = contract_figures(
                    decisions, cases, labels[group], LIVE_DATA_INTENTS
                )
        runs[choice] = figures
        report(f"distance {choice}: {summary_line(figures)}")
    router.classifier.distance_threshold = fitted
    return {
        "benchmark": "clinc150-scope",
        "created_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "model_id": router.classifier.model_id,
        "role": role,
        "distance_threshold": fitted,
        "groups": {g: sorted({y for _, y in c}) for g, c in groups.items()},
        "runs": runs,
        "environment": {"python": platform.python_version(), "machine": platform.machine()},
    }


def summary_line(figures: dict) -> str:
    """One line of a run's figures, as `bench scope` prints it."""
    se, inf = figures["side_effect"], figures["information"]
    st, oo = figures["small_talk"], figures["oos_test"]
    return (
        f"side-effect intents ACTION {percent(se['action'])}, out of scope {percent(se['out_of_scope'])} "
        f"(n={se['n']}); information intents routed {percent(inf['routed_confident'])}, out of scope "
        f"{percent(inf['out_of_scope'])}, below the threshold {percent(inf['below_threshold'])} (n={inf['n']}), "
        f"live-data SEARCH {percent(inf['live_data_search'])} (n={inf['live_data_n']}); small talk not routed "
        f"{percent(st['not_routed'])} (n={st['n']}); oos_test not routed {percent(oo['not_routed'])} (n={oo['n']})"
    )
