"""OpenTelemetry traces of routed messages (extra ``otel``; off unless asked for).

``record_decisions`` turns Decisions into spans: one ``intent_router.route`` span per message, with a child
span per stage of its trace (guardrail, classifier, threshold, compound, verifier, rbac, ...), each as long
as the stage's measured milliseconds and laid end to end from the moment routing started. The spans are
written after routing, from what the Decision measured, so tracing adds nothing to the routing path
itself; a batch's messages each get their own route span. Under ``intent-router serve --otel`` they are
children of the request's server span (opentelemetry-instrumentation-fastapi), and ``tracer_provider``
exports them over OTLP/HTTP to the endpoint in the standard ``OTEL_EXPORTER_OTLP_*`` variables.

The message text is never an attribute: its length is. A span carries the intent, the intents, the
confidence, the reason code, the source, the role, whether it can be served, the model id and the
request id when there is one.

A library user traces the same way::

    t0 = time.time_ns()
    decisions = router.route_batch(texts, role)
    record_decisions(tracer, decisions, t0)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

ROUTE_SPAN = "intent_router.route"
STAGE_PREFIX = "intent_router."
SERVICE_NAME = "intent-router"


def decision_attributes(decision, extra: Mapping[str, str | None] | None = None) -> dict:
    """The route span's attributes of one Decision (never the message)."""
    attrs = {
        "intent_router.intent": decision.intent or "",
        "intent_router.intents": list(decision.intents),
        "intent_router.reason_code": decision.reason_code.value,
        "intent_router.source": decision.source,
        "intent_router.role": decision.role,
        "intent_router.servable": decision.servable,
        "intent_router.model_id": decision.model_id,
        "intent_router.message_chars": decision.input.chars,
    }
    if decision.confidence is not None:
        attrs["intent_router.confidence"] = float(decision.confidence)
    for key, value in (extra or {}).items():
        if value is not None:
            attrs[f"intent_router.{key}"] = value
    return attrs


def record_decisions(
    tracer, decisions: Sequence, start_ns: int, extra: Mapping[str, str | None] | None = None
) -> None:
    """A route span per Decision, starting at ``start_ns`` (``time.time_ns()`` before routing), with its
    stages as child spans; ``extra`` attributes (e.g. ``request_id``) go on every route span. The spans
    are children of the current span, if any."""
    from opentelemetry import trace

    for d in decisions:
        span = tracer.start_span(ROUTE_SPAN, start_time=start_ns, attributes=decision_attributes(d, extra))
        parent = trace.set_span_in_context(span)
        t = start_ns
        for step in d.trace:
            took = int(step.ms * 1e6)
            child = tracer.start_span(
                STAGE_PREFIX + step.stage,
                context=parent,
                start_time=t,
                attributes={"intent_router.status": step.status},
            )
            child.end(end_time=t + took)
            t += took
        span.end(end_time=max(t, start_ns + int(d.latency.total_ms * 1e6)))


def tracer_provider(exporter=None, service_name: str | None = None):
    """A TracerProvider that exports in batches over OTLP/HTTP (endpoint and headers from the standard
    ``OTEL_EXPORTER_OTLP_*`` variables), or to ``exporter`` (e.g. an in-memory one) span by span."""
    import os

    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    name = service_name or os.environ.get("OTEL_SERVICE_NAME") or SERVICE_NAME
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    else:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def instrument_app(app, exporter=None):
    """Trace a FastAPI ``app``: the instrumentation's server span per request (the probes and /metrics
    left out), exported by ``tracer_provider(exporter)``, which is returned for the route spans."""
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    provider = tracer_provider(exporter)
    FastAPIInstrumentor.instrument_app(app, tracer_provider=provider, excluded_urls="healthz,readyz,metrics")
    return provider
