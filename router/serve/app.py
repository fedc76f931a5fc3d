"""The FastAPI app: POST /v1/route, GET /healthz, /readyz, /metrics, and the OpenAPI document.

One Router per process, loaded in the background at start-up (``/readyz`` is 503 until it is loaded
and has routed a canary message). ``route_batch`` runs in worker threads, never on the event loop, so
a slow verifier call does not hold up other requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from router.decision import Decision
from router.serve.auth import KeyStore, Principal, key_from_headers
from router.serve.metrics import Metrics
from router.serve.models import ErrorResponse, PreviousTurn, RouteRequest, RouteResponse, openapi_with_intents
from router.serve.settings import ServeSettings, is_loopback

log = logging.getLogger("intent_router.serve")
CANARY = "restart the indexing service"
KNOWN_PATHS = ("/v1/route", "/healthz", "/readyz", "/metrics", "/openapi.json", "/docs")


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.extra = status, code, message, extra


def _error(status: int, code: str, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message, **extra}}, status_code=status)


# ------------------------------------------------------------------------------------ engine
class Engine:
    """Runs route_batch in a thread pool, off the event loop.

    Micro-batching concurrent requests into one route_batch call was measured and dropped: on 2 cores
    it lowered throughput and raised latency under load (docs/serve.md)."""

    def __init__(self, router, settings: ServeSettings, metrics: Metrics) -> None:
        self.router = router
        self.metrics = metrics
        threads = settings.verifier_threads if router.verifier is not None else settings.inference_threads
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="route")

    async def route(
        self, texts: list[str], role: str, previous: PreviousTurn | None = None
    ) -> list[Decision]:
        loop = asyncio.get_running_loop()
        turn = {"previous": previous.decision, "context": previous.message} if previous is not None else {}
        work = functools.partial(self.router.route_batch, texts, role, **turn)
        decisions = await loop.run_in_executor(self.pool, work)
        self.metrics.batch_size.observe(len(texts))
        return decisions

    def close(self) -> None:
        self.pool.shutdown(wait=True)


# ------------------------------------------------------------------------------------- state
class State:
    def __init__(self, settings: ServeSettings) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.keys: KeyStore | None = KeyStore.load(settings.key_file) if settings.key_file else None
        self.engine: Engine | None = None
        self.router = None
        self.error: str | None = None
        self.roles: set[str] = set()

    def load(self) -> None:
        """Load the router (sha256 of every model file is checked) and route a canary message."""
        from router.config import RouterConfig
        from router.routing import Router

        s = self.settings
        cfg = RouterConfig.load(s.config)
        verifier = None
        if s.verifier_url:
            from router.verifier import LLMVerifier, VerifierSettings

            vs = VerifierSettings.from_env(
                base_url=s.verifier_url, model=s.verifier_model, timeout=s.verifier_timeout
            )
            verifier = LLMVerifier(vs, registry=cfg)
        router = Router.load(
            s.model_dir, config=cfg, verifier=verifier, threshold=s.threshold, intra_op_threads=s.ort_threads
        )
        d = router.route_batch([CANARY], next(iter(cfg.roles)))[0]
        if d.source == "guardrail" or d.confidence is None:
            raise RuntimeError(f"canary message was not classified: {d.source}/{d.reason_code.value}")
        self.roles = set(cfg.roles)
        if self.keys is not None:
            for kid, missing in self.keys.roles_unknown_to(self.roles).items():
                log.warning("key %s grants role(s) %s that the router config does not define", kid, missing)
        self.router = router
        self.engine = Engine(router, s, self.metrics)
        self.metrics.ready.set(1)

    def breaker_state(self) -> str:
        breaker = getattr(getattr(self.router, "verifier", None), "breaker", None)
        return getattr(breaker, "state", "none") if breaker is not None else "none"


# --------------------------------------------------------------------------------------- app
def create_app(settings: ServeSettings | None = None) -> FastAPI:
    settings = settings or ServeSettings()
    state = State(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        async def load() -> None:
            if settings.load_delay:
                await asyncio.sleep(settings.load_delay)
            t0 = time.perf_counter()
            try:
                await asyncio.to_thread(state.load)
            except Exception as e:
                state.error = f"{type(e).__name__}: {e}"
                log.error("model failed to load: %s", state.error)
                return
            log.info("router ready in %.2f s: %s", time.perf_counter() - t0, state.router.classifier.model_id)

        task = asyncio.create_task(load())
        try:
            yield
        finally:
            task.cancel()
            if state.engine is not None:
                await asyncio.to_thread(state.engine.close)
            verifier = getattr(state.router, "verifier", None)
            if verifier is not None and hasattr(verifier, "close"):
                verifier.close()

    app = FastAPI(
        title="intent-router",
        version="1",
        summary="Routes messages to intents and skills, with the caller's role from its API key.",
        lifespan=lifespan,
    )
    app.state.router_state = state
    generic_openapi = app.openapi  # FastAPI builds it once; the model's intents are named in a copy

    def openapi() -> dict:
        schema = generic_openapi()
        return schema if state.router is None else openapi_with_intents(schema, state.router.intents)

    app.openapi = openapi

    # ----------------------------------------------------------------------- error handlers
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

    # --------------------------------------------------------------------------- middleware
    app.add_middleware(_MetricsMiddleware, metrics=state.metrics)

    # ----------------------------------------------------------------------------- endpoints
    @app.get("/healthz", summary="Process is up")
    async def healthz():
        return {"status": "ok"}

    @app.get("/readyz", summary="Model loaded and verified", responses={503: {"model": ErrorResponse}})
    async def readyz():
        if state.engine is None:
            if state.error:
                return _error(503, "model_failed", state.error)
            return _error(503, "loading", "the model is loading")
        return {"status": "ready", "model_id": state.router.classifier.model_id, "roles": sorted(state.roles)}

    @app.get("/metrics", summary="Prometheus metrics")
    async def metrics():
        state.metrics.set_breaker(state.breaker_state())
        return Response(state.metrics.render(), media_type=state.metrics.content_type)

    err = {"model": ErrorResponse}

    @app.post(
        "/v1/route",
        summary="Route one message or a list",
        response_model=RouteResponse,
        responses={400: err, 401: err, 403: err, 413: err, 422: err, 503: err},
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": RouteRequest.model_json_schema()}},
            }
        },
    )
    async def route(request: Request):
        principal = _authenticate(request, state)
        body = await _read_body(request, settings.max_body_bytes)
        req = _parse(body)
        texts = _texts(req, settings)
        role = _role(req, principal, state)
        if state.engine is None:
            raise ApiError(503, "not_ready", "the model is not loaded yet; poll /readyz")
        decisions = await state.engine.route(texts, role, req.previous)
        state.metrics.observe_decisions(decisions)
        payload = b'{"decisions":[' + b",".join(d.model_dump_json().encode() for d in decisions) + b"]}"
        return Response(payload, media_type="application/json")

    return app


# ---------------------------------------------------------------------------- request steps
def _authenticate(request: Request, state: State) -> Principal | None:
    if state.keys is None:
        client = request.client.host if request.client else ""
        if not is_loopback(client):  # belt and braces: settings already refuse a non-loopback bind
            raise ApiError(403, "loopback_only", "this server has no key file and serves loopback only")
        return None
    key = key_from_headers(request.headers)
    if not key:
        state.metrics.auth_failures.labels(reason="missing_key").inc()
        raise ApiError(401, "missing_key", "send an API key: 'Authorization: Bearer KEY' or 'X-API-Key: KEY'")
    p = state.keys.authenticate(key)
    if p is None:
        state.metrics.auth_failures.labels(reason="bad_key").inc()
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


def _parse(body: bytes) -> RouteRequest:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise ApiError(400, "invalid_json", f"request body is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise ApiError(422, "invalid_request", "request body must be a JSON object")
    try:
        return RouteRequest.model_validate(data)
    except ValidationError as e:
        raise ApiError(
            422, "invalid_request", "request does not match the schema", details=_errors(e.errors())
        ) from None


def _errors(errors) -> list[dict]:
    return [{"loc": [str(x) for x in e.get("loc", ())], "msg": e.get("msg", "")} for e in errors][:20]


def _texts(req: RouteRequest, s: ServeSettings) -> list[str]:
    if (req.message is None) == (req.messages is None):
        raise ApiError(
            422, "invalid_request", "give exactly one of 'message' (a string) or 'messages' (a list)"
        )
    texts = [req.message] if req.message is not None else req.messages
    if not texts:
        raise ApiError(422, "no_messages", "'messages' is empty")
    if len(texts) > s.max_messages:
        raise ApiError(
            422,
            "too_many_messages",
            f"{len(texts)} messages; the limit is {s.max_messages}",
            limit=s.max_messages,
        )
    if req.previous is not None:
        if req.previous.decision is None and req.previous.message is None:
            raise ApiError(422, "invalid_request", "'previous' needs its 'decision', its 'message', or both")
        if req.previous.message is not None and len(req.previous.message) > s.max_chars:
            raise ApiError(
                422,
                "message_too_long",
                f"the previous message has {len(req.previous.message)} characters; the limit is {s.max_chars}",
                limit=s.max_chars,
            )
    for i, t in enumerate(texts):
        if len(t) > s.max_chars:
            raise ApiError(
                422,
                "message_too_long",
                f"message {i} has {len(t)} characters; the limit is {s.max_chars}",
                index=i,
                limit=s.max_chars,
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
        state.metrics.auth_failures.labels(reason="role_not_held").inc()
        log.warning("key %s asked for role %r, which it does not hold", p.key_id, role)
        raise ApiError(403, "role_not_held", f"this API key does not hold role {role!r}")
    if state.engine is not None and role not in state.roles:
        raise ApiError(422, "unknown_role", f"unknown role {role!r}", roles=sorted(state.roles))
    return role


# ------------------------------------------------------------------------------- middleware
class _MetricsMiddleware:
    """Plain ASGI (cheaper than BaseHTTPMiddleware): count requests by status, time them."""

    def __init__(self, app, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        path = path if path in KNOWN_PATHS else "other"
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
            m.request_seconds.labels(path=path).observe(time.perf_counter() - t0)
            m.requests.labels(path=path, status=str(status["code"])).inc()


# ------------------------------------------------------------------------------------- run
def run(settings: ServeSettings) -> None:
    """Serve with uvicorn until SIGINT/SIGTERM; requests in flight get ``graceful_timeout`` seconds."""
    import uvicorn

    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if settings.key_file is None:
        log.warning(
            "no key file: listening on loopback only (%s); every local caller may use every role",
            settings.host,
        )
    else:
        log.info("key file %s: roles come from API keys", settings.key_file)
    app = create_app(settings)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        access_log=settings.access_log,
        timeout_graceful_shutdown=settings.graceful_timeout,
    )
