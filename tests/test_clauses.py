"""Compound requests: splitting a message into clauses."""

import json

from router.clauses import split_clauses
from tests.conftest import ROOT


# ----------------------------------------------------------------------------------- clauses
def test_clauses_split_at_conjunctions_and_sentence_ends():
    assert split_clauses("find the Q3 board deck and email it to Maria") == [
        "find the Q3 board deck",
        "email it to Maria",
    ]
    assert split_clauses("which listing did I pick? pull the packet for it") == [
        "which listing did I pick",
        "pull the packet for it",
    ]
    assert split_clauses("find and list the contracts") == []  # "find" alone is not a clause
    assert split_clauses("hi, where is the travel policy") == []
    assert split_clauses("a b, c d, e f, g h, i j, k l, m n") == ["a b", "c d", "e f", "g h", "i j", "k l"]


def test_clauses_split_at_shorthand_joiners_and_subordinate_asks():
    assert split_clauses("recap our chat pls + find the latest sprint review deck") == [
        "recap our chat pls",
        "find the latest sprint review deck",
    ]
    assert split_clauses("churn interview notes -> synthesize themes") == [
        "churn interview notes",
        "synthesize themes",
    ]
    assert split_clauses("forward Ingrid the terms once you've found them in the sales folder") == [
        "forward Ingrid the terms",
        "you've found them in the sales folder",
    ]
    # "if so" / "if not" join two asks and are not a clause of their own
    assert split_clauses("is the copy compliant? if it is, schedule the post for 9am") == [
        "is the copy compliant",
        "schedule the post for 9am",
    ]
    # "before" / "after" without a subject is part of the ask, not a boundary
    assert split_clauses("plan corrective actions before the re-inspection") == []


def test_clauses_keep_one_object_and_purpose_together():
    # "and" / a comma before a determiner, preposition, number or name joins parts of one object
    assert split_clauses("walk me through how credit is split between a webinar and an SDR call") == []
    assert split_clauses("create an account for our new hire, Aisha Khan, in Okta and Google Workspace") == []
    assert split_clauses("pull the Q3 and Q4 decks, then compare them") == [
        "pull the Q3 and Q4 decks",
        "compare them",
    ]
    assert split_clauses("find the contract, the invoice and the PO and send them to legal") == [
        "find the contract, the invoice and the PO",
        "send them to legal",
    ]
    # ... but "I" opens a clause
    assert split_clauses("find the deck and I'll review it") == ["find the deck", "I'll review it"]
    # "so" states a purpose, not a second ask
    assert split_clauses("create an offboarding checklist so access gets fully revoked") == []
    assert split_clauses("list my preferences back so I can paste them into the guidelines") == []


def test_the_split_lookahead_only_skips_positions_no_joiner_can_start_at():
    # the fast pattern must split exactly as its alternatives alone: on every message of the corpus, and
    # on random strings made of the joiners' pieces, punctuation, names and non-ASCII word characters
    import random
    import re

    from router import clauses

    plain = re.compile(clauses._ALTERNATIVES, re.IGNORECASE)
    rows = [
        json.loads(line)
        for path in sorted((ROOT / "data").rglob("*.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    texts = [t["text"] for row in rows for t in row.get("turns", [row])]  # conversations: every turn
    assert len(texts) > 5000
    rng = random.Random(0)
    pieces = [*clauses._JOINERS, *clauses._SUBJECT_JOINERS, *"ab ,;?!.+&->=ItTAPOBifné_1\u00a0"]
    pieces += [" you", " we", "Maria", " the", "I"]
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 12))) for _ in range(20000)]
    assert [t for t in texts if clauses._SPLIT.split(t) != plain.split(t)] == []
