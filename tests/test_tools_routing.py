"""Tools in the Decision: the few tools of the granted skills a message needs, per role, for both intents of
a compound request, none for small talk; and the service's /v1/route and /v1/tools/search with a registry."""

from __future__ import annotations

import pytest

from router.config import RouterConfig
from router.tools.registry import Tool, ToolRegistry
from tests.conftest import SHIPPED

TOOLS = [
    Tool(
        name="send_email", description="Send an email to recipients with a subject and a body", skill="action"
    ),
    Tool(
        name="delete_email",
        description="Delete an email message from the mailbox",
        skill="action",
        requires_confirmation=True,
    ),
    Tool(name="restart_service", description="Restart a running service or worker by name", skill="action"),
    Tool(
        name="transfer_funds",
        description="Transfer money between bank accounts",
        skill="action",
        permissions=["move_money"],
    ),
    Tool(
        name="search_documents",
        description="Search the documents and decks of the knowledge base",
        skill="retrieval",
    ),
    Tool(name="get_ticket", description="Fetch a support ticket by its number", skill="retrieval"),
    Tool(
        name="recall_preferences",
        description="Read what the user said earlier about preferences",
        skill="memory",
    ),
]


@pytest.fixture(scope="module")
def router():
    from router import Router

    return Router.load(SHIPPED, tools=ToolRegistry(tools=TOOLS))


def names(d) -> list[str]:
    return [t.name for t in d.tools.tools]


def test_an_action_gets_its_tool_first_and_the_definitions_not_loaded_are_counted(router):
    d = router.route("email the quarterly report to anna", "admin")
    assert d.intents == ["ACTION"] and names(d)[0] == "send_email"
    assert d.tools.candidates == 4 and not d.tools.none_applies  # the action skill's four: admin holds "*"
    every = sum(router.tools.tokens[t.name] for t in TOOLS if t.skill == "action")
    assert d.tools.tokens_loaded + d.tools.tokens_saved == every
    assert d.tools.tokens_loaded == sum(t.tokens for t in d.tools.tools)
    assert d.trace[-1].stage == "tools" and d.trace[-1].detail["picked"] == names(d)
    deleted = router.route("delete the email from the bank", "admin")
    assert deleted.tools.tools[0].name == "delete_email" and deleted.tools.tools[0].requires_confirmation


def test_the_role_decides_which_tools_are_candidates(router):
    viewer = router.route("email the quarterly report to anna", "viewer")  # the action skill is denied
    assert viewer.tools.candidates == 0 and viewer.tools.none_applies and viewer.tools.tools == []
    cfg = RouterConfig.load(None)
    cfg.roles["operator"] = cfg.roles["admin"].model_copy(update={"permissions": ["execute_tools"]})
    from router import Router

    r = Router.load(SHIPPED, config=cfg, tools=ToolRegistry(tools=TOOLS))
    d = r.route("transfer money from savings to the checking account", "operator")
    assert "transfer_funds" not in names(d)  # its own permission, move_money, is not held
    assert "transfer_funds" in names(r.route("transfer money from savings to the checking account", "admin"))


def test_a_compound_request_gets_tools_of_both_intents_and_small_talk_gets_none(router):
    d = router.route("find the Q3 board deck and email it to maria", "admin")
    assert set(d.intents) == {"SEARCH", "ACTION"}
    assert {"search_documents", "send_email"} <= set(names(d))
    thanks = router.route("thanks, that's all", "admin")
    assert thanks.intent is None and thanks.tools.candidates == 0 and thanks.tools.none_applies


def test_k_the_budget_and_the_floor_come_from_the_config():
    from router import Router

    cfg = RouterConfig.load(None)
    cfg.tool_search = cfg.tool_search.model_copy(update={"k": 1})
    r = Router.load(SHIPPED, config=cfg, tools=ToolRegistry(tools=TOOLS))
    assert len(r.route("email and delete the report", "admin").tools.tools) == 1
    cfg.tool_search = cfg.tool_search.model_copy(update={"k": 5, "min_score": 100.0})
    r = Router.load(SHIPPED, config=cfg, tools=ToolRegistry(tools=TOOLS))
    d = r.route("email the report to anna", "admin")
    assert d.tools.none_applies and d.tools.candidates == 4  # nothing scores above the floor
    cfg.tool_search = cfg.tool_search.model_copy(update={"min_score": 0.0, "token_budget": 1})
    r = Router.load(SHIPPED, config=cfg, tools=ToolRegistry(tools=TOOLS))
    assert r.route("email the report to anna", "admin").tools.tools == []  # no definition fits


def test_a_registry_with_a_skill_the_config_lacks_is_refused(tmp_path):
    from router import Router
    from router.tools.registry import ToolRegistryError

    bad = ToolRegistry(tools=[Tool(name="x", description="does x", skill="payments")])
    with pytest.raises(ToolRegistryError, match=r"tools.0.skill 'payments' \(x\): not a skill"):
        Router.load(SHIPPED, tools=bad)
    path = ToolRegistry(tools=TOOLS).save(tmp_path / "tools.yaml")
    assert Router.load(SHIPPED, tools=path).tools.registry.digest == ToolRegistry(tools=TOOLS).digest


def test_the_service_returns_tools_in_decisions_and_searches_them(tmp_path):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from router.serve.app import create_app
    from router.serve.settings import ServeSettings

    path = ToolRegistry(tools=TOOLS).save(tmp_path / "tools.yaml")
    app = create_app(ServeSettings(model_dir=SHIPPED, tools=path, load_before_serving=True))
    with TestClient(app, client=("127.0.0.1", 50000)) as client:
        r = client.post("/v1/route", json={"role": "admin", "message": "email the quarterly report to anna"})
        assert r.status_code == 200 and r.json()["decisions"][0]["tools"]["tools"][0]["name"] == "send_email"
        r = client.post("/v1/tools/search", json={"role": "viewer", "query": "fetch ticket 4411", "k": 3})
        assert r.status_code == 200, r.text
        hits = r.json()["tools"]
        assert hits[0]["name"] == "get_ticket"
        assert {h["skill"] for h in hits} == {"retrieval"}  # viewer: retrieval only
        assert hits[0]["definition"]["name"] == "get_ticket" and hits[0]["score"] > 0
        r = client.post("/v1/tools/search", json={"role": "viewer", "query": ""})
        assert r.status_code == 422
    bare = create_app(ServeSettings(model_dir=SHIPPED, load_before_serving=True))
    with TestClient(bare, client=("127.0.0.1", 50000)) as client:
        r = client.post("/v1/tools/search", json={"role": "admin", "query": "email anna"})
        assert r.status_code == 404 and r.json()["error"]["code"] == "no_tool_registry"
        decision = client.post("/v1/route", json={"role": "admin", "message": "email anna"}).json()
        assert decision["decisions"][0]["tools"] is None
