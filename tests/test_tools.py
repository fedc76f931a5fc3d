"""The tool registry: strict loading, the three import formats and their errors, and tool search (BM25,
the model's embedding, their fusion) from the library and the command line."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from router.tools.importers import import_tools
from router.tools.registry import Tool, ToolRegistry, ToolRegistryError
from router.tools.search import BM25, Owners, ToolIndex, rrf, words
from tests.conftest import SHIPPED

WEATHER = {
    "name": "get_weather_forecast",
    "description": "Get the weather forecast for a city for the next days",
    "inputSchema": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "City name"}, "days": {"type": "integer"}},
        "required": ["city"],
    },
}
DELETE = {
    "name": "delete_calendar_event",
    "description": "Delete an event from the user's calendar",
    "inputSchema": {"type": "object", "properties": {"event_id": {"type": "string"}}},
    "annotations": {"destructiveHint": True},
}
EMAIL = {
    "name": "send_email",
    "description": "Send an email to recipients with a subject and body",
    "inputSchema": {"type": "object", "properties": {"to": {"type": "array", "items": {"type": "string"}}}},
}


def write(tmp_path, name: str, data) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


def test_the_three_formats_read_the_same_tool(tmp_path):
    mcp = write(tmp_path, "mcp.json", {"jsonrpc": "2.0", "id": 1, "result": {"tools": [WEATHER, DELETE]}})
    openai = write(
        tmp_path,
        "openai.json",
        [
            {
                "type": "function",
                "function": {
                    **{k: WEATHER[k] for k in ("name", "description")},
                    "parameters": WEATHER["inputSchema"],
                },
            }
        ],
    )
    anthropic = write(
        tmp_path,
        "anthropic.json",
        {
            "tools": [
                {
                    "name": WEATHER["name"],
                    "description": WEATHER["description"],
                    "input_schema": WEATHER["inputSchema"],
                }
            ]
        },
    )
    weather, delete = import_tools(mcp, "mcp", "action")
    assert weather.skill == "action" and weather.input_schema == WEATHER["inputSchema"]
    assert delete.requires_confirmation and not weather.requires_confirmation  # MCP's destructiveHint
    assert import_tools(openai, "openai", "action") == [weather]
    assert import_tools(anthropic, "anthropic", "action") == [weather]


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        (
            {**WEATHER, "description": "  "},
            r"tool 0 \(get_weather_forecast\): description: the description is empty",
        ),
        (
            {**WEATHER, "inputSchema": {"type": "string"}},
            r"input_schema: .*an object schema, got type 'string'",
        ),
        (
            {**WEATHER, "inputSchema": {"type": "object", "properties": {"city": {"type": "text"}}}},
            r"input_schema.properties.city.type 'text' is not a JSON Schema type",
        ),
        (
            {**WEATHER, "inputSchema": {"type": "object", "properties": {}, "required": "city"}},
            r"input_schema.required must be a list",
        ),
        ({**WEATHER, "inputSchema": {"type": "object", "minProperties": -1}}, r"not JSON Schema"),
        ({"description": "no name"}, r"tool 0: name"),
    ],
)
def test_a_bad_tool_is_refused_with_its_file_place_and_field(tmp_path, spec, error):
    path = write(tmp_path, "mcp.json", {"tools": [spec]})
    with pytest.raises(ToolRegistryError, match=error) as e:
        import_tools(path, "mcp", "action")
    assert "mcp.json" in str(e.value)


def test_file_level_errors(tmp_path):
    (tmp_path / "latin1.json").write_bytes('{"tools": [{"name": "caf\xe9"}]}'.encode("latin-1"))
    with pytest.raises(ToolRegistryError, match=r"latin1.json: not UTF-8 \(byte 24"):
        import_tools(tmp_path / "latin1.json", "mcp", "action")
    with pytest.raises(ToolRegistryError, match="expected a list of tools"):
        import_tools(write(tmp_path, "x.json", {"functions": []}), "openai", "action")
    with pytest.raises(ToolRegistryError, match="--format must be one of mcp, openai, anthropic"):
        import_tools(write(tmp_path, "y.json", []), "langchain", "action")
    with pytest.raises(ToolRegistryError, match="no tools"):
        import_tools(write(tmp_path, "z.json", []), "mcp", "action")
    with pytest.raises(
        ToolRegistryError, match=r"tool registry not found: .*none.yaml \(`intent-router tools import"
    ):
        ToolRegistry.load(tmp_path / "none.yaml")


def test_the_registry_refuses_repeated_names_unknown_fields_and_unknown_skills(tmp_path):
    tool = Tool(name="send_email", description="Send an email", skill="action")
    twice = json.dumps({"tools": [tool.model_dump(), tool.model_dump()]})
    with pytest.raises(ToolRegistryError, match=r"tools.1.name 'send_email' repeats"):
        ToolRegistry.loads(twice, "t.yaml")
    with pytest.raises(ToolRegistryError, match=r"t.yaml:3.*colour"):
        ToolRegistry.loads(
            "tools:\n  - name: a\n    colour: red\n    description: x\n    skill: action\n", "t.yaml"
        )
    registry = ToolRegistry(tools=[tool])
    with pytest.raises(ToolRegistryError, match=r"tools.0.skill 'action' \(send_email\): not a skill"):
        registry.check_skills(["retrieval"], "specs.json")
    with pytest.raises(ToolRegistryError, match="send_email are in the registry already"):
        registry.extended([tool], "specs.json")
    saved = ToolRegistry.load(registry.save(tmp_path / "tools.yaml"))
    assert saved == registry and saved.digest == registry.digest
    assert (
        ToolRegistry(tools=[tool.model_copy(update={"description": "Send a mail"})]).digest != registry.digest
    )


def test_bm25_and_reciprocal_rank():
    assert words("getWeatherForecast, get_weather-forecast") == ["get", "weather", "forecast"] * 2
    bm = BM25([["send", "email"], ["weather", "forecast", "city"], ["email", "email", "archive"]])
    s = bm.scores(["email"])
    assert s[1] == 0 and s[2] > s[0] > 0  # more occurrences score higher, saturating
    assert list(rrf(np.array([0.1, 0.9, 0.5]))) == pytest.approx([1 / 63, 1 / 61, 1 / 62])


def test_a_tools_examples_add_their_best_three_scores():
    owner = np.array([0, 0, 0, 0, 1, 1])
    scores = np.array([1.0, 4.0, 0.0, 3.0, 2.0, 0.5])
    assert list(Owners.of(owner, 3, 3).best(scores)) == [8.0, 2.5, 0.0]  # tool 2 has no examples
    assert list(Owners.of(owner, 3, 1).best(scores)) == [4.0, 2.0, 0.0]
    assert list(Owners.of(owner, 3, 3).best(np.zeros(6))) == [0.0, 0.0, 0.0]
    assert list(Owners.of(np.zeros(0, dtype=np.int64), 2).best(np.zeros(0))) == [0.0, 0.0]


def test_many_examples_neither_dilute_nor_outvote_the_one_that_matches(tmp_path):
    def embed(texts):  # a word-count embedding over three words: cosine is word overlap
        return np.array([[t.count(w) for w in ("alpha", "beta", "gamma")] + [1e-3] for t in texts], float)

    rare = Tool(
        name="rare", description="gamma", skill="s", examples=["beta", "beta two", "beta three", "alpha"]
    )
    plain = Tool(name="plain", description="alpha gamma", skill="s")
    chatty = Tool(
        name="chatty", description="other", skill="s", examples=[f"alpha beta {i}" for i in range(9)]
    )
    index = ToolIndex(ToolRegistry(tools=[rare, plain, chatty]), embed, cache_dir=tmp_path)
    dense = index.dense(embed(["alpha"])[0])
    assert np.argmax(dense) == 0 and dense[0] == pytest.approx(1.0)  # the nearest example, not the mean
    lexical = index.lexical("alpha")
    assert lexical[2] < 3 * max(index.example_bm25.scores(["alpha"]))  # nine matching examples count as three
    (cached,) = tmp_path.glob("tool-embeddings-*.npy")
    assert np.load(cached).shape[0] == 3 + 4 + 9  # the tools' rows, then their examples'


def test_search_fuses_words_and_the_models_embedding_and_keeps_to_allowed_tools(tmp_path):
    from router.classifier import Classifier

    path = write(tmp_path, "mcp.json", {"tools": [WEATHER, DELETE, EMAIL]})
    registry = ToolRegistry(tools=import_tools(path, "mcp", "action"))
    clf = Classifier(SHIPPED)
    index = ToolIndex(registry, clf.embed, cache_dir=tmp_path / "cache", model_id=clf.model_id)
    (hit,) = index.search("will it rain in lisbon tomorrow", k=1)
    assert hit.name == "get_weather_forecast" and hit.lexical == 0 and hit.dense > 0  # found by meaning
    top = index.search("email the report to anna", k=3)
    assert top[0].name == "send_email" and top[0].lexical > 0 and len(top) == 3
    assert [h.name for h in index.search("email the report", k=3, allowed={"delete_calendar_event"})] == [
        "delete_calendar_event"
    ]
    assert index.search("remove the dentist appointment", k=1)[0].requires_confirmation
    cached = list((tmp_path / "cache").glob("tool-embeddings-*.npy"))
    assert len(cached) == 1 and np.load(cached[0]).shape == (3, index.embeddings.shape[1])
    again = ToolIndex(registry, lambda texts: pytest.fail("embedded again"), tmp_path / "cache", clf.model_id)
    assert np.array_equal(again.embeddings, index.embeddings)  # read from the cache


def test_the_commands_import_and_search(tmp_path):
    from cli import app

    runner = CliRunner()
    spec = write(tmp_path, "mcp.json", {"tools": [WEATHER, DELETE, EMAIL]})
    registry = str(tmp_path / "tools.yaml")
    args = ["tools", "import", spec, "--format", "mcp", "--skill", "action", "--registry", registry]
    r = runner.invoke(app, args)
    assert r.exit_code == 0 and "3 tools of skill 'action'" in r.output, r.output
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "in the registry already" in r.output
    bad = [
        "tools",
        "import",
        spec,
        "--format",
        "mcp",
        "--skill",
        "weather",
        "--registry",
        str(tmp_path / "t2.yaml"),
    ]
    r = runner.invoke(app, bad)
    assert r.exit_code == 2 and "not a skill of the router config" in r.output
    assert not (tmp_path / "t2.yaml").exists()  # nothing written on an error
    r = runner.invoke(
        app,
        ["tools", "search", "send a mail to the team", "--registry", registry, "--k", "2"],
    )
    assert r.exit_code == 0, r.output
    line = json.loads(r.output.strip().splitlines()[-1])
    assert line["query"] == "send a mail to the team" and len(line["tools"]) == 2
    assert line["tools"][0]["definition"]["name"] == line["tools"][0]["name"]


def test_the_tool_benchmark_scores_recall_and_all_needed_and_names_a_missing_package(tmp_path):
    from training.benchmarks.livemcp import _tool, package_root, scores

    tasks = [("q1", {"a", "b"}), ("q2", {"c"})]
    ranked = [["s1:a", "s2:x", "s3:b"], ["s1:x", "s2:y", "s9:c"]]  # a name counts from any server
    s = scores(ranked, tasks)
    assert s["recall@1"] == pytest.approx((0.5 + 0) / 2) and s["recall@5"] == 1.0 and s["all_in_top10"] == 1.0
    tool = _tool("maps", {"name": "geocode", "description": "", "parameter": {"q": "(string) An address."}})
    assert tool.name == "maps:geocode" and tool.description == "geocode" and tool.skill == "maps"
    assert tool.input_schema["properties"]["q"] == {"type": "string", "description": "An address."}
    with pytest.raises(ValueError, match="no baseline/mcp_copilot"):
        package_root(tmp_path)
