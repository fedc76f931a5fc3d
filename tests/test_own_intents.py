"""A label set of the user's own, end to end: `init` scaffolds a project of three made-up intents (none of
the shipped five), and the same commands as for the shipped model check its corpus, build, evaluate and
gate it, and route, verify, serve and score with it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from cli import app
from router.config import RouterConfig
from router.routing import Router
from tests.conftest import SHIPPED, SHIPPED_INTENTS

runner = CliRunner()
OWN = ("ORDER_STATUS", "PRODUCT_INFO", "RETURNS")  # the template's intents, sorted as a model lists them
MODEL = "models/shop-support"  # where build writes without --out: models/<the config's name>


def cli(*args: str, cwd: Path | None = None):
    """Run intent-router as a user does from ``cwd`` (the project's directory)."""
    before = Path.cwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        return runner.invoke(app, [str(a) for a in args])
    finally:
        os.chdir(before)


def test_init_scaffolds_a_project_whose_corpus_passes_the_check(tmp_path):
    project = tmp_path / "shop"
    out = cli("init", project)
    assert out.exit_code == 0, out.output
    for name in ("README.md", "router.yaml", "train.yaml", "data/train.jsonl", "data/dev.jsonl"):
        assert (project / name).is_file(), name
    checked = cli("data", "check", "data", "--strict", cwd=project)
    assert checked.exit_code == 0, checked.output
    labels = {json.loads(line)["label"] for line in (project / "data" / "train.jsonl").open()}
    assert labels == {*OWN, "OUT_OF_SCOPE"} and not labels & set(SHIPPED_INTENTS)
    config = RouterConfig.load(project / "router.yaml")
    assert sorted(config.intents) == list(OWN) and all(s.description for s in config.intents.values())
    again = cli("init", project)
    assert again.exit_code == 1 and "not empty" in again.output


def test_data_check_holds_every_split_to_the_train_labels(tmp_path):
    project = tmp_path / "shop"
    cli("init", project)
    dev = project / "data" / "dev.jsonl"
    dev.write_text(
        dev.read_text() + json.dumps({"text": "cancel my subscription", "label": "BILLING"}) + "\n"
    )
    out = cli("data", "check", "data", "--json", cwd=project)
    assert out.exit_code == 1
    errors = [e["message"] for e in json.loads(out.output)["errors"]]
    assert any("'BILLING' is not a label of the train split" in e for e in errors), errors


# ------------------------------------------------------------------------ the built project (slow)
@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    """The init project built with `build --config train.yaml` and no --out (fewer contrastive steps: a
    test); the shipped model's folder stays as it was."""
    project = tmp_path_factory.mktemp("own") / "shop"
    assert cli("init", project).exit_code == 0
    cfg = yaml.safe_load((project / "train.yaml").read_text())
    cfg.update(max_steps=40, batch_size=16)
    (project / "train.yaml").write_text(yaml.safe_dump(cfg))
    shipped = {p: p.stat().st_mtime_ns for p in SHIPPED.rglob("*")}
    out = cli(
        "build", "--config", "train.yaml", "--oos", "data/oos.jsonl", "--report-dir", "reports/build",
        cwd=project,
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert json.loads((project / MODEL / "manifest.json").read_text())["name"] == "shop-support"
    assert {p: p.stat().st_mtime_ns for p in SHIPPED.rglob("*")} == shipped
    return project


@pytest.mark.slow
def test_the_model_learns_the_corpus_labels(shop):
    manifest = json.loads((shop / MODEL / "manifest.json").read_text())
    assert manifest["labels"] == ["ORDER_STATUS", "OUT_OF_SCOPE", "PRODUCT_INFO", "RETURNS"]
    report = json.loads((shop / "reports" / "build" / "eval.json").read_text())
    assert set(report["classification"]["per_class"]) == {*OWN, "OUT_OF_SCOPE"}


@pytest.mark.slow
def test_the_example_projects_confidences_mean_something(shop):
    """A dev split the head ranks all right cannot place the temperature: the build keeps the prior rather
    than the fit's lower bound, so the threshold and the verifier still see unsure messages."""
    manifest = json.loads((shop / MODEL / "manifest.json").read_text())
    calibration = manifest["calibration"]
    assert 0.02 < calibration["temperature"] < 20.0, calibration
    router = Router.load(shop / MODEL, config=shop / "router.yaml")
    texts = [json.loads(line)["text"] for line in (shop / "data" / "test.jsonl").open()]
    confidences = [router.route(t, "guest").confidence for t in texts]
    assert sum(c < 0.995 for c in confidences) >= len(texts) // 4, confidences


@pytest.mark.slow
def test_route_names_the_users_intents_and_skills(shop):
    out = cli(
        "route", "is the blue hoodie back in stock in size M?", "--role", "guest",
        "--model", MODEL, "--config", "router.yaml", "--json", "--threshold", "0.3",
        cwd=shop,
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    d = json.loads(out.output)
    assert {r["intent"] for r in d["ranking"]} == set(OWN)
    assert d["intent"] == "PRODUCT_INFO", d
    assert d["skills"]["required"] == ["catalog"]


@pytest.mark.slow
def test_a_config_that_names_other_intents_is_refused(shop):
    with pytest.raises(ValueError, match="has the intents ORDER_STATUS, PRODUCT_INFO, RETURNS"):
        Router.load(shop / MODEL)  # the shipped config names the five
    with pytest.raises(ValueError, match="no entry for ACTION"):
        Router.load(SHIPPED, config=shop / "router.yaml")


@pytest.mark.slow
def test_no_fallback_intents_means_clarify(shop):
    router = Router.load(shop / MODEL, config=shop / "router.yaml", threshold=1.0)
    d = router.route("my parcel never came and I want my money back", role="customer")
    assert d.intent is None and d.reason_code.value == "clarify"
    assert d.skills.required == [] and d.skills.optional == [] and not d.requires_confirmation
    assert "ask the user what they need" in d.message


@pytest.mark.slow
def test_the_verifier_is_told_the_users_intents(shop, openai_server, make_verifier):
    from router.verifier import LLMVerifier, VerifierSettings
    from tests.openai_server import Reply
    from tests.verifier_support import KEY, system_prompt

    config = RouterConfig.load(shop / "router.yaml")
    settings = VerifierSettings(base_url=openai_server.base_url, model="m", api_key=KEY, timeout=2.0)
    verifier = LLMVerifier(settings, config)
    try:
        router = Router.load(shop / MODEL, config=config, verifier=verifier, threshold=1.0)
        openai_server.default = Reply('{"intent": "RETURNS", "reason_code": "fresh_request"}')
        d = router.route("the sofa came scratched, what now", role="customer")
        assert (d.intent, d.source, d.reason_code.value) == ("RETURNS", "verifier", "verified")
        assert d.requires_confirmation  # returns_desk asks before it acts
        prompt = system_prompt(openai_server.requests[0])
        assert "which ONE of three intents" in prompt and "- RETURNS: The customer wants to return" in prompt
        schema = openai_server.requests[0].body["response_format"]["json_schema"]["schema"]
        assert schema["properties"]["intent"]["enum"] == [*verifier.intents, "OUT_OF_SCOPE"]
        assert set(verifier.intents) == set(OWN) and "SEARCH" not in prompt
        openai_server.default = Reply('{"intent": "SEARCH", "reason_code": "fresh_request"}')
        d = router.route("the sofa came scratched, what now", role="customer")
        assert d.intent is None and d.reason_code.value == "clarify"  # not one of the model's: refused
    finally:
        verifier.close()
    with pytest.raises(ValueError, match="the verifier chooses among SEARCH"):
        shipped = LLMVerifier(settings)  # the shipped definitions: the five
        try:
            Router.load(shop / MODEL, config=config, verifier=shipped)
        finally:
            shipped.close()


@pytest.mark.slow
def test_eval_and_gate_with_the_users_labels(shop):
    out = cli(
        "eval", "--model", MODEL, "--config", "router.yaml", "--data", "data/test.jsonl",
        "--oos", "data/oos.jsonl", "--out", "reports/eval", "--max-latency-samples", "0", cwd=shop,
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    report = json.loads((shop / "reports" / "eval" / "eval.json").read_text())
    assert report["model"]["labels"] == ["ORDER_STATUS", "OUT_OF_SCOPE", "PRODUCT_INFO", "RETURNS"]
    assert report["data"]["label_counts"] == {label: 6 for label in report["model"]["labels"]}
    written = cli(
        "gate", "--report", "reports/eval/eval.json", "--baseline", "baseline.json", "--write-baseline",
        cwd=shop,
    )  # fmt: skip
    assert written.exit_code == 0, written.output
    gated = cli("gate", "--report", "reports/eval/eval.json", "--baseline", "baseline.json", cwd=shop)
    assert gated.exit_code == 0, gated.output
    assert "RETURNS" in (shop / "baseline.json").read_text()


@pytest.mark.slow
def test_score_writes_the_users_labels(shop):
    log = shop / "log.jsonl"
    rows = [line for line in (shop / "data" / "test.jsonl").read_text().splitlines() if line.strip()]
    log.write_text("\n".join(rows) + "\n")
    out = cli(
        "score", "log.jsonl", "--out", "decisions.jsonl", "--model", MODEL, "--config",
        "router.yaml", "--role", "support_agent", "--with-labels", cwd=shop,
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    decisions = [json.loads(line) for line in (shop / "decisions.jsonl").read_text().splitlines()]
    assert len(decisions) == len(rows)
    assert {d["top_intent"] for d in decisions} <= set(OWN)
    assert {d["intent"] for d in decisions} - {None} <= set(OWN)


@pytest.mark.slow
def test_schema_and_serve_name_the_users_intents(shop, tmp_path):
    from tests.test_serve import Server

    out = cli("schema", "--model", MODEL, "--out", "decision.schema.json", cwd=shop)
    assert out.exit_code == 0, out.output
    schema = json.loads((shop / "decision.schema.json").read_text())
    assert schema["properties"]["intent"]["anyOf"][0]["enum"] == list(OWN)
    server = Server("--model", str(shop / MODEL), "--config", str(shop / "router.yaml"), tmp=tmp_path)
    try:
        r = server.route({"role": "customer", "message": "where is order 88213? it said 2 days a week ago"})
        assert r.status_code == 200, r.text
        (d,) = r.json()["decisions"]
        assert d["intent"] in (*OWN, None) and {x["intent"] for x in d["ranking"]} == set(OWN)
        parts = server.client.get("/openapi.json").json()["components"]["schemas"]
        assert parts["RankedIntent"]["properties"]["intent"]["enum"] == list(OWN)
        assert parts["Decision"]["properties"]["intents"]["items"]["enum"] == list(OWN)
    finally:
        server.stop()


@pytest.mark.slow
def test_thresholds_fitted_on_dev_are_written_and_routed_with(shop):
    out = cli(
        "eval", "--model", MODEL, "--config", "router.yaml", "--data", "data/dev.jsonl",
        "--out", "reports/dev", "--max-latency-samples", "0", "--fit-thresholds", "--target-precision", "0.9",
        cwd=shop,
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    fitted = json.loads((shop / "reports" / "dev" / "eval.json").read_text())["intent_thresholds"]
    assert set(fitted["per_intent"]) == set(OWN) and fitted["target_precision"] == 0.9
    config = RouterConfig.load(shop / "reports" / "dev" / "router.thresholds.yaml")
    expected = {k: f["threshold"] for k, f in fitted["per_intent"].items() if f["threshold"] != 0.75}
    assert (
        config.thresholds == expected
        and "Thresholds per intent" in (shop / "reports/dev/report.md").read_text()
    )
    router = Router.load(shop / MODEL, config=config)
    d = router.route("where is my parcel, order 7731", role="customer")
    assert d.threshold == config.thresholds.get(d.intent, config.threshold)
