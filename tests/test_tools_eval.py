"""Tools measured: examples from (request, tool) pairs, the eval report's tools section counted from
route()'s Decisions, the fitted none-applies floor, the gate's tool checks, and RBAC over random
registries and roles."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from router.config import RouterConfig
from router.tools.examples import add_examples, read_pairs
from router.tools.registry import Tool, ToolRegistry, ToolRegistryError
from router.tools.search import ToolIndex
from tests.conftest import SHIPPED
from tests.test_tools_routing import TOOLS

ROWS = [
    {"text": "email the quarterly numbers to dana and raj", "tools": ["send_email"]},
    {"text": "restart the billing worker, it is stuck", "tools": ["restart_service"]},
    {"text": "pull up ticket 4411", "tools": ["get_ticket"]},
    {
        "text": "find the onboarding deck and mail it to the new hire",
        "tools": ["search_documents", "send_email"],
    },
    {"text": "thanks a lot, that's all for today", "tools": []},
    {"text": "what's the capital of peru", "tools": []},
]


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def test_examples_find_a_tool_whose_description_shares_no_word_with_the_request():
    bare = ToolRegistry(tools=TOOLS)
    request = "bounce nightly cron box"
    assert all(h.lexical == 0 for h in ToolIndex(bare).search(request, 7))  # no word in common
    taught, added = add_examples(bare, [("please bounce the cron box on host 7", "restart_service")])
    assert added == 1
    assert [h.name for h in ToolIndex(taught).search(request, 1)] == ["restart_service"]
    assert "examples" not in taught.by_name()["restart_service"].definition()  # the agent never loads them


def test_the_examples_command_adds_pairs_skips_repeats_and_refuses_a_bad_file_whole(tmp_path):
    from cli import app

    registry = tmp_path / "tools.yaml"
    ToolRegistry(tools=TOOLS).save(registry)
    pairs = write_jsonl(
        tmp_path / "pairs.jsonl",
        [
            {"text": "bounce the cron box", "tool": "restart_service"},
            {"text": "open INC-7", "tool": "get_ticket"},
        ],
    )
    runner = CliRunner()
    first = runner.invoke(app, ["tools", "examples", pairs, "--registry", str(registry)])
    assert first.exit_code == 0, first.output
    again = runner.invoke(app, ["tools", "examples", pairs, "--registry", str(registry)])
    assert "0 examples" in again.output
    assert ToolRegistry.load(registry).by_name()["get_ticket"].examples == ["open INC-7"]

    before = registry.read_text(encoding="utf-8")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"text": "fine one", "tool": "send_email"}\n{"text": "x", "tool": "launch_rocket"}\n'
        '{"text": "  ", "tool": "send_email"}\nnot json\n',
        encoding="utf-8",
    )
    out = runner.invoke(app, ["tools", "examples", str(bad), "--registry", str(registry)])
    assert out.exit_code == 2
    for where in (f"{bad}:2", "launch_rocket", f"{bad}:3", f"{bad}:4"):
        assert where in out.output.replace("\n", "")
    assert registry.read_text(encoding="utf-8") == before  # nothing written


def test_a_request_of_several_steps_is_an_example_of_each_tool_it_lists(tmp_path):
    task = "find the onboarding deck and mail it to the new hire"
    path = write_jsonl(
        tmp_path / "pairs.jsonl",
        [
            {"text": task, "tools": ["search_documents", "send_email", "send_email"]},
            {"text": "x", "tool": "get_ticket"},
        ],
    )
    pairs = read_pairs(path, ToolRegistry(tools=TOOLS))
    assert pairs == [(task, "search_documents"), (task, "send_email"), ("x", "get_ticket")]
    for bad, says in (
        ({"text": task, "tools": []}, "non-empty list"),
        ({"text": task, "tools": "send_email"}, "non-empty list"),
        ({"text": task, "tools": ["send_email", "launch_rocket"]}, "launch_rocket"),
        ({"text": task, "tool": "send_email", "tools": ["send_email"]}, "each line is"),
    ):
        with pytest.raises(ToolRegistryError, match=says):
            read_pairs(write_jsonl(tmp_path / "bad.jsonl", [bad]), ToolRegistry(tools=TOOLS))


def test_a_pairs_file_that_is_not_utf8_is_refused(tmp_path):
    bad = tmp_path / "pairs.jsonl"
    bad.write_bytes(b'{"text": "caf\xe9", "tool": "send_email"}\n')
    with pytest.raises(ToolRegistryError, match="not UTF-8"):
        read_pairs(bad, ToolRegistry(tools=TOOLS))


@pytest.fixture(scope="module")
def router():
    from router import Router

    return Router.load(SHIPPED, tools=ToolRegistry(tools=TOOLS))


def test_the_tools_section_counts_what_route_picks(router, tmp_path):
    from eval.metrics.tool_selection import tool_section

    path = write_jsonl(tmp_path / "tools.jsonl", ROWS)
    section = tool_section(router, path)
    decisions = router.route_batch([r["text"] for r in ROWS], role="admin")
    picked = [{p.name for p in d.tools.tools} for d in decisions]
    need = [(set(r["tools"]), p) for r, p in zip(ROWS, picked, strict=True) if r["tools"]]
    recall = sum(len(n & p) / len(n) for n, p in need) / len(need)
    assert section["routed"]["recall_at_k"] == pytest.approx(recall, abs=1e-4)
    assert section["routed"]["all_needed"] == pytest.approx(
        sum(n <= p for n, p in need) / len(need), abs=1e-4
    )
    said = [r for r, d in zip(ROWS, decisions, strict=True) if d.tools.none_applies]
    assert section["routed"]["none_applies"]["said"] == len(said)
    assert section["needing"] == 4 and section["n"] == 6
    assert "send_email" in picked[0]  # the plain request gets its tool
    assert picked[4] == set()  # small talk: no skill, no tool
    tokens = section["routed"]["tokens"]
    assert 0 < tokens["saved_of_registry"] < 1 and tokens["registry"] == sum(router.tools.tokens.values())


def test_a_tool_file_naming_an_unknown_tool_is_refused_with_its_line(tmp_path):
    from eval.metrics.tool_selection import load_tool_rows
    from eval.readers.sources import DataError

    path = write_jsonl(tmp_path / "t.jsonl", [ROWS[0], {"text": "launch it", "tools": ["launch_rocket"]}])
    with pytest.raises(DataError, match=r"t\.jsonl:2: tools: \['launch_rocket'\] not in the registry"):
        load_tool_rows(path, {t.name for t in TOOLS})


def test_the_fitted_floor_keeps_recall_within_its_bound(router, tmp_path):
    from eval.metrics.tool_selection import fit_tool_floor, load_tool_rows

    rows = load_tool_rows(write_jsonl(tmp_path / "dev.jsonl", ROWS), {t.name for t in TOOLS})
    fit = fit_tool_floor(router, rows, max_recall_loss=0.0)
    assert fit["at_floor"]["recall_at_k"] == fit["no_floor"]["recall_at_k"]
    assert fit["min_score"] >= 0
    loose = fit_tool_floor(router, rows, max_recall_loss=1.0)
    assert loose["at_floor"]["none_applies_recall"] >= fit["at_floor"]["none_applies_recall"]
    from router import Router

    cfg = RouterConfig.load()
    floored = cfg.model_copy(update={"tool_search": cfg.tool_search.model_copy(update={"min_score": 1.0})})
    with pytest.raises(ValueError, match="min_score 0"):
        fit_tool_floor(Router.load(SHIPPED, floored, tools=ToolRegistry(tools=TOOLS)), rows)


def test_the_calibrate_command_writes_a_config_with_the_floor(tmp_path):
    from cli import app

    registry = tmp_path / "tools.yaml"
    ToolRegistry(tools=TOOLS).save(registry)
    out = tmp_path / "router.yaml"
    dev = write_jsonl(tmp_path / "dev.jsonl", ROWS)
    result = CliRunner().invoke(
        app, ["tools", "calibrate", dev, "--registry", str(registry), "--write-config", str(out)]
    )
    assert result.exit_code == 0, result.output
    written = RouterConfig.load(out)
    assert f"min_score {written.tool_search.min_score:g}" in result.output
    assert written.intents == RouterConfig.load().intents  # the rest of the config is kept


def test_the_gate_floors_tool_recall(router, tmp_path):
    from eval.metrics.tool_selection import tool_section
    from eval.reports.gate import make_baseline, run_gate

    report = _minimal_report()
    report["tools"] = tool_section(router, write_jsonl(tmp_path / "t.jsonl", ROWS))
    baseline = make_baseline(report)
    assert set(baseline["tools"]) == {
        "recall_at_k",
        "all_needed",
        "none_applies_precision",
        "tokens_saved_of_registry",
    }
    assert all(c.passed for c in run_gate(report, baseline))
    worse = json.loads(json.dumps(report))
    worse["tools"]["routed"]["recall_at_k"] -= 0.2
    failed = [c.name for c in run_gate(worse, baseline) if not c.passed]
    assert failed == ["tools.recall_at_k"]
    worse.pop("tools")
    missing = [c for c in run_gate(worse, baseline) if not c.passed]
    assert missing and "--tools REGISTRY --tool-data FILE" in missing[0].detail


def _minimal_report() -> dict:
    per_class = {"ACTION": {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 3}}
    return {
        "model": {"model_id": "m", "backend": "onnx"},
        "data": {"source": "d", "sha256": "s", "n": 3},
        "created_at": "2026-01-01T00:00:00Z",
        "threshold": 0.75,
        "classification": {"accuracy": 1.0, "macro_f1": 1.0, "per_class": per_class},
        "calibration": {"ece": 0.01},
        "thresholds": {"at_tau": {"tau": 0.75, "accepted_accuracy": 1.0}, "sweep": []},
    }


SKILLS = ["retrieval", "action", "memory", "synthesis"]
PERMS = ["read_documents", "execute_tools", "finance", "admin_actions"]


@st.composite
def registry_and_roles(draw):
    tools = []
    for i in range(draw(st.integers(1, 25))):
        tools.append(
            Tool(
                name=f"tool_{i}",
                description=draw(
                    st.sampled_from(["send the report", "find the report", "restart it", "pay"])
                ),
                skill=draw(st.sampled_from(SKILLS)),
                permissions=draw(st.lists(st.sampled_from(PERMS), max_size=2, unique=True)),
            )
        )
    roles = {
        f"role_{j}": {
            "skills": draw(st.lists(st.sampled_from(SKILLS), max_size=4, unique=True)),
            "permissions": draw(st.lists(st.sampled_from(PERMS), max_size=4, unique=True)),
        }
        for j in range(draw(st.integers(1, 4)))
    }
    return ToolRegistry(tools=tools), roles


@settings(max_examples=60, deadline=None)
@given(
    case=registry_and_roles(), text=st.sampled_from(["send the report to anna", "find the report", "pay it"])
)
def test_no_role_is_ever_given_a_tool_it_may_not_use(classifier, case, text):
    from router import Router
    from router.rbac import skill_denial_reason

    registry, roles = case
    data = RouterConfig.load().model_dump()
    data["roles"] = roles
    config = RouterConfig.model_validate(data)
    routed = Router(classifier, config, tools=registry)
    stage = routed.tools
    named = registry.by_name()

    def may_use(role: str, tool: str) -> bool:
        t = named[tool]
        have = set(roles[role]["permissions"])
        return skill_denial_reason(config, role, t.skill) is None and set(t.permissions) <= have

    for role in roles:
        decision = routed.route(text, role=role)
        assert all(may_use(role, p.name) for p in decision.tools.tools)
        assert all(may_use(role, name) for name in stage.usable(role))
        assert all(may_use(role, h.name) for h in stage.index.search(text, 25, allowed=stage.usable(role)))


@pytest.fixture(scope="module")
def classifier():
    from router.classifier import Classifier

    return Classifier(SHIPPED)


def test_a_registry_is_read_back_from_its_cache_until_the_file_changes(tmp_path):
    path = tmp_path / "tools.yaml"
    ToolRegistry(tools=TOOLS).save(path)
    first = ToolRegistry.load(path, cache=True)
    cached = list((tmp_path / ".tool-cache").glob("registry-tools-*.json"))
    assert len(cached) == 1
    assert ToolRegistry.load(path, cache=True) == first
    cached[0].write_text("{broken", encoding="utf-8")  # a damaged cache falls back to the file
    assert ToolRegistry.load(path, cache=True) == first
    ToolRegistry(tools=TOOLS[:2]).save(path)
    assert [t.name for t in ToolRegistry.load(path, cache=True).tools] == [t.name for t in TOOLS[:2]]
    assert len(list((tmp_path / ".tool-cache").glob("registry-tools-*.json"))) == 1  # the stale one is gone


def test_ten_thousand_tools_load_and_route_and_a_huge_description_is_refused(tmp_path):
    import yaml

    from router import Router

    tools = [
        {"name": f"tool_{i}", "description": f"operation {i} on records of kind {i % 97}", "skill": "action"}
        for i in range(10_000)
    ]
    path = tmp_path / "tools.yaml"
    path.write_text(yaml.safe_dump({"tools": tools}), encoding="utf-8")
    router = Router.load(SHIPPED, tools=path)
    decision = router.route("run operation 4242 on the records now", role="admin")
    assert decision.tools.candidates == 10_000
    assert decision.tools.tools[0].name == "tool_4242"

    path.write_text(
        yaml.safe_dump({"tools": [{**tools[0], "description": "x " * 500_000}]}), encoding="utf-8"
    )
    with pytest.raises(
        ToolRegistryError, match=r"tools\.0\.description.*1,000,000 characters, more than 20,000"
    ):
        ToolRegistry.load(path)
