"""The review queue: which logged decisions are worth a person's time to label (``intent-router review``).

A decision log (router.decision_log) is read once, streaming. Messages are deduplicated first: case,
punctuation, whitespace and digits are normalised away (``normalise``), the first record of a message is
kept and the others only counted (``seen``). Each kept record is then a candidate for every rule it meets
(``reasons``; its ``why`` keeps them all):

- ``verifier_disagreed``: the verifier answered other than the classifier's top intent, or failed;
- ``below_threshold``: confidence under the decision's threshold (not out of scope by the classifier, not
  stopped by the guardrail);
- ``borderline_compound``: a compound comparison within ``COMPOUND_BAND`` of its threshold, or a
  ``confident_compound`` decision;
- ``small_margin``: the top two intents' probabilities closer than ``MARGIN`` (when the classifier's top
  label is an intent: an out-of-scope message spreads the little left over its intents);
- ``near_scope_boundary``: the in-scope distance within ``SCOPE_BAND`` of its threshold;
- ``confident_sample``: a seeded random slice of the confidently accepted decisions that meet no other
  rule, ``confident_share`` of the budget, so that confident mistakes surface too.

The candidates are embedded with the model's own sentence embedding (the ranking vector when the graph has
none), clustered by k-means (k = min(budget, round(sqrt(n)))) and picked round-robin over the clusters,
the most urgent first within each (``PRIORITY``, then lower confidence): exactly min(budget, candidates)
rows, the confident slice among them.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from eval.review.clusters import cluster_count, kmeans
from router.compound import stacked_scores
from router.intents import OUT_OF_SCOPE, RESERVED

# fmt: off
PRIORITY = ("verifier_disagreed", "below_threshold", "borderline_compound", "small_margin",
            "near_scope_boundary", "confident_sample")
# fmt: on
RANK = {why: i for i, why in enumerate(PRIORITY)}
MARGIN = 0.15  # small_margin: top-two probabilities closer than this
SCOPE_BAND = 0.1  # near_scope_boundary: distance / distance_threshold in [1 - band, 1 + band]
COMPOUND_BAND = 0.1  # borderline_compound: a compound score within this of its threshold
NO_VERIFIER = "absent"  # the verifier step's status when no verifier is configured


class ReviewError(ValueError):
    """A log or an option the review queue cannot work with."""


# ----------------------------------------------------------------------------------- duplicates
_DIGITS = re.compile(r"\d+")
_APOSTROPHES = str.maketrans("", "", "'\u2019`")


def normalise(text: str) -> str:
    """What two messages share when one is a near-duplicate of the other: case folded, every run of digits
    one '0', apostrophes dropped, other punctuation and symbols a space, whitespace collapsed. A message
    with nothing left (punctuation, emoji) is its own stripped text."""
    t = _DIGITS.sub("0", unicodedata.normalize("NFKC", text).casefold().translate(_APOSTROPHES))
    t = "".join(" " if unicodedata.category(ch)[0] in "PSZC" else ch for ch in t)
    return " ".join(t.split()) or text.strip()


def message_id(text: str) -> str:
    """A message's stable id: the first 16 hex digits of the sha256 of its UTF-8 text."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


# ------------------------------------------------------------------------------------- the rules
def trace_step(decision: Mapping, stage: str) -> dict | None:
    """The first trace step of ``stage`` in a logged decision, or None."""
    return next((s for s in decision.get("trace") or () if s.get("stage") == stage), None)


def verifier_of(record: Mapping) -> dict | None:
    """The verifier's outcome of a record: its ``verifier`` field, else its trace's verifier step."""
    if record.get("verifier") is not None:
        return record["verifier"]
    s = trace_step(record.get("decision") or {}, "verifier")
    return None if s is None else {"status": s.get("status"), **(s.get("detail") or {})}


def top_intent(decision: Mapping) -> str | None:
    ranking = decision.get("ranking") or ()
    return ranking[0]["intent"] if ranking else None


