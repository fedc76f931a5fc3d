"""The FastAPI app: POST /v1/route, POST /admin/reload, GET /healthz, /readyz, /metrics, and the OpenAPI
document.

One Router per process (router.serve.state), loaded in the background at start-up (``/readyz`` is 503
until it is loaded and has routed a canary message) and reloaded on SIGHUP or an admin request without
dropping a request. ``route_batch`` runs in worker threads (router.serve.engine), never on the event
loop, so a slow verifier call does not hold up other requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from router.serve.connections import ConnectionAge
from router.serve.models import (
    ErrorResponse,
    ReloadRequest,
    ReloadResponse,
    RouteRequest,
    RouteResponse,
    ToolHit,
    ToolSearchRequest,
    ToolSearchResponse,
    openapi_with_intents,
)
from router.serve.prometheus import MODEL_SCOPE_KEY, MetricsMiddleware
from router.serve.requests import (
    REQUEST_ID_HEADER,
    ApiError,
    authenticate,
    authenticate_admin,
    error_response,
    parse,
    read_body,
    request_id,
    route_role,
    route_texts,
    validation_errors,
)
from router.serve.settings import ServeSettings
from router.serve.state import ReloadError, State, one_line
from router.tracing import instrument_app, record_decisions

log = logging.getLogger("intent_router.serve")
KNOWN_PATHS = (
    "/v1/route",
    "/v1/tools/search",
    "/admin/reload",
    "/healthz",
    "/readyz",
    "/metrics",
    "/openapi.json",
    "/docs",
)


# --------------------------------------------------------------------------------------- app
def create_app(settings: ServeSettings | None = None, *, span_exporter=None, shared=None) -> FastAPI:
    """The app for ``settings``: its Router loads in the background (or before serving, with
    ``load_before_serving``) and reloads on SIGHUP or POST /admin/reload. With ``settings.otel`` (or a
    ``span_exporter``, e.g. an in-memory one) requests and routed messages are traced (router.tracing).
    ``shared``: the targets shared with the other processes serving (router.serve.state.State)."""
    settings = settings or ServeSettings()
    state = State(settings, shared)
    app = FastAPI(
        title="intent-router",
        version="1",
        summary="Routes messages to intents and skills, with the caller's role from its API key.",
        lifespan=_lifespan(settings, state),
    )
    app.state.router_state = state
    generic_openapi = app.openapi  # FastAPI builds it once; the model's intents are named in a copy

    def openapi() -> dict:
        schema = generic_openapi()
        router = state.router
        return schema if router is None else openapi_with_intents(schema, router.intents)

    app.openapi = openapi
    _add_error_handlers(app)
    app.add_middleware(MetricsMiddleware, metrics=state.metrics, paths=KNOWN_PATHS)
    if settings.max_connection_age:
        app.add_middleware(ConnectionAge, max_age=settings.max_connection_age)
    _add_probes(app, state)
    _add_route(app, state, settings)
    _add_admin_reload(app, state, settings)
    _add_tool_search(app, state, settings)
    if settings.otel or span_exporter is not None:  # the provider is flushed when the state closes
        state.tracer_provider = instrument_app(app, span_exporter)
        state.tracer = state.tracer_provider.get_tracer("intent_router")
    return app


def _lifespan(settings: ServeSettings, state: State):
    """Start-up loads the Router and installs the SIGHUP handler; shutdown cancels background work."""
    tasks: set[asyncio.Task] = set()  # background loads and reloads, referenced until they end

    def background(coro) -> None:
        task = asyncio.ensure_future(coro)
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def load() -> None:
        if settings.load_delay:
            await asyncio.sleep(settings.load_delay)
        t0 = time.perf_counter()
        try:
            await asyncio.to_thread(state.load)
        except Exception as e:
            state.error = one_line(e)
            log.error("model failed to load: %s", state.error)
            return
        log.info("router ready in %.2f s: %s", time.perf_counter() - t0, state.model_id)

    def on_sighup() -> None:
        log.info("SIGHUP: reloading the model and config")
        background(asyncio.to_thread(state.reload_on_signal))

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # not the main thread
            loop.add_signal_handler(signal.SIGHUP, on_sighup)
        if settings.load_before_serving:  # the other workers serve meanwhile
            await load()
        else:
            background(load())
        try:
            yield
        finally:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(signal.SIGHUP)
                signal.signal(signal.SIGHUP, signal.SIG_IGN)  # not the default, which ends the process
            for task in list(tasks):
                task.cancel()
            await asyncio.to_thread(state.close)

    return lifespan


def _add_error_handlers(app: FastAPI) -> None:
    """Every error in one shape: {"error": {"code", "message", ...}}, 404 and 405 included."""

    @app.exception_handler(ApiError)
    async def _apierror_response(request: Request, e: ApiError):
        return error_response(e.status, e.code, e.message, **e.extra)

    @app.exception_handler(StarletteHTTPException)
    async def _httperror_response(request: Request, e: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(e.status_code, "http_error")
        return error_response(e.status_code, code, str(e.detail))

    @app.exception_handler(RequestValidationError)
    async def _validationerror_response(request: Request, e: RequestValidationError):
        return error_response(
            422, "invalid_request", "request does not match the schema", details=validation_errors(e.errors())
        )


def _add_probes(app: FastAPI, state: State) -> None:
    @app.get("/healthz", summary="Process is up")
    async def healthz():
        return {"status": "ok", "model_id": state.model_id, "pid": os.getpid()}

    @app.get("/readyz", summary="Model loaded and verified", responses={503: {"model": ErrorResponse}})
    async def readyz():
        router = state.router
        if router is None:
            if state.error:
                return error_response(503, "model_failed", state.error, pid=os.getpid())
            return error_response(503, "loading", "the model is loading", pid=os.getpid())
        return {
            "status": "ready",
            "model_id": router.classifier.model_id,
            "roles": sorted(router.config.roles),
            "pid": os.getpid(),
        }

    @app.get("/metrics", summary="Prometheus metrics")
    async def metrics():
        state.metrics.set_breaker(state.breaker_state())
        return Response(state.metrics.render(), media_type=state.metrics.content_type)


ERR = {"model": ErrorResponse}


def _add_route(app: FastAPI, state: State, settings: ServeSettings) -> None:
    @app.post(
        "/v1/route",
        summary="Route one message or a list",
        response_model=RouteResponse,
        responses={400: ERR, 401: ERR, 403: ERR, 413: ERR, 422: ERR, 503: ERR},
        openapi_extra=_body_schema(RouteRequest),
    )
    async def route(request: Request):
        principal = authenticate(request, state)
        body = await read_body(request, state.limit("max_body_bytes"))
        req = parse(body, RouteRequest)
        texts = route_texts(req, state)
        role = route_role(req, principal, state)
        engine = state.engine
        if engine is None:
            raise ApiError(503, "not_ready", "the model is not loaded yet; poll /readyz")
        router = engine.acquire()  # this request routes on this Router to the end, whatever a reload does
        if role not in router.config.roles:
            engine.release(router)
            raise ApiError(422, "unknown_role", f"unknown role {role!r}", roles=sorted(router.config.roles))
        prev = req.previous
        rid = request_id(request)
        fields = {"request_id": rid, "key_id": principal.key_id if principal is not None else None}
        if prev is not None and prev.message is None and state.turns is not None:  # router.serve.turns
            fields["previous_message"] = state.turns.recall(prev.decision)
        started = time.time_ns()
        decisions = await engine.route(  # releases the Router when its work ends
            router, texts, role, prev.decision if prev else None, prev.message if prev else None, fields
        )
        if state.tracer is not None:
            record_decisions(state.tracer, decisions, started, {"request_id": rid})
        model_id = router.classifier.model_id
        request.scope[MODEL_SCOPE_KEY] = model_id
        m = state.metrics
        m.batch_size.labels(model=model_id).observe(len(texts))
        m.observe_decisions(decisions)
        if router.verifier is not None:
            m.set_breaker(state.breaker_state())
        parts = [d.model_dump_json().encode() for d in decisions]
        if state.turns is not None:
            state.turns.remember(parts, [state.decision_log.redacted(t) for t in texts])
        payload = b'{"decisions":[' + b",".join(parts) + b"]}"
        return Response(payload, media_type="application/json", headers={REQUEST_ID_HEADER: rid})


def _add_tool_search(app: FastAPI, state: State, settings: ServeSettings) -> None:
    @app.post(
        "/v1/tools/search",
        summary="A query's top k tools of the tool registry (serve --tools), with no intent gating",
        response_model=ToolSearchResponse,
        responses={400: ERR, 401: ERR, 403: ERR, 404: ERR, 413: ERR, 422: ERR, 503: ERR},
        openapi_extra=_body_schema(ToolSearchRequest),
    )
    async def tools_search(request: Request):
        principal = authenticate(request, state)
        req = parse(await read_body(request, state.limit("max_body_bytes")), ToolSearchRequest)
        role = route_role(req, principal, state)
        router = state.router
        if router is None:
            raise ApiError(503, "not_ready", "the model is not loaded yet; poll /readyz")
        if router.tools is None:
            raise ApiError(
                404, "no_tool_registry", "this service has no tool registry: start it with --tools FILE"
            )
        if role not in router.config.roles:
            raise ApiError(422, "unknown_role", f"unknown role {role!r}", roles=sorted(router.config.roles))
        stage = router.tools
        tools = [
            {**h.to_dict(), "score": h.lexical, "definition": stage.named[h.name].definition()}
            for h in stage.search(req.query, req.k, role)
        ]
        return {"query": req.query, "tools": [{k: t[k] for k in ToolHit.model_fields} for t in tools]}


def _add_admin_reload(app: FastAPI, state: State, settings: ServeSettings) -> None:
    @app.post(
        "/admin/reload",
        summary="Load the model and config again, or others, and swap them in without dropping a request",
        response_model=ReloadResponse,
        responses={400: ERR, 401: ERR, 403: ERR, 409: ERR, 413: ERR, 422: ERR},
        openapi_extra=_body_schema(ReloadRequest, required=False),
    )
    async def admin_reload(request: Request):
        authenticate_admin(request, state)
        body = await read_body(request, state.limit("max_body_bytes"))
        req = parse(body, ReloadRequest) if body.strip() else ReloadRequest()
        try:
            return await asyncio.to_thread(state.reload, req.model, req.config, False, req.compare_report)
        except ReloadError as e:
            raise ApiError(e.status, e.code, e.message, model_id=state.model_id) from None


def _body_schema(model: type[BaseModel], required: bool = True) -> dict:
    content = {"application/json": {"schema": model.model_json_schema()}}
    return {"requestBody": {"required": required, "content": content}}
