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


class ToolSearchRequest(BaseModel):
    """A request's top ``k`` tools of the service's tool registry, among those ``role`` may use, with no
    intent gating: the client-side tool search of an agent."""

    model_config = ConfigDict(extra="forbid")
    role: StrictStr | None = Field(None, description="As for /v1/route.")
    query: StrictStr = Field(min_length=1)
    k: int = Field(5, ge=1, le=100)


class ToolHit(BaseModel):
    name: str
    skill: str
    score: float = Field(description="BM25 score of the tool's words against the query.")
    dense: float | None = Field(
        None,
        description="Cosine similarity to the query by the router config's tool_search.encoder, whose "
        "ranking is fused with BM25's; null without an encoder.",
    )
    requires_confirmation: bool
    definition: dict = Field(description="What the agent loads: name, description, input_schema.")


class ToolSearchResponse(BaseModel):
    query: str
    tools: list[ToolHit]


class ReloadRequest(BaseModel):
    """Paths to load instead of the current ones; an empty body (or ``{}``) loads the current paths again."""

    model_config = ConfigDict(extra="forbid")
    model: StrictStr | None = Field(None, min_length=1, description="Exported model directory.")
    config: StrictStr | None = Field(None, min_length=1, description="Router config YAML.")
    compare_report: StrictStr | None = Field(
        None,
        min_length=1,
        description="compare.json of the serving model (incumbent) against the new one (candidate); the "
        "reload is refused unless it passed. Default: serve's --reload-compare, if given.",
    )


class ReloadResponse(BaseModel):
    model_config = ConfigDict(protected_namespaces=())
    status: str
    model_id: str = Field(description="The model now serving in the worker that answered.")
    previous_model_id: str | None
    model: str
    config: str | None = Field(description="None: the packaged router config.")
    seconds: float = Field(description="Time to load and check the new model.")
    pid: int = Field(description="The worker process that reloaded.")
    other_workers: int | None = Field(
        None, description="With several workers: how many others were told to load the same paths."
    )


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
