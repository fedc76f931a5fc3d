"""Router: guardrail -> classifier -> threshold -> verifier or fallback -> skills -> RBAC -> Decision."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

from router import env as envvars
from router.classifier import Classification, Classifier
from router.compound import compound_confidence
from router.config import RouterConfig, validate_threshold
from router.conversation import (
    carried_intents,
    context_weight,
    conversation_after,
    in_context,
    is_continuation,
    knows_continuations,
    resolve_context,
    with_prior,
)
from router.decision import Decision, ReasonCode
from router.examples import ExampleIntents
from router.grants import SkillGrants
from router.guardrail import low_signal_reason, repair_text
from router.intents import RESERVED, intents_of
from router.steps import compound_step, ranking, scope_of, step
from router.verifier import Verifier
from router.verifier.stage import check_verifier, verify_stage

MODEL_ENV = "INTENT_ROUTER_MODEL"
SHIPPED_MODEL = Path(__file__).resolve().parent.parent / "models" / "intent-minilm"  # source checkout
INSTALLED_MODEL = Path(sys.prefix) / "share" / "intent-router" / "models" / "intent-minilm"  # pip install .


def default_model_dir() -> Path:
    """$INTENT_ROUTER_MODEL, else the shipped model: this checkout's models/ folder, or the copy that a
    regular (non-editable) install puts under <prefix>/share/intent-router/."""
    env = envvars.get_str(MODEL_ENV)
    if env:
        return Path(env)
    if (SHIPPED_MODEL / "manifest.json").is_file() or not (INSTALLED_MODEL / "manifest.json").is_file():
        return SHIPPED_MODEL
    return INSTALLED_MODEL


class Router:
    """Routes messages to intents and skills. Thread-safe: it holds no per-request state. It reads its
    config's skills and roles once per role and intents (router.grants): for another config, build another
    Router."""

    def __init__(
        self,
        classifier: Classifier,
        config: RouterConfig | None = None,
        verifier: Verifier | None = None,
        threshold: float | None = None,
    ) -> None:
        self.classifier = classifier
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
        self.conversational = knows_continuations(classifier.labels)
        data = classifier.manifest.training.data
        self.context_weight = context_weight(data.label_counts if data is not None else None)

    @classmethod
    def load(
        cls,
        model_dir: str | Path | None = None,
        config: str | Path | RouterConfig | None = None,
        verifier: Verifier | None = None,
        threshold: float | None = None,
        variant: str | None = None,
        intra_op_threads: int | None = None,
    ) -> Router:
        cfg = config if isinstance(config, RouterConfig) else RouterConfig.load(config)
        clf = Classifier(model_dir or default_model_dir(), variant=variant, intra_op_threads=intra_op_threads)
        return cls(clf, cfg, verifier=verifier, threshold=threshold)

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
    ) -> list[Decision]:
        """Route many messages, each read after the same previous turn when one is given; the classifier
        runs once over all that pass the guardrail."""
        if context is not None and not isinstance(context, str):
            raise TypeError(f"context must be the previous message as a str, got {type(context).__name__}")
        if isinstance(texts, str):
            raise TypeError("route_batch takes a sequence of strings; use route(text, role) for one message")
        if not isinstance(role, str):
            raise TypeError(f"role must be a str, got {type(role).__name__}")
        t0 = time.perf_counter()
        prepared: list[tuple[str, dict, str | None, int]] = []
        for text in texts:
            if not isinstance(text, str):  # e.g. null or a number from a JSON client
                prepared.append(("", {"chars": 0}, f"not a string ({type(text).__name__})", 0))
                continue
            text, repaired = repair_text(text)
            info = {"chars": len(text)}  # InputInfo
            if len(text) > self.config.max_chars:
                text = text[: self.config.max_chars]
                info["truncated_chars"] = True
            prepared.append((text, info, None, repaired))
        results: dict[int, Classification] = {}
        invalid: dict[int, str] = {i: why for i, (_, _, why, _) in enumerate(prepared) if why}
        low: dict[int, str] = {}
        for i, (text, _, why, _) in enumerate(prepared):
            if why is None:
                reason = low_signal_reason(text)
                if reason is not None:
                    low[i] = reason
        to_classify = [i for i in range(len(prepared)) if i not in invalid and i not in low]
        if to_classify:
            results, failed = self._classify(to_classify, [prepared[i][0] for i in to_classify])
            invalid.update(failed)
        shared_ms = (time.perf_counter() - t0) * 1000 / max(1, len(texts))
        out = []
        for i, (text, info, _, repaired) in enumerate(prepared):
            t_msg = time.perf_counter()
            if i in invalid:
                d = self._invalid(role, info, invalid[i], previous)
            elif i in low:
                d = self._guardrail(role, info, low[i], previous)
            else:
                d = self._decide(text, role, info, results[i], previous, context)
            if repaired:
                d.trace[0].detail["repaired_surrogates"] = repaired
            d.latency.total_ms = round(shared_ms + (time.perf_counter() - t_msg) * 1000, 4)
            out.append(d)
        return out

    def _classify(
        self, indices: list[int], texts: list[str]
    ) -> tuple[dict[int, Classification], dict[int, str]]:
        """Classify in one batch; if the batch fails, message by message, so one message the tokenizer or
        the graph cannot take costs only its own decision (reason ``invalid_input``)."""
        try:
            return dict(zip(indices, self.classifier.classify_batch(texts), strict=True)), {}
        except Exception:
            if len(texts) == 1:
                return {}, {indices[0]: "the classifier could not take this text"}
        results: dict[int, Classification] = {}
        failed: dict[int, str] = {}
        for i, text in zip(indices, texts, strict=True):
            try:
                results[i] = self.classifier.classify_batch([text])[0]
            except Exception as e:
                failed[i] = f"the classifier could not take this text ({type(e).__name__})"
        return results, failed

    # ---------------------------------------------------------------------------------- stages
    # The stages build the Decision's parts as plain dicts (router.steps) and validate them once.
    def _skill_free(
        self,
        role,
        info,
        reason,
        source,
        servable,
        message,
        trace,
        c=None,
        scope=None,
        latency=None,
        previous=None,
    ):
        """A decision that loads no skill: invalid input, low signal, out of scope, a continuation with no
        context. It keeps the previous turn's conversation intents, so a continuation after small talk
        still finds them."""
        return Decision.model_validate(
            dict(
                intent=None,
                conversation_intents=carried_intents(previous),
                confidence=c.confidence if c is not None else None,
                ranking=ranking(c) if c is not None else [],
                scope=scope,
                source=source,
                reason_code=reason,
                role=role,
                skills={"required": [], "optional": []},
                servable=servable,
                message=message,
                threshold=self.threshold,
                model_id=self.classifier.model_id,
                input=info,
                latency=latency or {},
                trace=trace,
            )
        )

    def _invalid(self, role: str, info: dict, why: str, previous: Decision | None) -> Decision:
        trace = [step("guardrail", "invalid_input", {"why": why})]
        message = f"invalid input ({why}): nothing was routed"
        return self._skill_free(
            role, info, ReasonCode.INVALID_INPUT, "guardrail", False, message, trace, previous=previous
        )

    def _guardrail(self, role: str, info: dict, why: str, previous: Decision | None) -> Decision:
        trace = [step("guardrail", "low_signal", {"why": why})]
        message = f"low-signal input ({why}): no skills are loaded; ask the user what they need"
        return self._skill_free(
            role, info, ReasonCode.LOW_SIGNAL, "guardrail", True, message, trace, previous=previous
        )

    def _decide(
        self,
        text: str,
        role: str,
        info: dict,
        c: Classification,
        previous: Decision | None,
        context: str | None = None,
    ) -> Decision:
        info["truncated_tokens"] = c.truncated
        detail = {"label": c.label, "confidence": round(c.confidence, 6), "tokens": c.num_tokens}
        trace = [
            step("guardrail", "pass"),
            step("classifier", "ok", detail, round(c.tokenize_ms + c.inference_ms, 4)),
        ]
        latency = {"tokenize_ms": round(c.tokenize_ms, 4), "inference_ms": round(c.inference_ms, 4)}
        turn = (previous, context, role)  # what a continuation is read with (router.conversation)
        has_turn = previous is not None or bool(context)
        if self.conversational and has_turn:
            c = with_prior(c, self.context_weight)  # after a turn, the odds of a continuation are higher
            prior = {
                "label": c.label,
                "confidence": round(c.confidence, 6),
                "weight": round(self.context_weight, 4),
            }
            trace.append(step("conversation", "prior", prior))
        scope = scope_of(c, self.threshold, self.classifier.distance_threshold)
        match = self.examples.match(c.embedding) if self.examples is not None else None
        if match is not None:  # an intent defined by examples (router.examples)
            trace.append(step("examples", "matched", match))
            reason, intents = ReasonCode.MATCHED_EXAMPLES, [match["intent"]]
            return self._routed(c, intents, "examples", reason, role, info, scope, latency, trace, previous)
        signals = scope["signals"]
        primary = c.intents[0] if c.intents else c.label  # a compound request: its end goal first
        secondary = c.intents[1] if len(c.intents) > 1 else None
        probs = dict(c.ranking)
        pair = compound_confidence(probs, c.intents, c.clauses)
        tau = self.thresholds.get(primary, self.threshold)
        sure = c.confidence >= tau or pair >= tau
        own = not signals and primary not in RESERVED and sure  # its own intent, confidently
        ctx = None  # the conversation's Context, read at most once a message (a previous message is routed)
        if self.conversational:
            if is_continuation(c, self.threshold, has_turn):
                return self._continuation(c, scope, turn, info, latency, trace)
            follow_up, out_of_scope = False, bool(signals)
            # small talk is out of scope whatever came before; any other message that is not sure of its
            # own intent is read after the previous turn (router.conversation.in_context)
            ctx = self._context(turn) if has_turn and not own and "classifier" not in signals else None
            if ctx is not None:
                best, mass = in_context(c.ranking, ctx.intents[0])
                if best == ctx.intents[0] and mass >= self.threshold:
                    return self._continuation(c, scope, turn, info, latency, trace, ctx, mass)
                follow_up = best == ctx.intents[0]
                out_of_scope = bool(signals) and best is None
        else:  # a model without the label: out of scope or unsure right after a turn may continue it
            follow_up = previous is not None and previous.intent is not None
            out_of_scope = bool(signals) and not follow_up
        if out_of_scope:
            trace.append(step("scope", "out_of_scope", {"signals": signals}))
            return self._out_of_scope(c, scope, "classifier", role, info, latency, trace, previous)
        if own:
            detail = {"threshold": tau}
            reason = ReasonCode.CONFIDENT
            if c.confidence < tau:  # unsure only between the two intents the message asks for
                detail["pair_confidence"] = round(pair, 6)
                reason = ReasonCode.CONFIDENT_COMPOUND
            trace.append(step("threshold", "accepted", detail))
            intent, source = primary, "classifier"
            if c.intent_scores is not None:
                trace.append(compound_step(c))
        else:  # unsure, or out of scope right after a turn it may continue ("yes", "and for next week?")
            status = "out_of_scope_follow_up" if signals else "below"
            trace.append(step("threshold", status, {"threshold": tau}))
            if follow_up and ctx is None:  # a model without the label: the previous turn's intents
                ctx = self._context(turn)
            intent, source, reason, secondary = verify_stage(
                self.verifier, text, c, turn, trace, latency, lambda: ctx or self._context(turn), self.intents
            )
            if reason == ReasonCode.OUT_OF_SCOPE:
                signals.append("verifier")
                return self._out_of_scope(c, scope, "verifier", role, info, latency, trace, previous)
            if intent is None and follow_up and ctx is not None:
                trace.append(step("follow_up", "kept_previous", ctx.detail()))
                intent, source, reason = ctx.intents[0], "fallback", ReasonCode.FOLLOW_UP_UNVERIFIED
                secondary = ctx.secondary

        intents = [intent] + ([secondary] if secondary not in (None, intent) else []) if intent else []
        if intent is None:  # fallback: union of the fallback intents' skills, or none: ask the user
            trace.append(step("fallback", "used", {"intents": list(self.config.fallback_intents)}))
            if not self.config.fallback_intents:
                reason = ReasonCode.CLARIFY
        return self._routed(c, intents, source, reason, role, info, scope, latency, trace, previous)

    def _context(self, turn: tuple):
        """The conversation a continuation is read in (router.conversation.resolve_context); a previous
        message given without its Decision is routed here, with the same role."""
        previous, context, role = turn
        return resolve_context(previous, context, lambda m: list(self.route(m, role).intents))

    def _continuation(self, c, scope, turn, info, latency, trace, ctx=None, mass=None) -> Decision:
        """A continuation at or above the threshold (or, read in context, a message whose continuation
        and conversation-intent probabilities together reach it: ``mass``): the conversation's intents,
        or, with no previous turn to read it with, no intent and no skill (reason ``needs_context``)."""
        previous, _, role = turn
        ctx = ctx or self._context(turn)
        if ctx is None:
            trace.append(step("conversation", "no_context"))
            message = (
                "a continuation of an earlier turn, with no previous turn to read it with: pass the previous "
                "Decision (previous=) or message (context=); no skills are loaded"
            )
            reason = ReasonCode.NEEDS_CONTEXT
            return self._skill_free(
                role, info, reason, "classifier", True, message, trace, c, scope, latency, previous
            )
        detail = ctx.detail() if mass is None else {**ctx.detail(), "in_context": round(mass, 6)}
        trace.append(step("conversation", "continuation", detail))
        reason = ReasonCode.FOLLOW_UP_IN_CONTEXT
        return self._routed(
            c, list(ctx.intents), "classifier", reason, role, info, scope, latency, trace, previous
        )

    def _routed(self, c, intents, source, reason, role, info, scope, latency, trace, previous) -> Decision:
        """The Decision for ``intents`` (none: the fallback's skills), after RBAC."""
        intent = intents[0] if intents else None
        g = self._grants.get(role, tuple(intents))
        rbac = {"granted": [*g.required, *g.optional], "denied": [d["skill"] for d in g.denied]}
        trace.append(step("rbac", "ok" if g.servable else "required_denied", rbac))
        rank = ranking(c)
        return Decision.model_validate(
            dict(
                intent=intent,
                intents=intents,
                conversation_intents=conversation_after(intents, previous, rank, source == "fallback"),
                confidence=c.confidence,
                ranking=rank,
                scope=scope,
                source=source,
                reason_code=reason,
                role=role,
                skills={"required": list(g.required), "optional": list(g.optional)},
                denied=g.denied,
                servable=g.servable,
                message=g.message,
                requires_confirmation=g.requires_confirmation,
                context_budget=g.context_budget,
                threshold=self.thresholds.get(intent, self.threshold),
                model_id=self.classifier.model_id,
                input=info,
                latency=latency,
                trace=trace,
            )
        )

    def _out_of_scope(self, c, scope, source, role, info, latency, trace, previous=None) -> Decision:
        message = "out of scope: the message needs no skill; reply directly without loading any"
        return self._skill_free(
            role, info, ReasonCode.OUT_OF_SCOPE, source, True, message, trace, c, scope, latency, previous
        )
