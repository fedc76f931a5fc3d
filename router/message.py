"""One message on its way through Router.route_batch: what the guardrail admits (``admit``, ``Intake``), the
batch classification of those it passes (``classify_admitted``), and the message's own state while the
Router decides it (``Message``), from which its Decision is built once, complete."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from router.classification import Classification, RoutingClassifier
from router.conversation import Turn
from router.decision import Decision
from router.guardrail import low_signal_reason, repair_text
from router.steps import classifier_step, guardrail_step


@dataclass(frozen=True)
class Intake:
    """A message as the guardrail leaves it: repaired (router.guardrail.repair_text), cut to the config's
    ``max_chars``, and why it is not classified, if it is not."""

    text: str
    chars: int  # its length once repaired, before the cut
    truncated_chars: bool = False
    repaired: int = 0  # lone surrogates replaced or pairs joined
    invalid: str | None = None  # not a string, or a text the classifier could not take
    low_signal: str | None = None  # router.guardrail.low_signal_reason

    @property
    def passed(self) -> bool:
        return self.invalid is None and self.low_signal is None


def admit(text: object, max_chars: int) -> Intake:
    """The guardrail over one message, before any is classified."""
    if not isinstance(text, str):  # e.g. null or a number from a JSON client
        return Intake("", 0, invalid=f"not a string ({type(text).__name__})")
    text, repaired = repair_text(text)
    chars = len(text)
    if chars > max_chars:
        text = text[:max_chars]
    return Intake(text, chars, chars > max_chars, repaired, low_signal=low_signal_reason(text))


def classify_admitted(
    classifier: RoutingClassifier, intakes: Sequence[Intake], read_turns: bool = False
) -> list[tuple[Intake, Classification | None]]:
    """Each message with its Classification (None when the guardrail stopped it). The messages it passes
    are classified in one batch; if the batch fails, message by message, so one message the tokenizer or
    the graph cannot take costs only its own decision: its intake then says why (``invalid``).
    ``read_turns``: they follow a turn, and the classifier's turn reader (router.turn_reader) reads them."""
    out: list[tuple[Intake, Classification | None]] = [(intake, None) for intake in intakes]
    todo = [i for i, intake in enumerate(intakes) if intake.passed]
    if not todo:
        return out
    classify = (
        partial(classifier.classify_batch, read_turns=True) if read_turns else classifier.classify_batch
    )
    try:
        found = list(zip(todo, classify([intakes[i].text for i in todo]), strict=True))
    except Exception:
        if len(todo) > 1:
            for i in todo:
                out[i] = _classify_alone(classify, intakes[i])
        else:  # it failed alone: the same call would fail again
            out[todo[0]] = (
                replace(intakes[todo[0]], invalid="the classifier could not take this text"),
                None,
            )
        return out
    for i, c in found:
        out[i] = (intakes[i], c)
    return out


def _classify_alone(classify, intake: Intake) -> tuple[Intake, Classification | None]:
    try:
        return intake, classify([intake.text])[0]
    except Exception as e:
        return replace(intake, invalid=f"the classifier could not take this text ({type(e).__name__})"), None


@dataclass
class Message:
    """One message while the Router decides it. Its trace opens with the guardrail's step and, for a
    message the classifier read, the classifier's; the stages append theirs. ``shared_ms`` is its share of
    the batch's guardrail and classifier time, ``started`` when its own stage began: together, the
    Decision's total latency."""

    intake: Intake
    classification: Classification | None
    role: str
    turn: Turn
    shared_ms: float
    started: float = field(default_factory=time.perf_counter)
    trace: list[dict] = field(init=False)
    verifier_ms: float | None = None  # set by the verifier stage when it asked one

    def __post_init__(self) -> None:
        self.trace = [guardrail_step(self.intake)]
        if self.classification is not None:
            self.trace.append(classifier_step(self.classification))

    @property
    def text(self) -> str:
        return self.intake.text

    def decision(self, **fields) -> Decision:
        """The Decision: what the stages decided (``fields``) with the message's role, input, latency and
        trace, validated once (router.steps)."""
        c = self.classification
        latency = {}
        if c is not None:
            latency = {"tokenize_ms": round(c.tokenize_ms, 4), "inference_ms": round(c.inference_ms, 4)}
        if self.verifier_ms is not None:
            latency["verifier_ms"] = self.verifier_ms
        latency["total_ms"] = round(self.shared_ms + (time.perf_counter() - self.started) * 1000, 4)
        info = {
            "chars": self.intake.chars,
            "truncated_chars": self.intake.truncated_chars,
            "truncated_tokens": c.truncated if c is not None else False,
        }
        return Decision.model_validate(
            {**fields, "role": self.role, "input": info, "latency": latency, "trace": self.trace}
        )
