"""OpenTelemetry traces (extra 'otel'): a route span per message with a child span per stage, under the
request's server span, caught by an in-memory exporter."""

from __future__ import annotations

import itertools

import pytest

from tests.conftest import SHIPPED

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("opentelemetry.instrumentation.fastapi")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from router.tracing import ROUTE_SPAN, record_decisions, tracer_provider

MESSAGES = [
    "restart the billing worker in eu-west",
    "thanks, that's all",
    "find the Q3 deck and email it to Maria",
]


def by_parent(spans) -> dict:
    out: dict = {}
    for s in spans:
        out.setdefault(s.parent.span_id if s.parent else None, []).append(s)
    return out


def test_each_decision_is_a_route_span_with_its_stages_as_children():
    import time

    from router import Router

    router = Router.load(SHIPPED)
    exporter = InMemorySpanExporter()
    tracer = tracer_provider(exporter).get_tracer("test")
    t0 = time.time_ns()
    decisions = router.route_batch(MESSAGES, "admin")
    record_decisions(tracer, decisions, t0, {"request_id": "r-1"})
    spans = exporter.get_finished_spans()
    routes = [s for s in spans if s.name == ROUTE_SPAN]
    assert len(routes) == len(MESSAGES)
    children = by_parent(spans)
    for span, d in zip(routes, decisions, strict=True):
        assert span.parent is None and span.attributes["intent_router.request_id"] == "r-1"
        assert span.attributes["intent_router.reason_code"] == d.reason_code.value
        assert list(span.attributes["intent_router.intents"]) == list(d.intents)
        stages = sorted(children[span.context.span_id], key=lambda s: s.start_time)
        assert [s.name for s in stages] == [f"intent_router.{step.stage}" for step in d.trace]
        assert all(s.start_time >= span.start_time and s.end_time <= span.end_time for s in stages)
        assert all(a.end_time <= b.start_time for a, b in itertools.pairwise(stages))  # end to end, in order
        assert not set(map(str, span.attributes.values())) & set(MESSAGES)  # never the message
    assert routes[1].attributes["intent_router.intent"] == ""  # small talk: no intent


def test_the_service_traces_a_request_and_the_messages_it_routed():
    from fastapi.testclient import TestClient

    from router.serve.app import create_app
    from router.serve.settings import ServeSettings

    exporter = InMemorySpanExporter()
    app = create_app(ServeSettings(model_dir=SHIPPED, load_before_serving=True), span_exporter=exporter)
    with TestClient(app, client=("127.0.0.1", 50000)) as client:  # no key file: loopback only
        assert client.get("/readyz").status_code == 200
        r = client.post("/v1/route", json={"role": "admin", "messages": MESSAGES[:2]})
        assert r.status_code == 200
        request_id = r.headers["X-Request-ID"]
    spans = exporter.get_finished_spans()
    servers = [s for s in spans if s.kind.name == "SERVER"]
    assert [s.attributes.get("http.route") for s in servers] == ["/v1/route"]  # probes are not traced
    routes = [s for s in spans if s.name == ROUTE_SPAN]
    assert len(routes) == 2
    for span in routes:
        assert span.parent.span_id == servers[0].context.span_id
        assert span.context.trace_id == servers[0].context.trace_id
        assert span.attributes["intent_router.request_id"] == request_id
        assert span.attributes["intent_router.model_id"] == r.json()["decisions"][0]["model_id"]
    stages = [s for s in spans if s.parent and s.parent.span_id in {r.context.span_id for r in routes}]
    assert {"intent_router.guardrail", "intent_router.classifier", "intent_router.rbac"} <= {
        s.name for s in stages
    }


def test_otel_without_the_extra_is_a_configuration_error(monkeypatch):
    import builtins

    from router.serve.settings import ServeSettings

    real = builtins.__import__

    def no_otel(name, *args, **kwargs):  # the extra not installed: its import fails
        if name.startswith("opentelemetry"):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_otel)
    with pytest.raises(ValueError, match=r"--otel needs the 'otel' extra"):
        ServeSettings(otel=True)
