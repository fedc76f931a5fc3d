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
import json
import logging
import os
import re
import signal
import time
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from router.serve.auth import Principal, key_from_headers
from router.serve.connections import ConnectionAge
from router.serve.models import (
    ErrorResponse,
    ReloadRequest,
    ReloadResponse,
    RouteRequest,
    RouteResponse,
    openapi_with_intents,
)
from router.serve.prometheus import MODEL_SCOPE_KEY, MetricsMiddleware
from router.serve.settings import ServeSettings, is_loopback
from router.serve.state import ReloadError, State, one_line
from router.tracing import instrument_app, record_decisions

log = logging.getLogger("intent_router.serve")
REQUEST_ID_HEADER = "X-Request-ID"
REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
KNOWN_PATHS = ("/v1/route", "/admin/reload", "/healthz", "/readyz", "/metrics", "/openapi.json", "/docs")


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.extra = status, code, message, extra


def _error(status: int, code: str, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message, **extra}}, status_code=status)


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
    async def _api_error(request: Request, e: ApiError):
        return _error(e.status, e.code, e.message, **e.extra)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, e: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(e.status_code, "http_error")
        return _error(e.status_code, code, str(e.detail))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, e: RequestValidationError):
        return _error(
            422, "invalid_request", "request does not match the schema", details=_errors(e.errors())
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
                return _error(503, "model_failed", state.error, pid=os.getpid())
            return _error(503, "loading", "the model is loading", pid=os.getpid())
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
        principal = _authenticate(request, state)
        body = await _read_body(request, state.limit("max_body_bytes"))
        req = _parse(body, RouteRequest)
        texts = _texts(req, state)
        role = _role(req, principal, state)
        engine = state.engine
        if engine is None:
            raise ApiError(503, "not_ready", "the model is not loaded yet; poll /readyz")
        router = engine.acquire()  # this request routes on this Router to the end, whatever a reload does
        if role not in router.config.roles:
            engine.release(router)
            raise ApiError(422, "unknown_role", f"unknown role {role!r}", roles=sorted(router.config.roles))
        prev = req.previous
        request_id = _request_id(request)
        fields = {"request_id": request_id, "key_id": principal.key_id if principal is not None else None}
        started = time.time_ns()
        decisions = await engine.route(  # releases the Router when its work ends
            router, texts, role, prev.decision if prev else None, prev.message if prev else None, fields
        )
        if state.tracer is not None:
            record_decisions(state.tracer, decisions, started, {"request_id": request_id})
        model_id = router.classifier.model_id
        request.scope[MODEL_SCOPE_KEY] = model_id
        m = state.metrics
        m.batch_size.labels(model=model_id).observe(len(texts))
        m.observe_decisions(decisions)
        if router.verifier is not None:
            m.set_breaker(state.breaker_state())
        payload = b'{"decisions":[' + b",".join(d.model_dump_json().encode() for d in decisions) + b"]}"
        return Response(payload, media_type="application/json", headers={REQUEST_ID_HEADER: request_id})


def _add_admin_reload(app: FastAPI, state: State, settings: ServeSettings) -> None:
    @app.post(
        "/admin/reload",
        summary="Load the model and config again, or others, and swap them in without dropping a request",
        response_model=ReloadResponse,
        responses={400: ERR, 401: ERR, 403: ERR, 409: ERR, 413: ERR, 422: ERR},
        openapi_extra=_body_schema(ReloadRequest, required=False),
    )
    async def admin_reload(request: Request):
        _authenticate_admin(request, state)
        body = await _read_body(request, state.limit("max_body_bytes"))
        req = _parse(body, ReloadRequest) if body.strip() else ReloadRequest()
        try:
            return await asyncio.to_thread(state.reload, req.model, req.config, False, req.compare_report)
        except ReloadError as e:
            raise ApiError(e.status, e.code, e.message, model_id=state.model_id) from None


def _body_schema(model: type[BaseModel], required: bool = True) -> dict:
    content = {"application/json": {"schema": model.model_json_schema()}}
    return {"requestBody": {"required": required, "content": content}}


# ---------------------------------------------------------------------------- request steps
def _authenticate_admin(request: Request, state: State) -> Principal:
    if state.keys is None:
        raise ApiError(
            403,
            "admin_key_required",
            "reloading over HTTP needs a key file with an admin key (admin: true); send SIGHUP instead",
        )
    p = _authenticate(request, state)
    if not p.admin:
        state.metrics.auth_failures.labels(reason="not_admin", model=state.metrics.model).inc()
        log.warning("key %s called an admin endpoint without being an admin key", p.key_id)
        raise ApiError(403, "not_admin", "this API key is not an admin key")
    return p


def _request_id(request: Request) -> str:
    """The caller's X-Request-ID when it is a plain id (at most 128 letters, digits and ``._:-``), else a
    new one; the decision log records it, and the response carries it back."""
    given = request.headers.get(REQUEST_ID_HEADER, "")
    return given if REQUEST_ID.fullmatch(given) else uuid.uuid4().hex


def _authenticate(request: Request, state: State) -> Principal | None:
    if state.keys is None:
        client = request.client.host if request.client else ""
        if not is_loopback(client):  # belt and braces: settings already refuse a non-loopback bind
            raise ApiError(403, "loopback_only", "this server has no key file and serves loopback only")
        return None
    key = key_from_headers(request.headers)
    if not key:
        state.metrics.auth_failures.labels(reason="missing_key", model=state.metrics.model).inc()
        raise ApiError(401, "missing_key", "send an API key: 'Authorization: Bearer KEY' or 'X-API-Key: KEY'")
    p = state.keys.authenticate(key)
    if p is None:
        state.metrics.auth_failures.labels(reason="bad_key", model=state.metrics.model).inc()
        log.warning(
            "refused a request with an unknown API key from %s",
            request.client.host if request.client else "?",
        )
        raise ApiError(401, "bad_key", "unknown API key")
    return p


async def _read_body(request: Request, limit: int) -> bytes:
    cl = request.headers.get("content-length")
    if cl is not None:
        try:
            n = int(cl)
        except ValueError:
            raise ApiError(400, "bad_content_length", "Content-Length is not a number") from None
        if n > limit:
            raise ApiError(
                413, "body_too_large", f"request body is {n} bytes; the limit is {limit}", limit=limit
            )
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, "body_too_large", f"request body exceeds {limit} bytes", limit=limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _parse(body: bytes, model: type[BaseModel]):
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise ApiError(400, "invalid_json", f"request body is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise ApiError(422, "invalid_request", "request body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ApiError(
            422, "invalid_request", "request does not match the schema", details=_errors(e.errors())
        ) from None


def _errors(errors) -> list[dict]:
    return [{"loc": [str(x) for x in e.get("loc", ())], "msg": e.get("msg", "")} for e in errors][:20]


def _texts(req: RouteRequest, state: State) -> list[str]:
    max_messages, max_chars = state.limit("max_messages"), state.limit("max_chars")
    if (req.message is None) == (req.messages is None):
        raise ApiError(
            422, "invalid_request", "give exactly one of 'message' (a string) or 'messages' (a list)"
        )
    texts = [req.message] if req.message is not None else req.messages
    if not texts:
        raise ApiError(422, "no_messages", "'messages' is empty")
    if len(texts) > max_messages:
        raise ApiError(
            422,
            "too_many_messages",
            f"{len(texts)} messages; the limit is {max_messages}",
            limit=max_messages,
        )
    if req.previous is not None:
        if req.previous.decision is None and req.previous.message is None:
            raise ApiError(422, "invalid_request", "'previous' needs its 'decision', its 'message', or both")
        if req.previous.message is not None and len(req.previous.message) > max_chars:
            raise ApiError(
                422,
                "message_too_long",
                f"the previous message has {len(req.previous.message)} characters; the limit is {max_chars}",
                limit=max_chars,
            )
    for i, t in enumerate(texts):
        if len(t) > max_chars:
            raise ApiError(
                422,
                "message_too_long",
                f"message {i} has {len(t)} characters; the limit is {max_chars}",
                index=i,
                limit=max_chars,
            )
    return texts


def _role(req: RouteRequest, p: Principal | None, state: State) -> str:
    role = req.role
    if role is None:
        if p is not None and len(p.roles) == 1:
            role = next(iter(p.roles))
        else:
            raise ApiError(422, "missing_role", "name the role to route for in 'role'")
    if p is not None and role not in p.roles:
        state.metrics.auth_failures.labels(reason="role_not_held", model=state.metrics.model).inc()
        log.warning("key %s asked for role %r, which it does not hold", p.key_id, role)
        raise ApiError(403, "role_not_held", f"this API key does not hold role {role!r}")
    return role
