"""Clause segmentation for compound requests: "find the Q3 deck and email it to Maria" -> ["find the Q3
deck", "email it to Maria"]. Each clause is classified on its own: in a second run of the graph, or, for a
body distilled to read them there (the shipped models), from its tokens pooled inside the message's own
run (router.compound); an undistilled body's pooled clause carries the whole message's intent (measured:
30% of two-intent messages found instead of 86%). The split only has to be good enough to isolate the
asks; the compound head decides.
"""

from __future__ import annotations

import re

MIN_WORDS = 2  # shorter pieces ("find" in "find and list the contracts") are not clauses
MAX_CLAUSES = 6
_JOINERS = (
    "and then",
    "and also",
    "and",
    "then",
    "also",
    "after that",
    "afterwards",
    "plus",
    "once that's done",
    "once done",
    "if so",
    "if not",
    "if yes",
    "if it is",
    "if it does",
    "if they are",
    "if they do",
)
# "once"/"before"/"after" open a clause only before a subject ("once you've found it", "before we
# send it"); "plan corrective actions before the re-inspection" stays one clause.
_SUBJECT_JOINERS = ("once", "before", "after")
# "and" and commas also join the parts of one object ("a webinar and an SDR call", "in Okta and Google
# Workspace", "for our new hire, Aisha Khan"): they open a clause only when what follows could start an
# ask, not a determiner, preposition, number or capitalised name ("I" excepted). "so" / "so that" are not
# joiners: what follows states a purpose ("so access gets revoked", "so I can paste them"), not a second
# ask. Both were chosen on dev: fewer single messages called compound at the same two-intent recall.
_NOT_AN_ASK = (
    r"(?!\s*(?:a|an|the|my|our|their|his|her|its|your|this|that|these|those|in|on|at|for|with|of|from|by"
    r"|about|all|any|some|every|each|both|other|more|less|not|\d)\b)(?!\s*(?-i:(?!I\b)[A-Z]))"
)
_SUBJECTS = r"you|you've|you're|we|we've|i|i've|it|it's|that|that's|they|they're"
_SUBORDINATE = r"\s*,?\s*\b(?:" + "|".join(_SUBJECT_JOINERS) + r")\s+(?=(?:" + _SUBJECTS + r")\b)"
_ALTERNATIVES = "|".join(
    (
        r"\s*,?\s*\b(?:" + "|".join(re.escape(j) for j in _JOINERS) + r")\b\s*" + _NOT_AN_ASK,  # conjunctions
        _SUBORDINATE,  # "... once you've found it"
        r"\s+(?:\+|&|->|=>)\s+",  # shorthand joiners: "recap our chat + find the deck"
        r"\s*[;?!]+\s*",  # sentence ends and semicolons
        r"\.\s+",  # a full stop followed by more text
        r",\s+" + _NOT_AN_ASK,  # commas
    )
)
# Every alternative starts at whitespace, at one of ,;?!. or at the first letter of a word that opens a
# joiner. The lookahead rejects every other position in one step, where the engine would try each
# alternative there in turn: split_clauses runs about 1.4x faster and splits the same (tests/test_clauses.py).
_OPENERS = "".join(sorted({j[0] for j in (*_JOINERS, *_SUBJECT_JOINERS)}))
_CAN_START = r"(?=[\s,;?!.]|(?<!\w)[" + _OPENERS + "])"
_SPLIT = re.compile(_CAN_START + "(?:" + _ALTERNATIVES + ")", re.IGNORECASE)


def split_clauses(text: str) -> list[str]:
    """The clauses of ``text`` (at most MAX_CLAUSES, each of MIN_WORDS words or more), or [] when it has
    fewer than two: then the message is one request as far as segmentation can tell."""
    parts = [p.strip(" ,.") for p in _SPLIT.split(text)]
    clauses = [p for p in parts if len(p.split()) >= MIN_WORDS]
    return clauses[:MAX_CLAUSES] if len(clauses) >= 2 else []
