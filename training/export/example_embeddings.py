"""What an exported model keeps for intents defined by examples (router.examples): a sentence embedding as
an output of its graph, and a small reference sample of the training data's embeddings.

The embedding is a lower encoder layer's token states, mean-pooled with the head's own mask: the top layers
of a contrastively fine-tuned body map every message onto the clusters of the labels it was trained on, so a
new intent's messages sit as close to an old label as to each other there. Measured on the shipped model
with six examples of a TRANSLATE intent against ten new translation requests and the 890 dev messages
(vectors centred on the reference sample's mean; threshold at its 99th percentile): the final embedding
caught 0 of the 10, layer index 3 (of 0-5) 5, and layer indexes 1 and 2 7 each, taking 1.1-1.2% of the
dev messages. ``embedding_layer`` picks the layer a third of the way up: index 2 of a 6-layer body, the
middle one of a 3-layer student. Three new nodes pool it; every other output keeps its bytes.

The reference sample (REFERENCE_PER_LABEL rows of each label, seeded, embedded by the model's default
graph, float16) is what an example-defined intent's threshold is fitted against: the model's other data.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from router.manifest import ModelError

EMBEDDING_OUTPUT = "sentence_embedding"
EMBEDDING_DEPTH = 1 / 3  # of the encoder layers, counted from the embeddings
REFERENCE_FILE = "reference_embeddings.npz"
REFERENCE_PER_LABEL = 48  # 7 labels x 48 x 384 float16: about 260 KB
REFERENCE_SEED = 0
_LAYER_OUTPUT = re.compile(r"/encoder/layer\.(\d+)/output/LayerNorm/[^/]*_output_0$")


def embedding_layer(layers: int) -> int:
    """The encoder layer (0-based) whose pooled states are the embedding, for a body of ``layers``."""
    return max(0, min(layers - 1, round(layers * EMBEDDING_DEPTH)))


def add_embedding_output(path: str | Path) -> bool:
    """Add the pooled states of ``embedding_layer`` as the output EMBEDDING_OUTPUT of the graph at
    ``path`` (rewritten in place); False when it has one already."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(path))
    graph = model.graph
    if any(o.name == EMBEDDING_OUTPUT for o in graph.output):
        return False
    producers = {name: node for node in graph.node for name in node.output}
    # from the probabilities up the first inputs: softmax, scale, bias, the head's MatMul (quantised or
    # not), the normalisation, then the mean pooling: Div (by the mask's sum), ReduceSum, Mul (by the mask)
    walk, name = [], graph.output[0].name
    while name in producers and len(walk) < 16:
        walk.append(producers[name])
        name = walk[-1].input[0] if walk[-1].input else None
    ops = [n.op_type for n in walk]
    at = next((i for i in range(1, len(ops) - 1) if ops[i - 1 : i + 2] == ["Div", "ReduceSum", "Mul"]), None)
    layers = {
        int(m.group(1)): out for n in graph.node for out in n.output if (m := _LAYER_OUTPUT.search(out))
    }
    if at is None or not layers:
        raise ModelError(f"{path}: no mean pooling of encoder layers found above the head ({ops})")
    divide, total, masked = walk[at - 1 : at + 2]
    source = layers[embedding_layer(max(layers) + 1)]
    graph.node.extend(
        [
            helper.make_node("Mul", [source, masked.input[1]], ["embedding/masked"], name="embedding/masked"),
            helper.make_node("ReduceSum", ["embedding/masked", *total.input[1:]], ["embedding/sum"],
                             name="embedding/sum", **{a.name: helper.get_attribute_value(a) for a in total.attribute}),
            helper.make_node("Div", ["embedding/sum", divide.input[1]], [EMBEDDING_OUTPUT], name=EMBEDDING_OUTPUT),
        ]
    )  # fmt: skip
    graph.output.append(helper.make_tensor_value_info(EMBEDDING_OUTPUT, TensorProto.FLOAT, ["batch", None]))
    onnx.save(model, str(path))
    return True


def reference_sample(texts: Sequence[str], labels: Sequence[str], per_label: int = REFERENCE_PER_LABEL):
    """(texts, labels): at most ``per_label`` rows of each label, a seeded sample in file order."""
    by_label: dict[str, list[int]] = {}
    for i, label in enumerate(labels):
        by_label.setdefault(label, []).append(i)
    rng = random.Random(REFERENCE_SEED)
    keep = sorted(i for rows in by_label.values() for i in rng.sample(rows, min(per_label, len(rows))))
    return [texts[i] for i in keep], [labels[i] for i in keep]


def write_reference(model_dir: str | Path, texts: Sequence[str], labels: Sequence[str]) -> Path:
    """Embed a reference sample of ``texts`` with the model's default graph and write REFERENCE_FILE."""
    from router.classifier import Classifier

    sample, sample_labels = reference_sample(texts, labels)
    clf = Classifier(model_dir, intra_op_threads=1)  # one thread: the same sums on every machine
    vectors = clf.embed(sample)
    path = Path(model_dir) / REFERENCE_FILE
    names = sorted(set(sample_labels))
    np.savez(
        path,
        vectors=vectors.astype(np.float16),
        labels=np.array([names.index(label) for label in sample_labels], dtype=np.int16),
        names=np.array(names),
    )
    return path


def add_embeddings(model_dir: str | Path, manifest, train_file: str | Path | None, report=print) -> None:
    """Give an exported model what intents defined by examples need: the embedding output in each graph
    and, from ``train_file`` (its training data), the reference sample; the manifest records both and
    is saved. Export does this after parity; a model exported before it existed can be given them."""
    from router.manifest import file_entry

    model_dir = Path(model_dir)
    try:
        for (
            spec
        ) in manifest.export.variants.values():  # those here: a shipped model leaves out its fp32 graph
            if (model_dir / spec.file.path).is_file() and add_embedding_output(model_dir / spec.file.path):
                spec.file = file_entry(model_dir, spec.file.path)
    except ModelError as e:  # a graph of another shape: the model works, without intents defined by examples
        report(f"no sentence-embedding output: {e}")
        return
    manifest.export.embedding_output = EMBEDDING_OUTPUT
    manifest.save(model_dir)
    if train_file is None:
        report("no training file here: the model keeps no reference sample for intents defined by examples")
        return
    from eval.readers.loader import load_labeled

    rows = load_labeled(train_file, labels=manifest.labels)
    write_reference(model_dir, rows.texts, rows.labels)
    manifest.export.reference = file_entry(model_dir, REFERENCE_FILE)
    manifest.save(model_dir)
