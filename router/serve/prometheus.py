"""Prometheus metrics of the server, and the ASGI middleware that counts and times every request.

Every counter and histogram carries a ``model`` label: the model id of the Router that answered
(``none`` before one is loaded). With one process the metrics live in that process's own registry
(so several apps can live in a test). With several worker processes (``serve --workers N``) each worker
writes its values to files in ``PROMETHEUS_MULTIPROC_DIR`` (the supervisor creates it, sets it before
the workers start and removes it at exit), and ``/metrics``, whichever worker answers, sums them across
all workers: prometheus_client's multiprocess mode.
"""

from __future__ import annotations

import time
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

# 0.25 ms .. 5 s: in-process stages take ~1-10 ms, verifier calls up to seconds
BUCKETS = (0.00025, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
BREAKER_STATES = ("closed", "open", "half_open", "none")
NO_MODEL = "none"
MODEL_SCOPE_KEY = "intent_router.model"  # set on the ASGI scope by the handler that routed the request
P = "intent_router_"  # every metric's name prefix


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, multiprocess_dir: str | Path | None = None) -> None:
        """``multiprocess_dir``: the directory of prometheus_client's multiprocess mode, which must also be
        in ``PROMETHEUS_MULTIPROC_DIR`` before prometheus_client is imported (the supervisor sees to it)."""
        self.multiprocess_dir = str(multiprocess_dir) if multiprocess_dir is not None else None
        self.model = NO_MODEL  # the model serving now: the label of requests that routed nothing
        self.registry = CollectorRegistry()
        self._counters(self.registry)
        self._histograms(self.registry)
        self._gauges(self.registry)
        self.ready.set(0)
        self.set_breaker("none")

    def _counters(self, r: CollectorRegistry) -> None:
        self.requests = Counter(
            P + "requests", "HTTP requests by path, status and model", ["path", "status", "model"], registry=r
        )
        self.decisions = Counter(
            P + "decisions",
            "Decisions by source, reason code and model",
            ["source", "reason_code", "model"],
            registry=r,
        )
        self.messages = Counter(P + "messages", "Messages routed", ["model"], registry=r)
        self.auth_failures = Counter(
            P + "auth_failures",
            "Refused requests: missing_key, bad_key, role_not_held, not_admin",
            ["reason", "model"],
            registry=r,
        )
        self.reloads = Counter(
            P + "reloads",
            "Model reloads by outcome (ok, failed); model: the one serving after the attempt",
            ["outcome", "model"],
            registry=r,
        )

    def _histograms(self, r: CollectorRegistry) -> None:
        self.request_seconds = Histogram(
            P + "request_seconds",
            "HTTP request duration in the app",
            ["path", "model"],
            buckets=BUCKETS,
            registry=r,
        )
        self.stage_seconds = Histogram(
            P + "stage_seconds",
            "Per-message time by stage: tokenize, inference, verifier, route (route() total)",
            ["stage", "model"],
            buckets=BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            P + "batch_messages",
            "Messages per route_batch() call",
            ["model"],
            buckets=(1, 2, 4, 8, 16, 32, 64, 128),
            registry=r,
        )

    def _gauges(self, r: CollectorRegistry) -> None:
        """The multiprocess mode of each says how the workers' values combine."""
        self.in_flight = Gauge(
            P + "requests_in_flight", "Requests being handled", registry=r, multiprocess_mode="livesum"
        )
        self.ready = Gauge(
            P + "ready",
            "1 once the model is loaded and verified (in every worker)",
            registry=r,
            multiprocess_mode="livemin",
        )
        self.serving = Gauge(
            P + "model",
            "Worker processes serving each model (1 per process for its current model, else 0)",
            ["model"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self.breaker = Gauge(
            P + "verifier_breaker_state",
            "LLM verifier circuit breaker: 1 for the current state ('none': no verifier); several workers: "
            "1 if any worker is in that state",
            ["state"],
            registry=r,
            multiprocess_mode="livemax",
        )

    def set_model(self, model_id: str) -> None:
        """The model now serving in this process (the ``model`` gauge and the default label)."""
        if self.model != NO_MODEL:
            self.serving.labels(model=self.model).set(0)
        self.model = model_id
        self.serving.labels(model=model_id).set(1)

    def set_breaker(self, state: str) -> None:
        state = state if state in BREAKER_STATES else "none"
        for s in BREAKER_STATES:
            self.breaker.labels(state=s).set(1 if s == state else 0)

    def observe_decisions(self, decisions) -> None:
        stage = self.stage_seconds
        for d in decisions:
            model = d.model_id
            self.messages.labels(model=model).inc()
            self.decisions.labels(source=d.source, reason_code=d.reason_code.value, model=model).inc()
            lat = d.latency
            if d.source != "guardrail":
                stage.labels(stage="tokenize", model=model).observe(lat.tokenize_ms / 1000)
                stage.labels(stage="inference", model=model).observe(lat.inference_ms / 1000)
            if lat.verifier_ms:
                stage.labels(stage="verifier", model=model).observe(lat.verifier_ms / 1000)
            stage.labels(stage="route", model=model).observe(lat.total_ms / 1000)

    def render(self) -> bytes:
        if self.multiprocess_dir is None:
            return generate_latest(self.registry)
        from prometheus_client.multiprocess import MultiProcessCollector

        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=self.multiprocess_dir)
        return generate_latest(registry)


class MetricsMiddleware:
    """Plain ASGI (cheaper than BaseHTTPMiddleware): count requests by path, status and model, time them."""

    def __init__(self, app, metrics: Metrics, paths: tuple[str, ...]) -> None:
        self.app, self.metrics, self.paths = app, metrics, paths

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        path = path if path in self.paths else "other"
        status = {"code": 500}

        async def send_wrapper(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        m = self.metrics
        m.in_flight.inc()
        t0 = time.perf_counter()
        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            m.in_flight.dec()
            model = scope.get(MODEL_SCOPE_KEY) or m.model
            m.request_seconds.labels(path=path, model=model).observe(time.perf_counter() - t0)
            m.requests.labels(path=path, status=str(status["code"]), model=model).inc()
