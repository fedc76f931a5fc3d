"""Issue 14, points 1-4: hostile input, a model directory that disagrees with itself, strict config files.

Uses the committed shipped model (loads in ~0.1 s) and real loopback servers; nothing trains.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from router import Router
from router.classifier import Classification, Classifier
from router.config import RouterConfig
from router.guardrail import repair_text
from router.manifest import ModelError
from router.rbac import check_config, effective_permissions, format_permissions
from tests.conftest import ROOT, SHIPPED

ADMIN_BATCH = ["restart the indexing service", "find the travel policy"]
CLS = Classification(label="SEARCH", confidence=0.41, ranking=[("SEARCH", 0.41), ("REASONING", 0.33)])


@pytest.fixture(scope="module")
def shipped():
    return Router.load(SHIPPED)


# ------------------------------------------------------------------ 1. one bad string, one Decision
def test_lone_surrogate_costs_only_itself(shipped):
    ds = shipped.route_batch([*ADMIN_BATCH, "a\ud800b"], role="admin")
    assert len(ds) == 3
    assert [d.intent for d in ds[:2]] == ["ACTION", "SEARCH"]
    assert ds[2].source != "guardrail" or ds[2].reason_code.value == "invalid_input"
    assert ds[2].trace[0].detail.get("repaired_surrogates") == 1
    # alone or in a batch, the same text gets the same treatment
    alone = shipped.route("a\ud800b", role="admin")
    assert (alone.source, alone.intent) == (ds[2].source, ds[2].intent)
    assert shipped.route("\ud800", role="admin").reason_code.value == "low_signal"


def test_repair_text_keeps_valid_pairs():
    assert repair_text("x\ud83d\ude00y") == ("x\U0001f600y", 2)
    assert repair_text("a\udc00") == ("a\ufffd", 1)
    assert repair_text("plain") == ("plain", 0)


def test_non_string_and_untokenizable_messages_get_their_own_decision(shipped, monkeypatch):
    ds = shipped.route_batch([ADMIN_BATCH[0], None, 42, ADMIN_BATCH[1]], role="admin")
    assert [d.reason_code.value for d in ds[1:3]] == ["invalid_input", "invalid_input"]
    assert ds[1].skills.all == [] and not ds[1].servable and ds[1].intent is None
    assert ds[0].intent == "ACTION" and ds[3].intent == "SEARCH"

    real = shipped.classifier.classify_batch

    def picky(texts):
        if any("poison" in t for t in texts):
            raise RuntimeError("tokenizer refused")
        return real(texts)

    monkeypatch.setattr(shipped.classifier, "classify_batch", picky)
    ds = shipped.route_batch([ADMIN_BATCH[0], "poison pill message", ADMIN_BATCH[1]], role="admin")
    assert [d.reason_code.value for d in ds] == ["confident", "invalid_input", "confident"]


# ------------------------------------------------------- 3. a model directory that disagrees with itself
def _copy(tmp_path: Path) -> Path:
    dst = tmp_path / "model"
    shutil.copytree(SHIPPED, dst)
    return dst


def _edit(model: Path, fn) -> None:
    p = model / "manifest.json"
    m = json.loads(p.read_text())
    fn(m)
    p.write_text(json.dumps(m, indent=2))


def _default_graph(model: Path) -> tuple[str, Path]:
    """The model's default variant and its graph file."""
    from router.manifest import load_manifest

    export = load_manifest(model).export
    return export.default_variant, model / export.variants[export.default_variant].file.path


def _swap_action_memory(m):
    i, j = m["labels"].index("ACTION"), m["labels"].index("MEMORY")
    m["labels"][i], m["labels"][j] = m["labels"][j], m["labels"][i]


TAMPER = {
    "labels_reversed": lambda m: m["labels"].reverse(),
    "labels_swap_action_memory": _swap_action_memory,
    "max_seq_length_4": lambda m: m.update(max_seq_length=4),
    "max_seq_length_64": lambda m: m.update(max_seq_length=64),
    "temperature_changed": lambda m: m["calibration"].update(temperature=0.5),
    # the escaping paths point at real copies (right sha256) outside the model directory
    "path_parent": lambda m: m["export"]["variants"][m["export"]["default_variant"]]["file"].update(
        path="../outside.onnx"
    ),
    "path_absolute": lambda m: m["export"]["tokenizer"].update(path=str(OUTSIDE_TOKENIZER[0])),
    "path_nested_escape": lambda m: m["export"]["tokenizer"].update(path="./../outside.json"),
    "labels_duplicated": lambda m: m.update(labels=["ACTION"] * 5),
}


OUTSIDE_TOKENIZER: list[Path] = []


@pytest.mark.parametrize("case", sorted(TAMPER))
def test_tampered_manifest_is_refused(tmp_path, case):
    model = _copy(tmp_path)
    shutil.copy(_default_graph(model)[1], tmp_path / "outside.onnx")
    shutil.copy(model / "tokenizer.json", tmp_path / "outside.json")
    OUTSIDE_TOKENIZER[:] = [tmp_path / "outside.json"]
    _edit(model, TAMPER[case])
    with pytest.raises(ModelError):
        Router.load(model)


def test_symlink_out_of_the_model_directory_is_refused(tmp_path):
    model = _copy(tmp_path)
    outside = tmp_path / "elsewhere.json"
    shutil.move(model / "tokenizer.json", outside)
    (model / "tokenizer.json").symlink_to(outside)
    with pytest.raises(ModelError, match="outside the model directory"):
        Router.load(model)


