"""Fit the turn reader (router.turn_reader) of an exported model.

Its rows are what the router will read it on: the outputs of the model's own default graph (sentence
embedding and calibrated probabilities), so it needs no checkpoint and no second export. They come from:
- the later turns of a conversation file (data/conversations/train.jsonl): a continuation kind is
  ``continuation``, a social kind ``social``, a switch ``own``;
- the training rows: CONTINUATION rows are ``continuation``, OUT_OF_SCOPE rows ``social``, and a seeded
  share (OWN_SHARE) of the rows of each intent ``own``, so that a request after a turn keeps its own
  intent.
The head is a multinomial logistic regression (L2, ``C``) over those features.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

from eval.metrics.conversation_turns import load_conversations
from router.classifier import Classifier
from router.intents import CONTINUATION, OUT_OF_SCOPE, intents_of
from router.manifest import ModelError, TurnReaderSpec, file_entry, load_manifest, sha256_file
from router.turn_reader import FILE, KINDS, TurnReader, turn_features
from training.corpus.labelled import load_examples

DEFAULT_C = 0.3
OWN_SHARE = 0.3  # of each intent's training rows, read as a request of its own after a turn
BATCH = 256


def turn_rows(
    conversations: str | Path, train_file: str | Path | None, labels: list[str], seed: int = 42
) -> tuple[list[str], list[str]]:
    """(texts, kinds): the later turns of ``conversations`` and the rows of ``train_file`` as above."""
    texts, kinds = [], []
    for conv in load_conversations(conversations, tuple(intents_of(labels))):
        for turn in conv.turns[1:]:
            texts.append(turn.text)
            kinds.append({"continuation": "continuation", "social": "social"}.get(turn.role, "own"))
    if train_file is not None:
        rng = np.random.default_rng(seed)
        for ex in load_examples(train_file, labels):
            if ex.label == CONTINUATION:
                kind = "continuation"
            elif ex.label == OUT_OF_SCOPE:
                kind = "social"
            else:
                kind = "own" if rng.random() < OWN_SHARE else None
            if kind is not None:
                texts.append(ex.text)
                kinds.append(kind)
    return texts, kinds


def fit_turn_reader(
    model_dir: str | Path,
    conversations: str | Path,
    train_file: str | Path | None,
    c: float = DEFAULT_C,
    seed: int = 42,
    report: Callable[[str], None] = print,
) -> TurnReaderSpec:
    """Fit the turn reader on the model's default graph, write FILE beside it and record it in the
    manifest (``conversation``); returns that section."""
    from sklearn.linear_model import LogisticRegression

    model_dir = Path(model_dir)
    manifest = load_manifest(model_dir)
    if CONTINUATION not in manifest.labels:
        raise ModelError(f"{model_dir}: a turn reader needs a model trained with the {CONTINUATION} label")
    manifest.conversation = None  # the classifier below reads the graph without the reader being fitted
    clf = Classifier(model_dir, manifest=manifest)
    if clf.embedding_output is None:
        raise ModelError(f"{model_dir}: the graph has no sentence-embedding output; re-export the model")
    texts, kinds = turn_rows(conversations, train_file, list(manifest.labels), seed)
    emb, probs = [], []
    for at in range(0, len(texts), BATCH):
        e, p = clf.embed_and_predict(texts[at : at + BATCH])
        emb.append(e)
        probs.append(p)
    x = turn_features(np.vstack(emb), np.vstack(probs))
    y = np.array([KINDS.index(k) for k in kinds])
    head = LogisticRegression(C=c, max_iter=5000, class_weight="balanced").fit(x, y)
    reader = TurnReader(head.coef_, head.intercept_)
    np.savez(
        model_dir / FILE, coef=reader.coef.astype(np.float32), intercept=reader.intercept.astype(np.float32)
    )
    files = [Path(conversations), *([Path(train_file)] if train_file is not None else [])]
    manifest.conversation = spec = TurnReaderSpec(
        kinds=list(KINDS),
        features=x.shape[1],
        file=file_entry(model_dir, FILE),
        variant=clf.variant,
        rows=dict(sorted(Counter(kinds).items())),
        fitted_on=[f"{f.as_posix()} {sha256_file(f)[:12]}" for f in files],
    )
    manifest.save(model_dir)
    right = float((head.predict(x) == y).mean())
    report(f"turn reader: {len(texts)} rows {spec.rows}, {right:.1%} right on its own rows -> {FILE}")
    return spec


def set_aside(model_dir: Path, manifest) -> tuple | None:
    """Take a model's turn reader out before a re-export (it read the old graph's outputs): its spec, its
    file's bytes and the sha256 of the graph it read, or None when the model has none."""
    spec = manifest.conversation
    if spec is None:
        return None
    graph = manifest.export.variants.get(spec.variant) if manifest.export is not None else None
    held = (spec, (model_dir / FILE).read_bytes(), graph.file.sha256 if graph is not None else None)
    manifest.conversation = None
    (model_dir / FILE).unlink(missing_ok=True)
    return held


def put_back(model_dir: Path, manifest, held: tuple | None, report: Callable[[str], None]) -> None:
    """After a re-export: the turn reader set aside comes back when the default graph is, byte for byte, the
    one it read; otherwise the model has none until `fit-turns`, and the report says so."""
    if held is None:
        return
    spec, data, sha = held
    graph = manifest.export.variants.get(manifest.export.default_variant)
    if spec.variant == manifest.export.default_variant and graph is not None and graph.file.sha256 == sha:
        (model_dir / FILE).write_bytes(data)
        manifest.conversation = spec
        report(f"turn reader kept: the {spec.variant} graph it read came out byte-identical")
        return
    report(
        "WARNING: the default graph changed, so the turn reader fitted on the old one was dropped; until "
        f"'intent-router fit-turns --model {model_dir}' fits it again, conversations are read with the "
        "prior alone"
    )
