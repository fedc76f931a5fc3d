"""Promotion by compare report: a reload that changes the model needs a passed `compare` of the serving
model against the new one, bound to both by their model ids (which carry a digest of their files)."""

from __future__ import annotations

import json
import shutil

import pytest

from router.serve.promotion import PromotionError, check_compare_report
from tests.conftest import FAST, ROOT, SHIPPED

pytest.importorskip("fastapi")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """A real compare.json of the fast model (candidate) against the shipped one (incumbent), on 30 test
    messages, under a rule loose enough that the fast model passes it."""
    from eval.compare.figures import Rule
    from eval.compare.report import compare_models, write_compare

    tmp = tmp_path_factory.mktemp("promotion")
    rows = (ROOT / "data" / "test.jsonl").read_text(encoding="utf-8").splitlines()[:30]
    (tmp / "rows.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    rule = Rule(margin=0.5, alpha=1e-9, confident_tolerance=1000, max_p50_ratio=0, max_p99_ratio=0)
    result = compare_models(FAST, SHIPPED, [tmp / "rows.jsonl"], rule=rule)
    assert result["passed"], result["checks"]
    return write_compare(result, tmp / "compare")["json"]


def state_on(model, **settings):
    from router.serve.settings import ServeSettings
    from router.serve.state import State

    state = State(ServeSettings(model_dir=model, **settings))
    state.load()
    return state


def ids():
    from router.manifest import load_manifest

    return {m: f"{load_manifest(m).model_id}/int8" for m in (SHIPPED, FAST)}


def test_a_report_must_name_both_models_and_pass(report, tmp_path):
    data = json.loads(report.read_text())
    serving, new = ids()[SHIPPED], ids()[FAST]
    assert data["incumbent"]["model_id"] == serving and data["candidate"]["model_id"] == new
    assert check_compare_report(report, serving, new)["passed"]
    with pytest.raises(PromotionError, match=r"compared candidate .* not the model being loaded"):
        check_compare_report(report, new, serving)
    with pytest.raises(PromotionError, match=r"compared incumbent .* not the model serving"):
        check_compare_report(report, "intent-minilm@2026-01-01T00:00:00Z+000000000000/int8", new)
    failed = tmp_path / "failed.json"
    failed.write_text(json.dumps({**data, "passed": False}))
    with pytest.raises(PromotionError, match="failed the gate"):
        check_compare_report(failed, serving, new)
    with pytest.raises(PromotionError, match="no such file"):
        check_compare_report(tmp_path / "none.json", serving, new)
    (tmp_path / "other.json").write_text('{"kind": "intent-router-eval"}')
    with pytest.raises(PromotionError, match="not a compare report"):
        check_compare_report(tmp_path / "other.json", serving, new)


def test_a_reload_needs_the_report_the_server_names_and_keeps_the_old_model_without_it(report, tmp_path):
    from router.serve.state import ReloadError

    state = state_on(SHIPPED, reload_compare=str(report))
    try:
        assert state.model_id == ids()[SHIPPED]
        # another copy of the shipped model with one file changed and its manifest rewritten: another id
        copy = shutil.copytree(SHIPPED, tmp_path / "copy")
        manifest = json.loads((copy / "manifest.json").read_text())
        manifest["created_at"] = "2026-01-01T00:00:00Z"
        (copy / "manifest.json").write_text(json.dumps(manifest))
        with pytest.raises(ReloadError, match="compared candidate") as e:
            state.reload(str(copy))
        assert e.value.code == "reload_failed" and state.model_id == ids()[SHIPPED]
        result = state.reload(str(FAST))  # the model the report compared: admitted
        assert result["model_id"] == ids()[FAST] and result["previous_model_id"] == ids()[SHIPPED]
        assert state.reload()["model_id"] == ids()[FAST]  # the same model again: no report needed
        with pytest.raises(ReloadError, match="compared candidate"):
            state.reload(str(SHIPPED))  # back to the shipped model: the report compared it the other way
    finally:
        state.close()


def test_an_admin_reload_names_its_report_and_a_server_without_one_needs_none(report, tmp_path):
    from router.serve.state import ReloadError

    state = state_on(SHIPPED)
    try:
        failed = tmp_path / "failed.json"
        failed.write_text(json.dumps({**json.loads(report.read_text()), "passed": False}))
        with pytest.raises(ReloadError, match="failed the gate"):
            state.reload(str(FAST), compare_report=str(failed))
        assert state.reload(str(FAST), compare_report=str(report))["model_id"] == ids()[FAST]
        assert state.reload(str(SHIPPED))["model_id"] == ids()[SHIPPED]  # no report named: none needed
    finally:
        state.close()
