"""Router: guardrail -> classifier -> threshold -> verifier or fallback -> skills -> RBAC -> Decision."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from router import env as envvars
from router.classifier import Classification, Classifier
from router.compound import compound_confidence, merge_skills
from router.config import RouterConfig, validate_threshold
from router.decision import Decision, ReasonCode
from router.guardrail import low_signal_reason
from router.intents import INTENTS, LABELS, OUT_OF_SCOPE
from router.rbac import grant_skills
from router.verifier import Verifier, VerifierError, VerifierUnavailable

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


@dataclass(frozen=True)
class _Grant:
    """What one role gets for one set of intents; ``denied`` holds DeniedSkill dicts, validated with each
    Decision (so no two decisions share a list)."""

    required: tuple[str, ...]
    optional: tuple[str, ...]
    denied: tuple[dict, ...]
    servable: bool
    requires_confirmation: bool
    context_budget: int
    message: str


class Router:
    """Routes messages to intents and skills. Thread-safe: it holds no per-request state. It reads its
    config's skills and roles once per role and intents (``_grant``): for another config, build another
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
        self.verifier = verifier
        self._grants: dict[tuple[str, tuple[str, ...]], _Grant] = {}  # _grant's, by role and intents
        unknown = set(classifier.labels) - set(LABELS)
        if unknown:
            raise ValueError(f"the model predicts labels the router does not know: {sorted(unknown)}")

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
    def route(self, text: str, role: str, previous: Decision | None = None) -> Decision:
        return self.route_batch([text], role, previous=previous)[0]

    def route_batch(
        self, texts: Sequence[str], role: str, previous: Decision | None = None
    ) -> list[Decision]:
        """Route many messages; the classifier runs once over all that pass the guardrail."""
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
                d = self._invalid(role, info, invalid[i])
            elif i in low:
                d = self._guardrail(role, info, low[i])
            else:
                d = self._decide(text, role, info, results[i], previous)
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
    # The stages build the Decision's parts as plain dicts and lists (InputInfo, Latency, Scope, TraceStep,
    # RankedIntent) and validate them once, with the Decision: one call into pydantic-core instead of about
    # fifteen model constructors a message (docs/speed.md, session 29).
    def _skill_free(
        self, role, info, reason, source, servable, message, trace, c=None, scope=None, latency=None
    ):
        """A decision that loads no skill: invalid input, low signal, out of scope."""
        return Decision.model_validate(
            dict(
                intent=None,
                confidence=c.confidence if c is not None else None,
                ranking=_ranking(c) if c is not None else [],
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

    def _invalid(self, role: str, info: dict, why: str) -> Decision:
        trace = [_step("guardrail", "invalid_input", {"why": why})]
        message = f"invalid input ({why}): nothing was routed"
        return self._skill_free(role, info, ReasonCode.INVALID_INPUT, "guardrail", False, message, trace)

    def _guardrail(self, role: str, info: dict, why: str) -> Decision:
        trace = [_step("guardrail", "low_signal", {"why": why})]
        message = f"low-signal input ({why}): no skills are loaded; ask the user what they need"
        return self._skill_free(role, info, ReasonCode.LOW_SIGNAL, "guardrail", True, message, trace)

    def _decide(
        self, text: str, role: str, info: dict, c: Classification, previous: Decision | None
    ) -> Decision:
        info["truncated_tokens"] = c.truncated
        detail = {"label": c.label, "confidence": round(c.confidence, 6), "tokens": c.num_tokens}
        trace = [
            _step("guardrail", "pass"),
            _step("classifier", "ok", detail, round(c.tokenize_ms + c.inference_ms, 4)),
        ]
        latency = {"tokenize_ms": round(c.tokenize_ms, 4), "inference_ms": round(c.inference_ms, 4)}
        scope = self._scope(c)
        signals = scope["signals"]
        follow_up = previous is not None and previous.intent is not None
        intent: str | None
        if signals and not follow_up:
            trace.append(_step("scope", "out_of_scope", {"signals": signals}))
            return self._out_of_scope(c, scope, "classifier", role, info, latency, trace)
        primary = c.intents[0] if c.intents else c.label  # a compound request: its end goal first
        secondary = c.intents[1] if len(c.intents) > 1 else None
        probs = dict(c.ranking)
        pair = compound_confidence(probs, c.intents, c.clauses)
        if not signals and (c.confidence >= self.threshold or pair >= self.threshold):
            detail = {"threshold": self.threshold}
            reason = ReasonCode.CONFIDENT
            if c.confidence < self.threshold:  # unsure only between the two intents the message asks for
                detail["pair_confidence"] = round(pair, 6)
                reason = ReasonCode.CONFIDENT_COMPOUND
            trace.append(_step("threshold", "accepted", detail))
            intent, source = primary, "classifier"
            if c.intent_scores is not None:
                trace.append(_compound_step(c))
        else:  # unsure, or out of scope right after a turn it may continue ("yes", "and for next week?")
            status = "out_of_scope_follow_up" if signals else "below"
            trace.append(_step("threshold", status, {"threshold": self.threshold}))
            intent, source, reason, secondary = self._verify(text, c, previous, trace, latency)
            if reason == ReasonCode.OUT_OF_SCOPE:
                signals.append("verifier")
                return self._out_of_scope(c, scope, "verifier", role, info, latency, trace)
            if intent is None and follow_up:
                trace.append(_step("follow_up", "kept_previous", {"intent": previous.intent.value}))
                intent, source, reason = previous.intent.value, "fallback", ReasonCode.FOLLOW_UP_UNVERIFIED
                secondary = _previous_secondary(previous)

        intents = [intent] + ([secondary] if secondary not in (None, intent) else []) if intent else []
        if intent is None:  # fallback: union of the fallback intents' skills
            trace.append(_step("fallback", "used", {"intents": list(self.config.fallback_intents)}))
        g = self._grant(role, tuple(intents))
        rbac = {"granted": [*g.required, *g.optional], "denied": [d["skill"] for d in g.denied]}
        trace.append(_step("rbac", "ok" if g.servable else "required_denied", rbac))
        return Decision.model_validate(
            dict(
                intent=intent,
                intents=intents,
                confidence=c.confidence,
                ranking=_ranking(c),
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
                threshold=self.threshold,
                model_id=self.classifier.model_id,
                input=info,
                latency=latency,
                trace=trace,
            )
        )

    def _grant(self, role: str, intents: tuple[str, ...]) -> _Grant:
        """The skills ``role`` gets for ``intents`` (() for the fallback), merged (router.compound.merge_skills)
        and filtered (router.rbac.grant_skills). They follow from the config alone, so they are worked out
        once per role and intents: a Router reads its config when it is built. Roles the config does not
        know are not kept (a caller could send any number of them)."""
        key = (role, intents)
        g = self._grants.get(key)
        if g is not None:
            return g
        wanted = intents or self.config.fallback_intents
        required, optional, budget = merge_skills([self.config.intents[i] for i in wanted])
        grant = grant_skills(self.config, role, required, optional)
        denied = tuple(d.model_dump() for d in grant.denied)
        message = ""
        if not grant.servable:
            names = ", ".join(d.skill for d in grant.denied if d.required)
            message = f"cannot be served as classified: role {role!r} is denied required skill(s) {names}"
        g = _Grant(
            tuple(grant.skills.required),
            tuple(grant.skills.optional),
            denied,
            grant.servable,
            grant.requires_confirmation,
            budget,
            message,
        )
        if role in self.config.roles:
            self._grants[key] = g
        return g

    def _scope(self, c: Classification) -> dict:
        """The out-of-scope signals: the trained class above the threshold, the distance above its own."""
        p_oos = dict(c.ranking).get(OUT_OF_SCOPE)
        limit = self.classifier.distance_threshold
        signals = []
        if c.label == OUT_OF_SCOPE and c.confidence >= self.threshold:
            signals.append("classifier")
        if c.distance is not None and limit is not None and c.distance > limit:
            signals.append("distance")
        return {  # Scope
            "out_of_scope_probability": p_oos,
            "distance": c.distance,
            "distance_threshold": limit,
            "signals": signals,
        }

    def _out_of_scope(self, c, scope, source, role, info, latency, trace) -> Decision:
        message = "out of scope: the message needs no skill; reply directly without loading any"
        return self._skill_free(
            role, info, ReasonCode.OUT_OF_SCOPE, source, True, message, trace, c, scope, latency
        )

    def _verify(self, text, c, previous, trace, latency):
        if self.verifier is None:
            trace.append(_step("verifier", "absent"))
            return None, "fallback", ReasonCode.NO_VERIFIER, None
        t0 = time.perf_counter()
        try:
            res = self.verifier.verify(text, c, previous)
        except Exception as e:  # a third-party verifier must not take the router down either
            ms = round((time.perf_counter() - t0) * 1000, 4)
            latency["verifier_ms"] = ms
            if isinstance(e, VerifierError):
                detail = {"error": str(e), "breaker": e.breaker, "attempts": e.attempts}
                status = e.status
            else:
                detail, status = {"error": f"{type(e).__name__}: {e}"}, "error"
            trace.append(_step("verifier", status, detail, ms))
            reason = (
                ReasonCode.VERIFIER_UNAVAILABLE
                if isinstance(e, VerifierUnavailable)
                else ReasonCode.VERIFIER_FAILED
            )
            return None, "fallback", reason, None
        ms = (time.perf_counter() - t0) * 1000
        latency["verifier_ms"] = round(ms, 4)
        keep_previous = (
            res.reason_code == "same_domain_follow_up"
            and previous is not None
            and previous.intent is not None
        )
        detail = {
            "intent": res.intent,
            "reason_code": res.reason_code,
            "attempts": res.attempts,
            "breaker": res.breaker,
        }
        if keep_previous:
            detail["kept_previous"] = previous.intent.value
            trace.append(_step("verifier", "accepted", detail, round(ms, 4)))
            return previous.intent.value, "verifier", ReasonCode.FOLLOW_UP, _previous_secondary(previous)
        if res.intent not in INTENTS and not (
            res.intent == OUT_OF_SCOPE and res.reason_code != "same_domain_follow_up"
        ):
            detail = {"intent": res.intent, "attempts": res.attempts}
            trace.append(_step("verifier", "invalid_intent", detail, round(ms, 4)))
            return None, "fallback", ReasonCode.VERIFIER_FAILED, None
        secondary = getattr(res, "secondary", None)
        secondary = secondary if secondary in INTENTS and secondary != res.intent else None
        if secondary:
            detail["secondary"] = secondary
        trace.append(_step("verifier", "accepted", detail, round(ms, 4)))
        if res.intent == OUT_OF_SCOPE:
            return None, "verifier", ReasonCode.OUT_OF_SCOPE, None
        return res.intent, "verifier", ReasonCode.VERIFIED, secondary


_SURROGATE = re.compile("[\ud800-\udfff]")


def repair_text(text: str) -> tuple[str, int]:
    """Lone UTF-16 surrogates (a JSON client can send "\\ud800") -> U+FFFD; a valid surrogate pair is
    joined into its character. Returns the text and how many code points were replaced or joined."""
    n = len(_SURROGATE.findall(text))
    if not n:
        return text, 0
    fixed = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return fixed, n


def _step(stage: str, status: str, detail: dict | None = None, ms: float = 0.0) -> dict:
    """A TraceStep, as the dict the Decision validates."""
    return {"stage": stage, "status": status, "ms": ms, "detail": {} if detail is None else detail}


def _compound_step(c: Classification) -> dict:
    """The compound rule's verdict (router.compound), with the scores and clauses it read."""
    return _step(
        "compound",
        "two_intents" if len(c.intents) > 1 else "single",
        {
            "intents": list(c.intents),
            "scores": {k: round(v, 6) for k, v in (c.intent_scores or {}).items()},
            "clauses": c.clauses,
        },
    )


def _previous_secondary(previous: Decision) -> str | None:
    """The second intent of the previous decision, kept with its primary on a follow-up."""
    return previous.intents[1].value if len(previous.intents) > 1 else None


def _ranking(c: Classification) -> list[dict]:
    """The RankedIntent entries: the five intents, most probable first."""
    return [{"intent": label, "probability": p} for label, p in c.ranking if label != OUT_OF_SCOPE]
