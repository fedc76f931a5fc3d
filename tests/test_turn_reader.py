"""The turn reader (router.turn_reader): after a turn, a message not sure of its own intent is read as a
continuation, small talk or a request of its own; fitted on an exported model's own outputs
(training.fit.turn_reading) and used only for messages that follow a turn."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from router.conversation import Context, read_turn
from router.manifest import load_manifest
from router.routing import Router
from router.turn_reader import KINDS, TurnReader, kind_of
from tests.conftest import SHIPPED

CTX = Context(("ACTION",), "previous_decision")


def _reading(continuation, social, own, signals=(), ctx=CTX):
    return read_turn(
        {"continuation": continuation, "social": social, "own": own}, list(signals), lambda: ctx, 0.75
    )


def test_read_turn_sends_each_kind_its_own_way():
    assert _reading(0.1, 0.8, 0.1).out_of_scope  # social: out of scope whatever came before
    sure = _reading(0.9, 0.05, 0.05)
    assert sure.continuation == pytest.approx(0.9) and sure.context == CTX
    unsure = _reading(0.5, 0.3, 0.2)  # a continuation below the threshold: a follow-up (verifier)
    assert unsure.continuation is None and unsure.follow_up and unsure.context == CTX
    own = _reading(0.2, 0.1, 0.7)
    assert not own.out_of_scope and not own.follow_up and own.continuation is None
    assert _reading(0.2, 0.1, 0.7, signals=["distance"]).out_of_scope
    nothing = _reading(0.9, 0.05, 0.05, ctx=None)  # nothing to continue: its own reading
    assert nothing.continuation is None and not nothing.follow_up
    assert kind_of({"continuation": 0.2, "social": 0.5, "own": 0.3}) == ("social", 0.5)


@pytest.fixture(scope="module")
def router():
    return Router.load(SHIPPED)


def test_the_shipped_model_reads_turns_only_after_a_turn(router):
    assert router.reads_turns and load_manifest(SHIPPED).conversation.kinds == list(KINDS)
    first = router.route("restart the billing worker on prod-3", role="admin")
    assert first.intent == "ACTION"
    assert not [s for s in first.trace if s.stage == "conversation"]  # a single message: no reader
    after = router.route("cheers, that did it", role="admin", previous=first)
    turn = next(s for s in after.trace if s.stage == "conversation" and s.status == "turn")
    assert set(turn.detail) == set(KINDS) and sum(turn.detail.values()) == pytest.approx(1.0, abs=1e-5)
    assert after.intent is None and not after.requires_confirmation


def test_fit_turn_reader_writes_a_reader_the_router_uses(tmp_path):
    from training.fit.turn_reading import fit_turn_reader

    model = tmp_path / "model"
    shutil.copytree(SHIPPED, model)
    convs = tmp_path / "train.jsonl"
    lines = []
    for request, label in [
        ("restart the api pods in eu-west", "ACTION"),
        ("plan the q3 offsite", "PLANNING"),
    ]:
        for text, kind, lab in [
            ("yes go ahead", "confirmation", label),
            ("make it next week instead", "slot_change", label),
            ("thanks a lot!", "thanks", "OUT_OF_SCOPE"),
            ("bye for now", "farewell", "OUT_OF_SCOPE"),
            ("what did i ask you yesterday", "switch", "MEMORY"),
        ]:
            lines.append(
                {"turns": [{"text": request, "label": label}, {"text": text, "label": lab, "kind": kind}]}
            )
    convs.write_text("".join(json.dumps(x) + "\n" for x in lines))
    said = []
    spec = fit_turn_reader(model, convs, None, report=said.append)
    assert spec.rows == {"continuation": 4, "own": 2, "social": 4} and spec.features == 384 + 7
    manifest = load_manifest(model)
    assert manifest.conversation == spec and (model / spec.file.path).is_file()
    assert "turn reader: 10 rows" in said[0]
    r = Router.load(model)
    first = r.route("restart the api pods in eu-west", role="admin")
    assert r.reads_turns and any(s.status == "turn" for s in r.route("bye", "admin", previous=first).trace)


def test_a_reader_of_another_width_is_refused(tmp_path):
    model = tmp_path / "model"
    shutil.copytree(SHIPPED, model)
    spec = load_manifest(model).conversation
    np.savez(model / spec.file.path, coef=np.zeros((3, 10), np.float32), intercept=np.zeros(3, np.float32))
    from router.manifest import file_entry

    spec.file = file_entry(model, spec.file.path)
    with pytest.raises(ValueError, match="391 features"):
        TurnReader.load(model, spec)


def test_a_model_without_a_reader_keeps_the_prior_rule(tmp_path):
    model = tmp_path / "model"
    shutil.copytree(SHIPPED, model)
    manifest = load_manifest(model)
    manifest.conversation = None
    manifest.save(model)
    r = Router.load(model)
    first = r.route("restart the billing worker on prod-3", role="admin")
    d = r.route("cheers, that did it", role="admin", previous=first)
    assert not r.reads_turns and next(s.status for s in d.trace if s.stage == "conversation") == "prior"


def test_the_conversation_training_file_shares_no_turn_with_an_evaluation_file():
    from tests.conftest import ROOT
    from training.corpus.labelled import normalize_text
    from training.corpus.merge import evaluation_files

    def texts(path):
        out = set()
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            out |= {normalize_text(t["text"]) for t in row.get("turns", [row])}
        return out

    train = texts(ROOT / "data" / "conversations" / "train.jsonl")
    held = [p for p in evaluation_files(ROOT / "data") if p.name != "train.jsonl"]
    assert any(p.parent.name == "conversations" for p in held)
    for path in held:
        assert not train & texts(path), path


def test_a_re_export_keeps_the_reader_only_when_its_graph_came_out_byte_identical(tmp_path):
    """training.export.exporter sets the reader aside before it writes graphs and puts it back after, when the
    default graph is the one the reader read; a changed graph leaves the model without one, and says so."""
    from training.fit.turn_reading import put_back, set_aside

    model = tmp_path / "model"
    shutil.copytree(SHIPPED, model)
    manifest = load_manifest(model)
    spec = manifest.conversation
    held = set_aside(model, manifest)
    assert manifest.conversation is None and not (model / spec.file.path).exists()
    said = []
    put_back(model, manifest, held, said.append)  # the same graph: the reader comes back as it was
    assert manifest.conversation == spec and "byte-identical" in said[0]
    assert (model / spec.file.path).read_bytes() == (SHIPPED / spec.file.path).read_bytes()
    held = set_aside(model, manifest)
    manifest.export.variants[manifest.export.default_variant].file.sha256 = "0" * 64  # another graph
    put_back(model, manifest, held, said.append)
    assert manifest.conversation is None and not (model / spec.file.path).exists()
    assert "fit-turns" in said[1]
