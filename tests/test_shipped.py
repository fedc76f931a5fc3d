"""Shipped models by name, and the files an install must carry for each (router.shipped,
router.model_files); the wheel itself is built and installed by .ci/runtime-install."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from router import Router
from router import shipped as shipped_mod
from router.manifest import load_manifest
from router.model_files import model_runtime_files, runtime_files
from router.shipped import SHIPPED_MODELS, default_model_dir, resolve_model_dir, shipped_model_dir
from tests.shipped_models import committed


@pytest.mark.parametrize("name", SHIPPED_MODELS)
def test_each_shipped_model_has_every_file_routing_reads(name):
    model = committed(f"models/{name}")
    files = model_runtime_files(model)
    assert files[0] == "manifest.json" and len(files) == len(set(files))
    assert all((model / f).is_file() for f in files), files
    m = load_manifest(model)
    wanted = {
        m.export.tokenizer.path,
        m.export.variants[m.export.default_variant].file.path,
        m.conversation.file.path,
    }
    assert wanted <= set(files)
    if m.compound.reader is not None:
        assert m.compound.reader.file.path in files


def test_runtime_files_leave_out_other_variants_and_build_inputs():
    manifest = {
        "training": {"teacher": {"targets": {"path": "data/teacher/t.npz", "sha256": "0" * 64}}},
        "export": {
            "tokenizer": {"path": "tokenizer.json", "sha256": "1" * 64},
            "default_variant": "int8",
            "variants": {
                "fp32": {"file": {"path": "model.fp32.onnx", "sha256": "2" * 64}},
                "int8": {"file": {"path": "model.int8.onnx", "sha256": "3" * 64}},
            },
        },
        "conversation": {"file": {"path": "turn_reader.npz", "sha256": "4" * 64}},
    }
    assert runtime_files(manifest) == [
        "manifest.json",
        "tokenizer.json",
        "model.int8.onnx",
        "turn_reader.npz",
    ]
    manifest["export"]["default_variant"] = "fp32"
    assert "model.fp32.onnx" in runtime_files(manifest) and "model.int8.onnx" not in runtime_files(manifest)


def test_a_shipped_name_resolves_to_its_folder_and_a_folder_of_that_name_wins(tmp_path, monkeypatch):
    assert resolve_model_dir("intent-minilm-fast") == shipped_model_dir("intent-minilm-fast")
    assert resolve_model_dir("some/other/model") == Path("some/other/model")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "intent-minilm-fast").mkdir()
    assert resolve_model_dir("intent-minilm-fast") == Path("intent-minilm-fast")
    with pytest.raises(ValueError, match="not a shipped model"):
        shipped_model_dir("intent-minilm-huge")


def test_the_installed_copy_is_used_when_the_checkout_has_none(tmp_path, monkeypatch):
    installed = tmp_path / "share" / "intent-router" / "models"
    (installed / "intent-minilm-fast").mkdir(parents=True)
    (installed / "intent-minilm-fast" / "manifest.json").write_text("{}")
    monkeypatch.setattr(shipped_mod, "CHECKOUT_MODELS", tmp_path / "site-packages" / "models")
    monkeypatch.setattr(shipped_mod, "INSTALLED_MODELS", installed)
    assert shipped_model_dir("intent-minilm-fast") == installed / "intent-minilm-fast"
    # neither has it: the checkout path, so the error names where a checkout keeps it
    assert shipped_model_dir("intent-minilm") == tmp_path / "site-packages" / "models" / "intent-minilm"


def test_the_model_variable_takes_a_name(monkeypatch):
    monkeypatch.setenv("INTENT_ROUTER_MODEL", "intent-minilm-fast")
    assert default_model_dir() == shipped_model_dir("intent-minilm-fast")
    monkeypatch.delenv("INTENT_ROUTER_MODEL")
    assert default_model_dir() == shipped_model_dir("intent-minilm")


def test_router_and_cli_load_the_fast_model_by_name():
    router = Router.load("intent-minilm-fast")
    assert router.classifier.manifest.name == "intent-minilm-fast"
    res = CliRunner().invoke(
        app, ["route", "could you restart the indexing service?", "--model", "intent-minilm-fast", "--json"]
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["model_id"].startswith("intent-minilm-fast@")