def compound_checks(decision: Mapping, spec) -> list[tuple[float, float]]:
    """The (score, threshold) comparisons the compound rule (router.compound.resolve_intents) made for a
    logged decision, recomputed from its compound trace step and the model's compound ``spec``: the
    stacked score of each clause intent that is not the primary against ``threshold`` when two clauses
    lead with different intents, and the best other intent's against ``max(threshold, whole_threshold)``.
    The trace keeps each clause's top label only, so a clause term is that label's probability (the rule
    reads every label's). A step that states its own ``score`` and ``threshold`` is taken as it is."""
    step = trace_step(decision, "compound")
    if step is None:
        return []
    d = step.get("detail") or {}
    if "score" in d and "threshold" in d:
        return [(float(d["score"]), float(d["threshold"]))]
    classifier = trace_step(decision, "classifier") or {}
    primary = (classifier.get("detail") or {}).get("label") or top_intent(decision)
    if spec is None or not d.get("scores") or primary not in spec.intents:
        return []
    best: dict[str, float] = {}  # each label's best clause probability, over the clauses it leads
    for c in d.get("clauses") or ():
        best[c["label"]] = max(best.get(c["label"], 0.0), float(c["probability"]))
    stacked = stacked_scores(spec, d["scores"], best)
    leads = {k: p for k, p in best.items() if k not in RESERVED and p >= spec.clause_min}
    checks = []
    if len(leads) >= 2:
        pair = sorted(leads, key=lambda k: -leads[k])[:2]
        checks += [(stacked.get(k, 0.0), spec.threshold) for k in pair if k != primary]
        if all(s >= t for s, t in checks):
            return checks
    others = {k: v for k, v in stacked.items() if k != primary}
    if others:
        checks.append((max(others.values()), max(spec.threshold, spec.whole_threshold)))
    return checks


def reasons(record: Mapping, spec=None) -> list[str]:
    """Why a logged decision deserves a label (every rule but ``confident_sample``), most urgent first.
    ``spec``: the model's compound rule (manifest ``compound``), for ``borderline_compound``."""
    d = record.get("decision") or {}
    why = []
    guardrail = d.get("source") == "guardrail"
    scope = d.get("scope") or {}
    conf = record.get("confidence")
    ranking = d.get("ranking") or ()
    v = verifier_of(record)
    asked = v is not None and v.get("status") != NO_VERIFIER
    if asked and (v.get("status") != "accepted" or v.get("intent") != top_intent(d)):
        why.append("verifier_disagreed")
    classifier_oos = "classifier" in (scope.get("signals") or ())
    if conf is not None and conf < d.get("threshold", 0.0) and not classifier_oos and not guardrail:
        why.append("below_threshold")
    if record.get("reason_code") == "confident_compound" or any(
        abs(s - t) <= COMPOUND_BAND for s, t in compound_checks(d, spec)
    ):
        why.append("borderline_compound")
    top_label = ((trace_step(d, "classifier") or {}).get("detail") or {}).get("label")
    margin = ranking[0]["probability"] - ranking[1]["probability"] if len(ranking) >= 2 else 1.0
    if margin < MARGIN and not guardrail and top_label not in RESERVED:
        why.append("small_margin")
    dist, limit = scope.get("distance"), scope.get("distance_threshold")
    if dist is not None and limit and abs(dist / limit - 1.0) <= SCOPE_BAND:
        why.append("near_scope_boundary")
    return why


def confidently_accepted(record: Mapping) -> bool:
    """The classifier's own intent, at or above the threshold: what ``confident_sample`` draws from."""
    return record.get("reason_code") == "confident" and record.get("intent") is not None


