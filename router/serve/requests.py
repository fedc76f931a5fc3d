"""The steps of a request before it routes: errors in one shape, API keys, the body and its limits, the
role, the request id (router.serve.app assembles the endpoints from them)."""

from __future__ import annotations

import json
import logging
import re
import uuid
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

from router.serve.auth import Principal, key_from_headers
from router.serve.models import RouteRequest
from router.serve.settings import is_loopback
from router.serve.state import State

log = logging.getLogger("intent_router.serve")
REQUEST_ID_HEADER = "X-Request-ID"
REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.extra = status, code, message, extra


def error_response(status: int, code: str, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message, **extra}}, status_code=status)


def authenticate_admin(request: Request, state: State) -> Principal:
    if state.keys is None:
        raise ApiError(
            403,
            "admin_key_required",
            "reloading over HTTP needs a key file with an admin key (admin: true); send SIGHUP instead",
        )
    p = authenticate(request, state)
    if not p.admin:
        state.metrics.auth_failures.labels(reason="not_admin", model=state.metrics.model).inc()
        log.warning("key %s called an admin endpoint without being an admin key", p.key_id)
        raise ApiError(403, "not_admin", "this API key is not an admin key")
    return p


def request_id(request: Request) -> str:
    """The caller's X-Request-ID when it is a plain id (at most 128 letters, digits and ``._:-``), else a
    new one; the decision log records it, and the response carries it back."""
    given = request.headers.get(REQUEST_ID_HEADER, "")
    return given if REQUEST_ID.fullmatch(given) else uuid.uuid4().hex


def authenticate(request: Request, state: State) -> Principal | None:
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


async def read_body(request: Request, limit: int) -> bytes:
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


def parse(body: bytes, model: type[BaseModel]):
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
            422, "invalid_request", "request does not match the schema", details=validation_errors(e.errors())
        ) from None


def validation_errors(errors) -> list[dict]:
    return [{"loc": [str(x) for x in e.get("loc", ())], "msg": e.get("msg", "")} for e in errors][:20]


def route_texts(req: RouteRequest, state: State) -> list[str]:
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


def route_role(req, p: Principal | None, state: State) -> str:
    """The role a request (with its optional ``role``) acts for: one its API key holds."""
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
