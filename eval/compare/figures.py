"""Challenger gate figures: a candidate model against the incumbent (the running model), message by message.

A row is *right* when the routed intent equals its label; a row labelled OUT_OF_SCOPE or CONTINUATION
(routed alone, with no previous turn) is right when it gets no intent. A *confident mistake* is a wrong
row the router accepted at its threshold (reason ``confident``, ``confident_compound`` or
``matched_examples``): a wrong skill loaded with nothing to catch it.

The errors are paired per message: ``n01`` rows the incumbent gets right and the candidate wrong, ``n10``
the reverse. McNemar's exact test is the two-sided binomial test of ``min(n01, n10)`` in ``n01 + n10``
trials with p = 1/2; the continuity-corrected chi-square (1 degree of freedom) is given beside it for
reference. ``Rule``, ``verdict`` and ``latency_checks`` decide pass or fail (``Rule.text`` states the
rule).
eval.compare.report routes the messages through both models and writes the report.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from router.intents import RESERVED, is_right

ACCEPTED = ("confident", "confident_compound", "matched_examples")  # reason codes accepted at tau
NO_INTENT = "(no intent)"  # the answer of a decision without an intent; what reserved labels expect


class CompareError(ValueError):
    """The models, data or options cannot be compared; the message is one line."""


# ------------------------------------------------------------------------------- statistics
def mcnemar_exact(n01: int, n10: int) -> float:
    """Two-sided exact McNemar p-value: 2 * P(X <= min(n01, n10)), X ~ Binomial(n01 + n10, 1/2), at most 1."""
    if n01 < 0 or n10 < 0:
        raise ValueError("discordant counts must be >= 0")
    n = n01 + n10
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(n01, n10) + 1))
    return min(1.0, 2 * tail / 2**n)


def mcnemar_chi2(n01: int, n10: int) -> tuple[float, float]:
    """(statistic, p) of the continuity-corrected chi-square: max(0, |n01 - n10| - 1)^2 / (n01 + n10),
    1 degree of freedom. An approximation, poor with few discordant pairs; reported for reference only."""
    n = n01 + n10
    if n == 0:
        return 0.0, 1.0
    stat = max(0, abs(n01 - n10) - 1) ** 2 / n
    return stat, math.erfc(math.sqrt(stat / 2))


def min_discordant(alpha: float) -> int:
    """The fewest discordant pairs with which the exact two-sided test can reach p < alpha (all one way)."""
    k = 1
    while 2 * 0.5**k >= alpha:
        k += 1
    return k


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (linear interpolation between order statistics), None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


# ------------------------------------------------------------------------------------ verdict
@dataclass(frozen=True)
class Rule:
    """The candidate passes when all three checks hold.

    ``margin``: accuracy may fall by at most this much (0.01 = one point). ``alpha``: a candidate that
    makes more errors than the incumbent (n01 > n10) fails when McNemar's exact p < alpha.
    ``confident_tolerance``: extra confident mistakes allowed per 1000 messages compared."""

    margin: float = 0.0
    alpha: float = 0.05
    confident_tolerance: float = 1.0
    max_p50_ratio: float = 1.5
    max_p99_ratio: float = 2.0

    def check(self) -> None:
        if not (0.0 <= self.margin < 1.0):
            raise CompareError(f"--margin must be in [0, 1), got {self.margin}")
        if not (0.0 < self.alpha < 1.0):
            raise CompareError(f"--alpha must be in (0, 1), got {self.alpha}")
        if not (self.confident_tolerance >= 0.0 and math.isfinite(self.confident_tolerance)):
            raise CompareError(f"--confident-tolerance must be >= 0, got {self.confident_tolerance}")
        for name, ratio in (("--max-p50-ratio", self.max_p50_ratio), ("--max-p99-ratio", self.max_p99_ratio)):
            if not (ratio == 0 or (ratio >= 1.0 and math.isfinite(ratio))):
                raise CompareError(f"{name} must be 0 (no check) or at least 1, got {ratio}")

    def allowed_extra(self, n: int) -> float:
        """Extra confident mistakes allowed on ``n`` messages."""
        return self.confident_tolerance * n / 1000

    def text(self) -> str:
        return (
            f"PASS when (1) candidate accuracy >= incumbent accuracy - {self.margin:g}, "
            f"(2) no significant excess of errors (fails when McNemar exact p < {self.alpha:g} and n01 > n10), "
            f"(3) confident mistakes rise by at most {self.confident_tolerance:g} per 1000 messages, "
            f"(4) route() p50 at most {self.max_p50_ratio:g}x and p99 at most {self.max_p99_ratio:g}x the "
            "incumbent's (0: not checked)"
        )


@dataclass
class Check:
    name: str
    passed: bool
    value: float
    limit: float
    detail: str

    def to_dict(self) -> dict:
        return asdict(self)


def verdict(
    rule: Rule, n: int, n01: int, n10: int, confident_incumbent: int, confident_candidate: int
) -> list[Check]:
    """The rule's three checks on paired counts (accuracy delta = (n10 - n01) / n)."""
    delta = (n10 - n01) / n
    p = mcnemar_exact(n01, n10)
    extra, allowed = confident_candidate - confident_incumbent, rule.allowed_extra(n)
    return [
        Check(
            "accuracy",
            delta >= -rule.margin - 1e-12,
            round(delta, 6),
            -rule.margin,
            f"accuracy delta {delta:+.4f} (candidate - incumbent), at least "
            + (f"-{rule.margin:g}" if rule.margin else "0"),
        ),
        Check(
            "significance",
            not (p < rule.alpha and n01 > n10),
            round(p, 6),
            rule.alpha,
            f"McNemar exact p = {p:.4g} on n01 = {n01}, n10 = {n10}"
            + (" (candidate makes more errors)" if n01 > n10 else ""),
        ),
        Check(
            "confident_mistakes",
            extra <= allowed + 1e-12,
            extra,
            round(allowed, 6),
            f"confident mistakes {confident_incumbent} -> {confident_candidate} ({extra:+d}), "
            f"at most {allowed:.2f} more on {n} messages",
        ),
    ]


