"""Prometheus metrics of one server process (its own registry, so several apps can live in a test)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

# 0.25 ms .. 5 s: in-process stages take ~1-10 ms, verifier calls up to seconds
BUCKETS = (0.00025, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
BREAKER_STATES = ("closed", "open", "half_open", "none")


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        p = "intent_router_"
        self.requests = Counter(
            p + "requests", "HTTP requests by path and status", ["path", "status"], registry=r
        )
        self.request_seconds = Histogram(
            p + "request_seconds", "HTTP request duration in the app", ["path"], buckets=BUCKETS, registry=r
        )
        self.stage_seconds = Histogram(
            p + "stage_seconds",
            "Per-message time by stage: tokenize, inference, verifier, route (route() total)",
            ["stage"],
            buckets=BUCKETS,
            registry=r,
        )
        self.decisions = Counter(
            p + "decisions", "Decisions by source and reason code", ["source", "reason_code"], registry=r
        )
        self.messages = Counter(p + "messages", "Messages routed", registry=r)
        self.batch_size = Histogram(
            p + "batch_messages",
            "Messages per route_batch() call",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128),
            registry=r,
        )
        self.auth_failures = Counter(
            p + "auth_failures",
            "Refused requests: missing_key, bad_key, role_not_held",
            ["reason"],
            registry=r,
        )
        self.in_flight = Gauge(p + "requests_in_flight", "Requests being handled", registry=r)
        self.ready = Gauge(p + "ready", "1 once the model is loaded and verified", registry=r)
        self.breaker = Gauge(
            p + "verifier_breaker_state",
            "LLM verifier circuit breaker: 1 for the current state ('none': no verifier)",
            ["state"],
            registry=r,
        )
        self.set_breaker("none")

    def set_breaker(self, state: str) -> None:
        state = state if state in BREAKER_STATES else "none"
        for s in BREAKER_STATES:
            self.breaker.labels(state=s).set(1 if s == state else 0)

    def observe_decisions(self, decisions) -> None:
        self.messages.inc(len(decisions))
        stage = self.stage_seconds
        for d in decisions:
            self.decisions.labels(source=d.source, reason_code=d.reason_code.value).inc()
            lat = d.latency
            if d.source != "guardrail":
                stage.labels(stage="tokenize").observe(lat.tokenize_ms / 1000)
                stage.labels(stage="inference").observe(lat.inference_ms / 1000)
            if lat.verifier_ms:
                stage.labels(stage="verifier").observe(lat.verifier_ms / 1000)
            stage.labels(stage="route").observe(lat.total_ms / 1000)

    def render(self) -> bytes:
        return generate_latest(self.registry)
