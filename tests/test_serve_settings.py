"""`intent-router serve`'s parts that need no server: the golden set, settings, admin keys, the decision
log's redaction hook, the model id's digest and the turn memory."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import FAST, SHIPPED
from tests.test_serve import ROOT
from tests.test_serve_ops import KEY_ADMIN, KEY_READER, key_file, scrambled_copy

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")


def test_the_golden_set_is_checked_before_serving_and_fits_the_models_labels(tmp_path):
    from router.serve.golden import PACKAGED, golden_for, load_golden
    from router.serve.settings import ServeSettings

    packaged = load_golden(PACKAGED)
    assert len(packaged.texts) == 40 and set(packaged.labels) == {
        "SEARCH",
        "REASONING",
        "PLANNING",
        "MEMORY",
        "ACTION",
        "OUT_OF_SCOPE",
    }
    assert golden_for(None, ["BILLING", "SHIPPING", "OUT_OF_SCOPE"]) is None  # other intents: not checked
    bad = tmp_path / "golden.jsonl"
    bad.write_text('{"text": "refund my order", "label": "BILLING"}\n{"text": ""}\n')
    with pytest.raises(ValueError, match=r"golden.jsonl:2: a golden row is a JSON object"):
        ServeSettings(golden=bad)
    bad.write_text('{"text": "refund my order", "label": "BILLING"}\n')
    with pytest.raises(ValueError, match=r"labels \['BILLING'\] are not the model's"):
        golden_for(bad, ["SEARCH", "ACTION"])
    with pytest.raises(ValueError, match="golden_min_accuracy must be in"):
        ServeSettings(golden_min_accuracy=1.5)


def test_the_turn_memory_finds_a_message_by_the_decision_sent_back_and_forgets_the_oldest():
    from router import Router
    from router.decision import Decision
    from router.serve.turns import TurnMemory

    r = Router.load(SHIPPED)
    texts = ["restart the billing worker", "find the travel policy", "plan the offsite"]
    decisions = r.route_batch(texts, "admin")
    memory = TurnMemory(size=2)
    memory.remember([d.model_dump_json().encode() for d in decisions], texts)
    echoed = [
        Decision.model_validate(json.loads(d.model_dump_json())) for d in decisions
    ]  # as a client sends
    assert [memory.recall(d) for d in echoed] == [None, *texts[1:]]  # the oldest is forgotten
    changed = echoed[2].model_copy(update={"confidence": 0.5})
    assert memory.recall(changed) is None  # a Decision altered on the way is not matched


def test_the_model_id_carries_a_digest_that_a_rewritten_manifest_cannot_keep(tmp_path):
    from router.manifest import load_manifest

    shipped = load_manifest(FAST)
    copy = shutil.copytree(FAST, tmp_path / "copy")
    assert load_manifest(copy).model_id == shipped.model_id  # the same files: the same id
    scrambled = load_manifest(scrambled_copy(FAST, tmp_path / "scrambled"))
    assert scrambled.name == shipped.name and scrambled.created_at == shipped.created_at
    assert scrambled.model_id != shipped.model_id
    assert re.fullmatch(r"intent-minilm-fast@\S+\+[0-9a-f]{12}", shipped.model_id)


def test_key_file_admin_flag(tmp_path):
    from router.serve.auth import KeyFileError, KeyStore, hash_key

    kf = key_file(tmp_path)
    keys = KeyStore.load(kf)
    admin, reader = keys.authenticate(KEY_ADMIN), keys.authenticate(KEY_READER)
    assert admin.admin and admin.roles == frozenset() and not reader.admin
    for entry, message in [
        ("{id: a, sha256: %s, admin: yes-please}", "'admin' must be true or false"),
        ("{id: a, sha256: %s}", "only an admin key may hold none"),
        ("{id: a, sha256: %s, roles: [], admin: false}", "only an admin key may hold none"),
    ]:
        kf.write_text("keys:\n  - " + entry % hash_key("k") + "\n")
        with pytest.raises(KeyFileError, match=re.escape(message)):
            KeyStore.load(kf)


def test_settings_refuse_bad_operations_options(tmp_path):
    from router.serve.settings import ServeSettings

    with pytest.raises(ValueError, match="workers must be >= 1"):
        ServeSettings(workers=0)
    with pytest.raises(ValueError, match="jsonl or parquet"):
        ServeSettings(decision_log=tmp_path, decision_log_format="csv")
    with pytest.raises(ValueError, match="needs --decision-log"):
        ServeSettings(decision_log_redact="x:y")


def test_decision_log_redaction_hook_is_named_module_function(tmp_path):
    import os.path

    from router.serve.settings import ServeSettings
    from router.serve.state import open_decision_log, redaction_hook

    assert redaction_hook("os.path:basename") is os.path.basename
    for spec, message in [
        ("nocolon", "expected module:function"),
        ("os.path:nope", "nope"),
        ("os:sep", "not callable"),
    ]:
        with pytest.raises(ValueError, match=message):
            redaction_hook(spec)
    dlog = open_decision_log(
        ServeSettings(decision_log=tmp_path / "d", decision_log_redact="os.path:basename")
    )
    assert dlog.redact is os.path.basename and (tmp_path / "d").is_dir()
    dlog.close()


def test_serve_refuses_a_bad_decision_log_format_with_one_line():
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "cli.py"),
            "serve",
            "--decision-log",
            "x",
            "--decision-log-format",
            "csv",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "jsonl or parquet, got 'csv'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_a_redaction_hook_in_the_working_directory_imports_without_pythonpath(tmp_path, monkeypatch):
    """`serve --decision-log-redact mymod:fn` run from the folder that holds mymod.py, as a user writes it."""
    from router.serve.state import redaction_hook

    (tmp_path / "myredact_hook.py").write_text("def scrub(text):\n    return text.replace('4111', '****')\n")
    monkeypatch.chdir(tmp_path)
    before = list(sys.path)
    fn = redaction_hook("myredact_hook:scrub")
    assert fn("card 4111") == "card ****" and sys.path == before