# ------------------------------------------------------------------------------------ the queue
@dataclass
class Entry:
    """One kept (first-seen) message of the log: what the queue needs of its record."""

    index: int
    text: str
    role: str | None
    model_id: str | None
    intent: str | None
    confidence: float | None
    reason_code: str | None
    why: list[str]
    verifier: dict | None
    ranking: dict[str, float]
    previous_message: str | None = None
    previous_intents: list[str] = field(default_factory=list)  # the conversation's, from the turn before
    seen: int = 1
    cluster: int = -1
    llm_label: str | None = None

    @property
    def suggested(self) -> str:
        """The label to pre-select: the routed intent, else OUT_OF_SCOPE when that was the verdict, else
        the classifier's most probable label (a fallback is no claim that the message needs no skill)."""
        if self.intent is not None:
            return self.intent
        if self.reason_code == "out_of_scope" or not self.ranking:
            return OUT_OF_SCOPE
        return max(self.ranking, key=lambda k: self.ranking[k])

    @property
    def top_intents(self) -> list[str]:
        """The classifier's two most probable labels, for the reviewer to choose between."""
        return sorted(self.ranking, key=lambda k: -self.ranking[k])[:2]

    def key(self) -> tuple:
        """Pick order within a cluster: the most urgent reason, then lower confidence, then more reasons."""
        conf = self.confidence if self.confidence is not None else 0.0
        return (min(RANK[w] for w in self.why), conf, -len(self.why), self.index)


@dataclass
class Scan:
    """A log read once: the candidates (a reason each at least), the confidently accepted messages with
    none, and the counts."""

    candidates: list[Entry] = field(default_factory=list)
    confident: list[Entry] = field(default_factory=list)
    records: int = 0
    unique: int = 0
    skipped: int = 0  # records without a text message (invalid input)
    model_ids: Counter = field(default_factory=Counter)


def scan(records: Iterable[Mapping], spec=None) -> Scan:
    """Deduplicate ``records`` (first seen kept, the rest counted) and sort the kept ones into candidates
    and confidently accepted messages; everything else is dropped as it is read."""
    out, kept = Scan(), {}
    for r in records:
        out.records += 1
        text = r.get("message")
        if not isinstance(text, str):
            out.skipped += 1
            continue
        key = normalise(text)
        if key in kept:
            if kept[key] is not None:
                kept[key].seen += 1
            continue
        out.unique += 1
        out.model_ids[r.get("model_id")] += 1
        why = reasons(r, spec)
        if not why and not confidently_accepted(r):
            kept[key] = None
            continue
        entry = entry_of(r, out.unique - 1, why)
        kept[key] = entry
        (out.candidates if why else out.confident).append(entry)
    return out


def entry_of(r: Mapping, index: int, why: list[str]) -> Entry:
    """The queue's view of one log record, with the turn before it as the caller sent it."""
    return Entry(
        index=index,
        text=r["message"],
        role=r.get("role"),
        model_id=r.get("model_id"),
        intent=r.get("intent"),
        confidence=r.get("confidence"),
        reason_code=r.get("reason_code"),
        why=why,
        verifier=verifier_of(r),
        ranking=ranking_features(r.get("decision") or {}),
        previous_message=r.get("previous_message"),
        previous_intents=list(r.get("previous_intents") or []),
    )


def ranking_features(decision: Mapping) -> dict[str, float]:
    """A decision's probabilities by label (its ranking and its out-of-scope probability): the vector the
    queue clusters on when the model has no sentence embedding."""
    out = {x["intent"]: float(x["probability"]) for x in decision.get("ranking") or ()}
    oos = (decision.get("scope") or {}).get("out_of_scope_probability")
    if oos is not None:
        out[OUT_OF_SCOPE] = float(oos)
    return out


def ranking_vectors(entries: Sequence[Entry]) -> np.ndarray:
    labels = sorted({k for e in entries for k in e.ranking})
    return np.array([[e.ranking.get(k, 0.0) for k in labels] for e in entries], dtype=np.float64).reshape(
        len(entries), len(labels)
    )