P99_MIN_SAMPLES = 100  # below this, p99 is about the slowest message: a ratio of two maxima, not checked


def latency_checks(rule: Rule, incumbent: Routed, candidate: Routed) -> list[Check]:
    """The candidate's route() p50 and p99 against the incumbent's, timed interleaved on the same messages
    (eval.compare.report.route_both). A limit of 0 turns its check off."""
    checks = []
    for q, limit in ((50, rule.max_p50_ratio), (99, rule.max_p99_ratio)):
        if not limit:
            continue
        a, b = percentile(incumbent.ms, q), percentile(candidate.ms, q)
        ratio = b / a if a and b is not None else 1.0
        n = len(candidate.ms)
        if q == 99 and n < P99_MIN_SAMPLES:
            detail = (
                f"p99 not checked on {n} messages (at least {P99_MIN_SAMPLES}): it is about the slowest one"
            )
            checks.append(Check("latency_p99", True, round(ratio, 4), limit, detail))
            continue
        detail = f"route() p{q} {a:.3f} -> {b:.3f} ms ({ratio:.2f}x), at most {limit:g}x"
        checks.append(Check(f"latency_p{q}", ratio <= limit + 1e-12, round(ratio, 4), limit, detail))
    return checks


# ---------------------------------------------------------------------------------- figures
@dataclass
class Routed:
    """One model's answers to the rows: intent, reason code and route() milliseconds per row."""

    gold: list[str]
    intents: list[str | None]
    reasons: list[str]
    ms: list[float]

    def __post_init__(self) -> None:
        self.right = [is_right(l, i) for l, i in zip(self.gold, self.intents, strict=True)]
        self.confident = [not r and c in ACCEPTED for r, c in zip(self.right, self.reasons, strict=True)]

    def figures(self) -> dict:
        n, right, confident = len(self.gold), sum(self.right), sum(self.confident)
        p50, p90, p99 = percentile(self.ms, 50), percentile(self.ms, 90), percentile(self.ms, 99)
        return {
            "right": right,
            "accuracy": round(right / n, 6),
            "accepted": sum(c in ACCEPTED for c in self.reasons),
            "accepted_share": round(sum(c in ACCEPTED for c in self.reasons) / n, 6),
            "confident_mistakes": confident,
            "confident_mistakes_per_1000": round(1000 * confident / n, 3),
            "latency_ms": {"p50": _r(p50, 4), "p90": _r(p90, 4), "p99": _r(p99, 4), "samples": len(self.ms)},
        }

    def class_figures(self, name: str) -> tuple[float, float | None]:
        """(recall, F1) of a label; a reserved label's recall is the share of its rows given no intent,
        and its F1 is None (the reserved labels share one answer, no intent: see NO_INTENT)."""
        if name in RESERVED:
            rows = [r for l, r in zip(self.gold, self.right, strict=True) if l == name]
            return sum(rows) / len(rows), None
        expected = [NO_INTENT if l in RESERVED else l for l in self.gold]
        answers = [NO_INTENT if i is None else i for i in self.intents]
        true, pred = expected.count(name), answers.count(name)
        tp = sum(e == name == a for e, a in zip(expected, answers, strict=True))
        return tp / true, 2 * tp / (true + pred)


