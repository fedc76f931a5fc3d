"""The request and response bodies of the HTTP service (router.serve.app), as published in /openapi.json."""

from __future__ import annotations

import copy

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from router.decision import Decision, name_intents


class PreviousTurn(BaseModel):
    """The turn before the message(s), for a conversation: the service keeps no state, so the caller sends
    it. A continuation ("same for staging", "yes, do it") then takes the conversation's intents."""

    model_config = ConfigDict(extra="forbid")
    decision: Decision | None = Field(
        None, description="The Decision the service returned for the previous turn, as it was returned."
    )
    message: StrictStr | None = Field(
        None, description="The previous message, when the caller keeps no decisions: it is routed too."
    )


class RouteRequest(BaseModel):
    """One message (``message``) or several (``messages``), routed for ``role``, each read after
    ``previous`` when it is given."""

    model_config = ConfigDict(extra="forbid")
    role: StrictStr | None = Field(
        None, description="Role to route for; must be one the API key holds. Optional if the key holds one."
    )
    message: StrictStr | None = None
    messages: list[StrictStr] | None = None
    previous: PreviousTurn | None = None


class RouteResponse(BaseModel):
    decisions: list[Decision]


class ErrorBody(BaseModel):
    code: str
    message: str


class ErrorResponse(BaseModel):
    error: ErrorBody


def openapi_with_intents(schema: dict, intents: tuple[str, ...]) -> dict:
    """A copy of the service's OpenAPI document whose Decision names the served model's intents."""
    named = copy.deepcopy(schema)
    parts = named.get("components", {}).get("schemas", {})
    if "Decision" in parts and "RankedIntent" in parts:
        name_intents(parts["Decision"], parts["RankedIntent"], intents)
    return named
