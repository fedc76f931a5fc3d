"""Router: guardrail -> classifier -> threshold -> verifier or fallback -> skills -> RBAC -> tools -> Decision.

One message through ``Router.route``: router.message admits it (guardrail) and classifies the batch it is
part of; ``Router._classified`` then reads the Classification in named steps (the turn reader's reading
or the prior after a turn, intents defined by examples, continuation, out of scope, its own intent or the
verifier and fallback), each adding its step to the message's trace, and ``_routed`` or ``_skill_free``
builds the Decision once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from router.batches import check_route_arguments
from router.classification import Classification, RoutingClassifier
from router.classifier import Classifier
from router.compound import compound_confidence
from router.config import RouterConfig, validate_threshold
from router.conversation import (
    Context,
    Reading,
    Turn,
    after_previous,
    carried_intents,
    context_weight,
    conversation_after,
    in_context,
    is_continuation,
    knows_continuations,
    read_turn,
    resolve_context,
    with_prior,
)
from router.decision import CLARIFY_MESSAGE, OUT_OF_SCOPE_MESSAGE, Decision, ReasonCode
from router.decision_log import DecisionLog, config_hash
from router.examples import ExampleIntents
from router.grants import SkillGrants
from router.intents import RESERVED, intent_pair, intents_of
from router.language import LanguageCheck
from router.message import Message, admit, classify_admitted
from router.shipped import default_model_dir
from router.steps import compound_step, ranking, scope_of, step
from router.tools.registry import ToolRegistry
from router.tools.stage import ToolStage
from router.verifier import Verifier
from router.verifier.stage import Verification, check_verifier, verify_stage


@dataclass(frozen=True)
class Ask:
    """What a classified message asks for, judged against its threshold."""

    primary: str  # its end goal: the first of its intents, else the classifier's top label
    secondary: str | None  # a compound request's other intent
    threshold: float  # the primary's own (config ``thresholds``), else the router's
    pair: float  # how sure the model is of its intents together (router.compound.compound_confidence)
    own: bool  # no out-of-scope signal, an intent, and sure of it: routed as classified


@dataclass(frozen=True)
class Route:
    """Where a message goes before skills and RBAC: its intents (none: the fallback's), source and reason."""

    intents: tuple[str, ...]
    source: str
    reason: ReasonCode


class Router:
    """Routes messages to intents and skills. Thread-safe: it holds no per-request state. It reads its
    config's skills and roles once per role and intents (router.grants): for another config, build another
    Router. Any classifier with the members of router.classification.RoutingClassifier routes."""

    def __init__(
        self,
        classifier: RoutingClassifier,
        config: RouterConfig | None = None,
        verifier: Verifier | None = None,
        threshold: float | None = None,
        decision_log: DecisionLog | None = None,
        tools: str | Path | ToolRegistry | None = None,
    ) -> None:
        self.classifier = classifier
        self.decision_log = decision_log  # every top-level routed message is recorded there (opt-in)
        self.config = config or RouterConfig.load()
        self.threshold = validate_threshold(threshold if threshold is not None else self.config.threshold)
        # an intent's own threshold (config ``thresholds``), unless the caller set one for all
        self.thresholds = dict(self.config.thresholds) if threshold is None else {}
        self.verifier = verifier
        model_intents = intents_of(classifier.labels)
        self.config.check_intents(model_intents, f"the model {classifier.model_id}")
        defined = self.config.example_intents(model_intents)
        self.examples = ExampleIntents(classifier, defined, self.config.thresholds) if defined else None
        self.intents = (*model_intents, *defined)  # the model's, in its order, then those defined by examples
        if self.examples is not None:  # similarity thresholds, whatever the caller's threshold
            self.thresholds.update({n: e.threshold for n, e in self.examples.intents.items()})
        check_verifier(verifier, self.intents)
        self._grants = SkillGrants(self.config)
        languages = getattr(classifier, "languages", None)
        self.language = LanguageCheck.for_model(languages) if self.config.language_check else None
        self.conversational = knows_continuations(classifier.labels)
        # a model with a turn reader reads each message after a turn with it (router.turn_reader)
        self.reads_turns = self.conversational and getattr(classifier, "turn_reader", None) is not None
        self.context_weight = context_weight(classifier.label_counts)
        self.config_sha = config_hash(self.config)  # which config routed a logged message
        self.tools = ToolStage.of(tools, self.config)  # a tool registry's tools, picked per message

    @classmethod
    def load(
        cls,
        model_dir: str | Path | None = None,
        config: str | Path | RouterConfig | None = None,
        verifier: Verifier | None = None,
        threshold: float | None = None,
        variant: str | None = None,
        intra_op_threads: int | None = None,
        decision_log: DecisionLog | None = None,
        tools: str | Path | ToolRegistry | None = None,
    ) -> Router:
        cfg = config if isinstance(config, RouterConfig) else RouterConfig.load(config)
        # the Classifier resolves a shipped model's name (router.shipped.resolve_model_dir)
        clf = Classifier(model_dir or default_model_dir(), variant=variant, intra_op_threads=intra_op_threads)
        return cls(clf, cfg, verifier, threshold, decision_log, tools)

    # ------------------------------------------------------------------------------------ route
    def route(
        self, text: str, role: str, previous: Decision | None = None, context: str | None = None
    ) -> Decision:
        """Route one message. In a conversation, pass the previous turn: its Decision (``previous``), or,
        when the caller keeps no decisions, its message (``context``); a continuation ("same for
        staging", "yes, do it") then takes the conversation's intents (router.conversation)."""
        return self.route_batch([text], role, previous=previous, context=context)[0]

    def route_batch(
        self,
        texts: Sequence[str],
        role: str,
        previous: Decision | None = None,
        context: str | None = None,
        log_fields: Mapping[str, str | None] | None = None,
    ) -> list[Decision]:
        """Route many messages, each read after the same previous turn when one is given; the classifier
        runs once over all that pass the guardrail (router.message). With a decision log, each message and
        its Decision are recorded (router.decision_log), with ``log_fields`` (e.g. the service's request
        and key ids) in each record."""
        decisions = self._route_batch(texts, role, previous, context)
        if self.tools is not None:
            self.tools.apply(decisions, texts)
        if self.decision_log is not None:
            for text, d in zip(texts, decisions, strict=True):
                message = text if isinstance(text, str) else ""
                self.decision_log.write(d, message, self.config_sha, context, previous, log_fields)
        return decisions

    def _route_batch(self, texts, role, previous=None, context=None) -> list[Decision]:
        check_route_arguments(texts, role, context)
        turn = Turn(previous, context)
        t0 = time.perf_counter()
        intakes = [admit(t, self.config.max_chars) for t in texts]
        admitted = classify_admitted(self.classifier, intakes, self.reads_turns and turn.given)
        shared_ms = (time.perf_counter() - t0) * 1000 / max(1, len(texts))
        return [self._decide(Message(intake, c, role, turn, shared_ms)) for intake, c in admitted]

    def _decide(self, m: Message) -> Decision:
        """One message's Decision: stopped by the guardrail, or read from its classification."""
        why = m.intake.invalid
        if why is not None:
            message = f"invalid input ({why}): nothing was routed"
            return self._skill_free(m, ReasonCode.INVALID_INPUT, "guardrail", False, message)
        if m.classification is None:  # not classified, not invalid: low signal
            why = m.intake.low_signal
            message = f"low-signal input ({why}): no skills are loaded; ask the user what they need"
            return self._skill_free(m, ReasonCode.LOW_SIGNAL, "guardrail", True, message)
        return self._classified(m, m.classification)

    # ---------------------------------------------------------------------- a classified message
    def _classified(self, m: Message, raw: Classification) -> Decision:
        """An intent defined by examples; else a continuation of the conversation; else out of scope; else
        its own intent when sure of it; else the verifier's, the conversation's, or the fallback."""
        c = self._after_turn(m, raw)
        scope = scope_of(c, self.threshold, self.classifier.distance_threshold)
        signals = scope["signals"]
        match = self.examples.match(c.embedding) if self.examples is not None else None
        if match is not None:  # an intent defined by examples (router.examples)
            m.trace.append(step("examples", "matched", match))
            route = Route((match["intent"],), "examples", ReasonCode.MATCHED_EXAMPLES)
            return self._routed(m, c, scope, route)
        ask = self._ask(c, signals)
        foreign = self.language.unsupported(m.text, sure=ask.own) if self.language is not None else None
        if foreign is not None:  # a language the model does not read: never out of scope on its reading
            m.trace.append(step("language", "unsupported", foreign))
            return self._unreadable(m, c, scope)
        if self.conversational and c.turn is None and is_continuation(c, self.threshold, m.turn.given):
            return self._continuation(m, c, scope)
        reading = (
            self._in_conversation(m, c, ask, signals)
            if self.conversational
            else after_previous(m.turn, signals)
        )
        if reading.continuation is not None:
            return self._continuation(m, c, scope, reading.context, reading.continuation)
        if reading.out_of_scope:
            m.trace.append(step("scope", "out_of_scope", {"signals": signals}))
            return self._out_of_scope(m, c, scope, "classifier")
        route = self._accepted(m, c, ask) if ask.own else self._unsure(m, c, ask, signals, reading)
        if route.reason == ReasonCode.OUT_OF_SCOPE:  # the verifier's verdict
            return self._out_of_scope(m, c, {**scope, "signals": [*signals, "verifier"]}, route.source)
        if not route.intents:  # the fallback: the fallback intents' skills, or none: ask the user
            m.trace.append(step("fallback", "used", {"intents": list(self.config.fallback_intents)}))
            if not self.config.fallback_intents:
                route = replace(route, reason=ReasonCode.CLARIFY)
        return self._routed(m, c, scope, route)

    def _after_turn(self, m: Message, c: Classification) -> Classification:
        """``c`` as read after a previous turn, where a continuation is likelier than the training rows
        say (router.conversation.with_prior); ``c`` itself without one, or for a model without the label."""
        if not (self.conversational and m.turn.given):
            return c
        if c.turn is not None:  # the turn reader says what it is (router.turn_reader)
            m.trace.append(step("conversation", "turn", {k: round(p, 6) for k, p in c.turn.items()}))
            return c
        c = with_prior(c, self.context_weight)
        prior = {
            "label": c.label,
            "confidence": round(c.confidence, 6),
            "weight": round(self.context_weight, 4),
        }
        m.trace.append(step("conversation", "prior", prior))
        return c

    def _ask(self, c: Classification, signals: list[str]) -> Ask:
        """Its intents, the primary's threshold, and whether it is its own request, sure of them."""
        primary = c.intents[0] if c.intents else c.label  # a compound request: its end goal first
        secondary = c.intents[1] if len(c.intents) > 1 else None
        pair = compound_confidence(dict(c.ranking), c.intents, c.clauses)
        tau = self.thresholds.get(primary, self.threshold)
        sure = c.confidence >= tau or pair >= tau
        return Ask(primary, secondary, tau, pair, not signals and primary not in RESERVED and sure)

    def _in_conversation(self, m: Message, c: Classification, ask: Ask, signals: list[str]) -> Reading:
        """For a model that knows continuations: small talk is out of scope whatever came before; any other
        message not sure of its own intent is read after the previous turn (router.conversation.in_context):
        a continuation when its continuation and conversation-intent probabilities together reach the
        threshold, else a follow-up when they lead. With a turn reader, its verdict decides instead
        (router.conversation.read_turn)."""
        if c.turn is not None:
            return (
                Reading() if ask.own else read_turn(c.turn, signals, lambda: self._context(m), self.threshold)
            )
        ctx = self._context(m) if m.turn.given and not ask.own and "classifier" not in signals else None
        if ctx is None:
            return Reading(out_of_scope=bool(signals))
        best, mass = in_context(c.ranking, ctx.intents[0])
        if best == ctx.intents[0] and mass >= self.threshold:
            return Reading(ctx, continuation=mass)
        return Reading(ctx, follow_up=best == ctx.intents[0], out_of_scope=bool(signals) and best is None)

    def _accepted(self, m: Message, c: Classification, ask: Ask) -> Route:
        """Its own intents: the classifier is sure of the primary, or of the two intents together."""
        detail = {"threshold": ask.threshold}
        reason = ReasonCode.CONFIDENT
        if c.confidence < ask.threshold:  # unsure only between the two intents the message asks for
            detail["pair_confidence"] = round(ask.pair, 6)
            reason = ReasonCode.CONFIDENT_COMPOUND
        m.trace.append(step("threshold", "accepted", detail))
        if c.intent_scores is not None:
            m.trace.append(compound_step(c))
        return Route(intent_pair(ask.primary, ask.secondary), "classifier", reason)

    def _unsure(self, m: Message, c: Classification, ask: Ask, signals: list[str], reading: Reading) -> Route:
        """Unsure, or out of scope right after a turn it may continue ("yes", "and for next week?"): the
        verifier's intents; else, for a follow-up, the conversation's; else none (the fallback)."""
        status = "out_of_scope_follow_up" if signals else "below"
        m.trace.append(step("threshold", status, {"threshold": ask.threshold}))
        ctx = reading.context
        if reading.follow_up and ctx is None:  # a model without the label: the previous turn's intents
            ctx = self._context(m)
        v = self._verify(m, c, lambda: ctx or self._context(m))
        if v.intent is None and v.reason != ReasonCode.OUT_OF_SCOPE and reading.follow_up and ctx is not None:
            m.trace.append(step("follow_up", "kept_previous", ctx.detail()))
            return Route(
                intent_pair(ctx.intents[0], ctx.secondary), "fallback", ReasonCode.FOLLOW_UP_UNVERIFIED
            )
        return Route(intent_pair(v.intent, v.secondary), v.source, v.reason)

    def _unreadable(self, m: Message, c: Classification, scope: dict) -> Decision:
        """A message in a language the model does not read: the verifier's intents or verdict, else the
        fallback's skills, with reason ``unsupported_language``."""
        v = self._verify(m, c, lambda: self._context(m))
        if v.reason == ReasonCode.OUT_OF_SCOPE:  # the verifier read it: no skill needed
            return self._out_of_scope(m, c, {**scope, "signals": ["verifier"]}, v.source)
        if v.intent is not None:
            return self._routed(m, c, scope, Route(intent_pair(v.intent, v.secondary), v.source, v.reason))
        m.trace.append(step("fallback", "used", {"intents": list(self.config.fallback_intents)}))
        return self._routed(m, c, scope, Route((), "fallback", ReasonCode.UNSUPPORTED_LANGUAGE))

    def _verify(
        self, m: Message, c: Classification, read_context: Callable[[], Context | None]
    ) -> Verification:
        """The verifier stage for the message (router.verifier.stage), its step and time recorded."""
        v = verify_stage(self.verifier, m.text, c, m.turn, read_context, self.intents)
        m.trace.append(v.step)
        m.verifier_ms = v.ms
        return v

    def _context(self, m: Message) -> Context | None:
        """The conversation a continuation is read in (router.conversation.resolve_context); a previous
        message given without its Decision is routed here, with the same role."""
        return resolve_context(
            m.turn.previous, m.turn.context, lambda text: list(self._route_batch([text], m.role)[0].intents)
        )

    def _continuation(
        self,
        m: Message,
        c: Classification,
        scope: dict,
        ctx: Context | None = None,
        mass: float | None = None,
    ) -> Decision:
        """A continuation at or above the threshold (or, read in context, a message whose continuation
        and conversation-intent probabilities together reach it: ``mass``): the conversation's intents,
        or, with no previous turn to read it with, no intent and no skill (reason ``needs_context``)."""
        ctx = ctx or self._context(m)
        if ctx is None:
            m.trace.append(step("conversation", "no_context"))
            message = (
                "a continuation of an earlier turn, with no previous turn to read it with: pass the previous "
                "Decision (previous=) or message (context=); no skills are loaded"
            )
            return self._skill_free(m, ReasonCode.NEEDS_CONTEXT, "classifier", True, message, c, scope)
        detail = ctx.detail() if mass is None else {**ctx.detail(), "in_context": round(mass, 6)}
        m.trace.append(step("conversation", "continuation", detail))
        return self._routed(m, c, scope, Route(ctx.intents, "classifier", ReasonCode.FOLLOW_UP))

    # -------------------------------------------------------------------------------- decisions
    def _routed(self, m: Message, c: Classification, scope: dict, route: Route) -> Decision:
        """The Decision for ``route`` (no intents: the fallback's skills), after RBAC."""
        intents = list(route.intents)
        intent = intents[0] if intents else None
        g = self._grants.get(m.role, route.intents)
        rbac = {"granted": [*g.required, *g.optional], "denied": [d["skill"] for d in g.denied]}
        m.trace.append(step("rbac", "ok" if g.servable else "required_denied", rbac))
        rank = ranking(c)
        return m.decision(
            intent=intent,
            intents=intents,
            conversation_intents=conversation_after(
                intents, m.turn.previous, rank, route.source == "fallback"
            ),
            confidence=c.confidence,
            ranking=rank,
            scope=scope,
            source=route.source,
            reason_code=route.reason,
            skills={"required": list(g.required), "optional": list(g.optional)},
            denied=g.denied,
            servable=g.servable,
            message=CLARIFY_MESSAGE if route.reason == ReasonCode.CLARIFY and not g.message else g.message,
            requires_confirmation=g.requires_confirmation,
            context_budget=g.context_budget,
            threshold=self.thresholds.get(intent, self.threshold),
            model_id=self.classifier.model_id,
        )

    def _skill_free(
        self,
        m: Message,
        reason: ReasonCode,
        source: str,
        servable: bool,
        message: str,
        c: Classification | None = None,
        scope: dict | None = None,
    ) -> Decision:
        """A decision that loads no skill: invalid input, low signal, out of scope, a continuation with no
        context. It keeps the previous turn's conversation intents, so a continuation after small talk
        still finds them."""
        return m.decision(
            intent=None,
            conversation_intents=carried_intents(m.turn.previous),
            confidence=c.confidence if c is not None else None,
            ranking=ranking(c) if c is not None else [],
            scope=scope,
            source=source,
            reason_code=reason,
            skills={"required": [], "optional": []},
            servable=servable,
            message=message,
            threshold=self.threshold,
            model_id=self.classifier.model_id,
        )

    def _out_of_scope(self, m: Message, c: Classification, scope: dict, source: str) -> Decision:
        return self._skill_free(m, ReasonCode.OUT_OF_SCOPE, source, True, OUT_OF_SCOPE_MESSAGE, c, scope)