def _r(x: float | None, digits: int = 6) -> float | None:
    return None if x is None else round(x, digits)


def _both(a: list[bool], b: list[bool]) -> tuple[int, int, int, int]:
    """(a and b, a only, b only, neither) over paired flags."""
    pairs = list(zip(a, b, strict=True))
    return (
        sum(x and y for x, y in pairs),
        sum(x and not y for x, y in pairs),
        sum(y and not x for x, y in pairs),
        sum(not x and not y for x, y in pairs),
    )


def per_class(inc: Routed, cand: Routed) -> list[dict]:
    """Recall per label and F1 per intent (and for the no-intent answer the reserved labels share),
    incumbent, candidate and delta (candidate minus incumbent)."""
    names = list(dict.fromkeys(inc.gold))
    reserved = [l for l in names if l in RESERVED]
    rows = []
    for name in [l for l in names if l not in RESERVED] + reserved + ([NO_INTENT] if reserved else []):
        (ri, fi), (rc, fc) = inc.class_figures(name), cand.class_figures(name)
        n = sum(l in RESERVED for l in inc.gold) if name == NO_INTENT else inc.gold.count(name)
        f1 = None if fi is None or fc is None else _triple(fi, fc)
        rows.append({"label": name, "n": n, "recall": _triple(ri, rc), "f1": f1})
    return rows


def _triple(inc: float, cand: float) -> dict:
    return {"incumbent": round(inc, 6), "candidate": round(cand, 6), "delta": round(cand - inc, 6)}


def paired(inc: Routed, cand: Routed, alpha: float) -> dict:
    both, n01, n10, neither = _both(inc.right, cand.right)
    stat, p_chi2 = mcnemar_chi2(n01, n10)
    return {
        "n": len(inc.gold),
        "both_right": both,
        "both_wrong": neither,
        "n01": n01,
        "n10": n10,
        "accuracy_delta": round((n10 - n01) / len(inc.gold), 6),
        "mcnemar_exact_p": round(mcnemar_exact(n01, n10), 6),
        "chi2_corrected": round(stat, 6),
        "chi2_corrected_p": round(p_chi2, 6),
        "discordant_needed": min_discordant(alpha),
    }


def confident_pairs(inc: Routed, cand: Routed) -> dict:
    _, only_inc, only_cand, _ = _both(inc.confident, cand.confident)
    a, b = sum(inc.confident), sum(cand.confident)
    return {
        "incumbent": a,
        "candidate": b,
        "delta": b - a,
        "only_incumbent": only_inc,
        "only_candidate": only_cand,
    }