def test_duplicate_keys_in_the_manifest_are_refused(tmp_path):
    model = _copy(tmp_path)
    p = model / "manifest.json"
    text = p.read_text()
    p.write_text(text.replace('"labels": [', '"labels": ["SEARCH", "ACTION"],\n  "labels": [', 1))
    with pytest.raises(ModelError, match="duplicate key 'labels'"):
        Router.load(model)


def test_an_unstamped_graph_is_refused(tmp_path):
    import onnx

    from router.manifest import file_entry, load_manifest

    model = _copy(tmp_path)
    variant, path = _default_graph(model)
    g = onnx.load(str(path), load_external_data=False)
    del g.metadata_props[:]
    onnx.save(g, str(path))
    m = load_manifest(model)
    m.export.variants[variant].file = file_entry(model, path.name)
    m.save(model)
    with pytest.raises(ModelError, match="no intent_router metadata"):
        Classifier(model)


def test_shipped_graph_carries_its_metadata():
    c = Classifier(SHIPPED)
    assert c.graph_metadata["labels"] == c.labels and c.graph_metadata["max_seq_length"] == 128


# ------------------------------------------------------------------------ 4. strict config files
DEFAULT_YAML = (ROOT / "router" / "config" / "default.yaml").read_text()


def test_duplicate_skill_key_is_an_error_with_file_and_line(tmp_path):
    text = DEFAULT_YAML.replace("skills:\n", "skills:\n  action:\n    permissions: []\n", 1)
    assert text != DEFAULT_YAML
    p = tmp_path / "dup.yaml"
    p.write_text(text)
    with pytest.raises(ValueError, match=r"dup\.yaml:\d+: duplicate key 'action'"):
        RouterConfig.load(p)


def test_duplicate_role_key_is_an_error(tmp_path):
    text = DEFAULT_YAML.replace(
        "roles:\n", "roles:\n  viewer:\n    skills: ['*']\n    permissions: ['*']\n", 1
    )
    p = tmp_path / "dup-role.yaml"
    p.write_text(text)
    with pytest.raises(ValueError, match=r"dup-role\.yaml:\d+: duplicate key 'viewer'"):
        RouterConfig.load(p)


@pytest.mark.parametrize("value", ["'no'", "'yes'", "0", "1", "'false'"])
def test_non_boolean_boolean_is_an_error(tmp_path, value):
    text = DEFAULT_YAML.replace("requires_confirmation: true", f"requires_confirmation: {value}", 1)
    assert text != DEFAULT_YAML
    p = tmp_path / "bool.yaml"
    p.write_text(text)
    with pytest.raises(ValueError, match=r"bool\.yaml:\d+: skills\.action\.requires_confirmation"):
        RouterConfig.load(p)


def test_unknown_field_names_file_and_line(tmp_path):
    lines = DEFAULT_YAML.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("roles:"))
    p = tmp_path / "extra.yaml"
    p.write_text("\n".join([*lines[: at + 1], "  viewer2:", "    skils: [retrieval]", *lines[at + 1 :]]))
    with pytest.raises(ValueError, match=rf"extra\.yaml:{at + 3}: roles\.viewer2\.skils: unknown field"):
        RouterConfig.load(p)


def test_a_skill_missing_from_the_registry_is_an_error_when_the_config_loads(tmp_path):
    text = DEFAULT_YAML.replace(
        "required: [retrieval], optional: [reflection], context_budget: 2000",
        "required: [retreival], optional: [reflection], context_budget: 2000",
        1,
    )
    text = text.replace("skills: [retrieval]", "skills: [retrieval, web_browse]", 1)
    assert text.count("retreival") == 1 and "web_browse" in text
    p = tmp_path / "typo.yaml"
    p.write_text(text)
    with pytest.raises(ValueError) as e:
        RouterConfig.load(p)
    message = str(e.value)
    assert (
        "intents.SEARCH.required names skill 'retreival'" in message and "did you mean 'retrieval'" in message
    )
    assert "roles.viewer.skills names skill 'web_browse', which is not in the skill registry" in message
    assert RouterConfig.load().roles["admin"].skills == ["*"]  # the wildcard is no skill name


def test_config_check_table():
    report = check_config(ROOT / "router" / "config" / "default.yaml")
    table = report["roles"]
    assert table == effective_permissions(RouterConfig.load())
    assert table["admin"]["action"]["granted"] and table["admin"]["action"]["requires_confirmation"]
    assert not table["viewer"]["action"]["granted"] and "viewer" in table["viewer"]["action"]["reason"]
    text = format_permissions(report)
    assert "role viewer:" in text and "- action:" in text


def test_a_rule_across_fields_names_the_line_of_the_field_it_names(tmp_path):
    """fallback_intents naming an intent that `intents` lacks is checked on the whole file; the error still
    points at the fallback_intents line, not line 1."""
    lines = DEFAULT_YAML.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("fallback_intents:"))
    lines[at] = "fallback_intents: [SEARCH, BOOKING]"
    p = tmp_path / "fallback.yaml"
    p.write_text("\n".join(lines))
    with pytest.raises(
        ValueError, match=rf"fallback\.yaml:{at + 1}: .*fallback_intents must name configured"
    ):
        RouterConfig.load(p)