def round_robin(entries: Sequence[Entry], quota: Mapping[str, int]) -> list[Entry]:
    """Pick over the clusters in turn (clusters ordered by their most urgent entry), each cluster's most
    urgent entry whose kind (``confident`` for the confident slice, else ``other``) has quota left."""
    clusters: dict[int, list[Entry]] = {}
    for e in sorted(entries, key=Entry.key):
        clusters.setdefault(e.cluster, []).append(e)
    order = sorted(clusters, key=lambda c: clusters[c][0].key())
    left, picked = dict(quota), []
    while any(v > 0 for v in left.values()):
        progressed = False
        for c in order:
            queue = clusters[c]
            i = next((i for i, e in enumerate(queue) if left.get(kind(e), 0) > 0), None)
            if i is not None:
                e = queue.pop(i)
                left[kind(e)] -= 1
                picked.append(e)
                progressed = True
        if not progressed:
            break
    return picked


def kind(e: Entry) -> str:
    return "confident" if e.why == ["confident_sample"] else "other"


@dataclass
class Selection:
    picked: list[Entry]
    scan: Scan
    sample: int  # confident messages drawn into the candidates
    clusters: int
    vectors: str  # "embedding" or "ranking"

    def counts(self) -> dict:
        """Candidates and picks by reason, and the log's counts: the summary the command prints."""
        cands = [*self.scan.candidates, *(e for e in self.scan.confident if e.why)]
        return {
            "records": self.scan.records,
            "unique": self.scan.unique,
            "duplicates": self.scan.records - self.scan.skipped - self.scan.unique,
            "skipped": self.scan.skipped,
            "confident_pool": len(self.scan.confident),
            "candidates": len(cands),
            "candidates_by_why": dict(Counter(w for e in cands for w in e.why)),
            "picked": len(self.picked),
            "picked_by_why": dict(Counter(w for e in self.picked for w in e.why)),
            "clusters": self.clusters,
            "clusters_picked": len({e.cluster for e in self.picked}),
            "vectors": self.vectors,
        }


Embedder = Callable[[list[str]], np.ndarray | None]
"""Sentence embeddings of texts, one row each; None when the model has none."""


def select(
    records: Iterable[Mapping],
    budget: int,
    embed: Embedder,
    confident_share: float = 0.1,
    seed: int = 0,
    spec=None,
) -> Selection:
    """The review queue of ``records``: exactly min(budget, candidates) entries, spread over clusters of
    ``embed``'s vectors, the confident slice among them (module docstring)."""
    if budget < 1:
        raise ReviewError(f"--budget must be at least 1, got {budget}")
    if not 0.0 <= confident_share <= 1.0:
        raise ReviewError(f"--confident-share must be in [0, 1], got {confident_share}")
    s = scan(records, spec)
    if s.records == 0:
        raise ReviewError("the decision log has no records")
    want = round(confident_share * budget)
    if confident_share > 0 and want == 0 and budget > 1:
        want = 1
    n_sample = min(len(s.confident), max(want, budget - len(s.candidates)))
    rng = np.random.default_rng([seed, 0])
    drawn = sorted(rng.choice(len(s.confident), size=n_sample, replace=False).tolist()) if n_sample else []
    for i in drawn:
        s.confident[i].why = ["confident_sample"]
    entries = [*s.candidates, *(s.confident[i] for i in drawn)]
    if not entries:
        return Selection([], s, 0, 0, "none")
    vectors = embed([e.text for e in entries])
    source = "embedding"
    if vectors is None:
        vectors, source = ranking_vectors(entries), "ranking"
    else:
        vectors = np.asarray(vectors, dtype=np.float64)
        vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    k = cluster_count(len(entries), budget)
    for e, c in zip(entries, kmeans(vectors, k, seed).tolist(), strict=True):
        e.cluster = c
    picked = round_robin(entries, {"confident": n_sample, "other": budget - n_sample})
    return Selection(picked, s, n_sample, len({e.cluster for e in entries}), source)
