"""Training the in-context clause reader of a student and exporting it into the graph."""

import json

import numpy as np
import pytest

from router.classifier import Classifier
from router.manifest import load_manifest
from tests.conftest import TINY, tiny_config


@pytest.mark.slow
def test_clauses_read_in_context_need_one_graph_run_and_match_pytorch(tmp_path):
    """A student with the in-context clause reader: the graph returns the token states of the reader's
    layers, the router reads every compound message's clauses from the one run, and the clause
    probabilities and intents are PyTorch's."""
    import onnx

    from training.export.exporter import CLAUSE_READER_FILE, export_model
    from training.export.options import ExportOptions
    from training.fit.intent_model import IntentModel
    from training.fit.train import train

    out = tmp_path / "model"
    cfg = tiny_config(
        max_steps=8,
        distil_layers=[0, 3],
        distil_epochs=2,
        clause_context_layers=[1, 2],
        distil_clause_weight=1.0,
    )
    lines: list[str] = []
    train(cfg, out, report=lines.append, show_progress=False)
    epochs = [line for line in lines if line.startswith("distillation epoch")]
    assert len(epochs) == 2 and all("clauses in context" in line for line in epochs)
    export_model(
        out,
        ExportOptions(variants=("fp32",)),
        parity_file=[TINY / "test.jsonl", TINY / "compound" / "test.jsonl"],
        report=lambda _: None,
    )
    manifest = load_manifest(out)
    reader = manifest.compound.reader
    assert reader.layers == [1, 2] and reader.file.path == CLAUSE_READER_FILE
    graph = onnx.load(str(out / "model.fp32.onnx"))
    states = next(o for o in graph.graph.output if o.name == reader.output)
    assert states.type.tensor_type.shape.dim[2].dim_value == 2 * 384  # two layers' states side by side

    texts = [json.loads(line)["text"] for line in (TINY / "compound" / "test.jsonl").open()]
    clf = Classifier(out, "fp32")
    runs = []
    run = clf.session.run
    clf.session.run = lambda *a, **kw: runs.append(a[0]) or run(*a, **kw)
    *_, intents, clauses = clf.predict_compound(texts)
    assert len(runs) == 1 and reader.output in runs[0]  # no second run for the clauses
    assert sum(map(len, clauses)) >= 4  # clauses were read
    model = IntentModel.load(out / "checkpoint", manifest=manifest)
    *_, torch_intents, torch_clauses = model.predict_compound(texts)
    assert intents == torch_intents
    for ours, theirs in zip(clauses, torch_clauses, strict=True):
        assert [c["label"] for c in ours] == [c["label"] for c in theirs]
        np.testing.assert_allclose(
            [c["probability"] for c in ours], [c["probability"] for c in theirs], atol=1e-4
        )
    runs.clear()
    clf.predict_proba(texts)  # calls that read no clauses do not fetch the token states
    assert runs and all(reader.output not in names for names in runs)


def test_clause_reader_layers_outside_the_body_fail_before_training():
    from training.fit.intent_model import IntentModel

    with pytest.raises(ValueError, match="clause_context_layers"):  # a 2-layer student has layers 0..2
        IntentModel(tiny_config(distil_layers=[0, 3], clause_context_layers=[1, 3])).fit(
            ["find the deck", "plan my week"],
            ["SEARCH", "PLANNING"],
            report=lambda _: None,
            show_progress=False,
        )
