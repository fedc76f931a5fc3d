"""ONNX Runtime intent classifier over an exported model directory (no torch)."""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from router import env as envvars
from router.batches import DEFAULT_MAX_TOKENS, check_texts, length_batches
from router.compound import (
    classify_clauses,
    clause_floor,
    clause_vectors,
    clauses_to_read,
    read_in_context,
    resolve_batch,
)
from router.manifest import Manifest, ModelError, load_manifest, verify_file
from router.model_card import check_graph_metadata, read_graph_metadata
from router.wordpiece import AsciiWordPiece

log = logging.getLogger(__name__)


class UnstampedGraphWarning(UserWarning):
    """The graph carries no intent_router metadata (exported before it existed): the manifest's labels,
    max_seq_length and temperature cannot be checked against it."""


@dataclass(frozen=True)
class Classification:
    label: str
    confidence: float
    ranking: list[tuple[str, float]]
    tokenize_ms: float = 0.0
    inference_ms: float = 0.0
    truncated: bool = False
    num_tokens: int = 0
    distance: float | None = None  # in-scope distance (manifest.in_scope), when the graph computes it
    intent_scores: dict[str, float] | None = None  # one-vs-rest scores (manifest.compound), when computed
    intents: list[str] = field(default_factory=list)  # router.compound.resolve_intents: primary first
    clauses: list[dict] = field(default_factory=list)  # the clauses classified for it, when it has any
    embedding: np.ndarray | None = None  # the sentence embedding, when the classifier fetches it


class Classifier:
    """Loads ``manifest.json``, the tokenizer and one ONNX graph, checking every file's sha256.

    One InferenceSession serves all calls; ``run`` is thread-safe in onnxruntime and the tokenizer is
    configured once at load time, so a Classifier can be shared across threads.
    """

    def __init__(
        self,
        model_dir: str | Path,
        variant: str | None = None,
        *,
        manifest: Manifest | None = None,
        intra_op_threads: int | None = None,
        require_parity: bool = True,
        max_batch: int = 32,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        fast_tokenizer: bool = True,
    ) -> None:
        self.model_dir = Path(model_dir)
        self.max_batch = max(1, int(max_batch))
        self.max_tokens = max(1, int(max_tokens))
        self.manifest = manifest or load_manifest(self.model_dir)
        export = self.manifest.export
        if export is None:
            raise ModelError(
                f"{self.model_dir}: the manifest has no export section; run 'intent-router export' first"
            )
        self.variant = variant or export.default_variant
        if self.variant not in export.variants:
            raise ModelError(
                f"{self.model_dir}: no '{self.variant}' graph (has: {', '.join(export.variants)})"
            )
        spec = export.variants[self.variant]
        if require_parity and spec.parity is not None and not spec.parity.passed:
            raise ModelError(
                f"{self.model_dir}: the {self.variant} graph failed its parity check at export; re-export it"
            )
        graph_path = verify_file(self.model_dir, spec.file)
        tok_path = verify_file(self.model_dir, export.tokenizer)

        self.labels: list[str] = list(self.manifest.labels)
        self.max_length = self.manifest.max_seq_length
        self.tokenizer = Tokenizer.from_file(str(tok_path))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=self.max_length)
        # ASCII text skips the tokenizer's Encoding (router.wordpiece); None for other tokenizers, or when off
        self.wordpiece = AsciiWordPiece.for_tokenizer(self.tokenizer) if fast_tokenizer else None

        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        threads = (
            envvars.check_threads(intra_op_threads) if intra_op_threads is not None else envvars.threads()
        )
        if threads:
            opts.intra_op_num_threads = threads
        self.session = ort.InferenceSession(
            str(graph_path), sess_options=opts, providers=["CPUExecutionProvider"]
        )
        meta = read_graph_metadata(self.session.get_modelmeta().custom_metadata_map)
        if meta is None:
            msg = (
                f"{graph_path}: the graph carries no intent_router metadata (an export from before it "
                "existed), so the manifest's labels, max_seq_length and temperature cannot be checked; "
                "re-export, or stamp it with router.model_card.stamp_model_dir"
            )
            warnings.warn(msg, UnstampedGraphWarning, stacklevel=2)
            log.warning(msg)
        else:
            check_graph_metadata(meta, self.manifest, str(graph_path))
        self.graph_metadata = meta
        outputs = self.session.get_outputs()
        if outputs[0].shape[-1] not in (len(self.labels), None) and isinstance(outputs[0].shape[-1], int):
            raise ModelError(
                f"graph has {outputs[0].shape[-1]} outputs but the manifest lists {len(self.labels)} labels"
            )
        self._output = export.output
        scope = self.manifest.in_scope
        self.distance_threshold: float | None = scope.threshold if scope is not None else None
        self._outputs = [self._output] + ([scope.output] if scope is not None else [])
        compound = self.manifest.compound
        self.compound_intents: list[str] = list(compound.intents) if compound is not None else []
        if compound is not None:
            self._outputs.append(compound.output)
        self._reader = compound.reader if compound is not None else None
        if self._reader is not None:  # clauses read from this run's token states, not a second run
            if self._reader.file is None:
                raise ModelError(
                    f"{self.model_dir}: the manifest's clause reader has no head file; re-export"
                )
            head = np.load(verify_file(self.model_dir, self._reader.file))
            self._reader_head = (head["coef"], head["intercept"])
        # the token states are fetched only by the calls that read clauses
        self._outputs_states = self._outputs + ([self._reader.output] if self._reader is not None else [])
        names = {o.name for o in outputs}
        # the sentence embedding (manifest export.embedding_output), fetched once with_embeddings is set
        self.embedding_output = export.embedding_output if export.embedding_output in names else None
        self.with_embeddings = False
        if not set(self._outputs_states) <= names:
            missing = sorted(set(self._outputs_states) - names)
            raise ModelError(f"{graph_path}: the graph lacks output(s) {missing}")

    @property
    def clauses_in_context(self) -> bool:
        """Whether clauses are read from the message's own run (the manifest's clause reader) rather than
        in a second one."""
        return self._reader is not None

    @property
    def model_id(self) -> str:
        return f"{self.manifest.model_id}/{self.variant}"

    # ------------------------------------------------------------------------------------- run
    def _run(self, texts: Sequence[str], read_clauses: bool = False, embeddings: bool | None = None):
        """Tokenize, then run the graph in length-sorted batches (router.batches.length_batches) so padding stays short; rows come back
        in input order. Returns (probabilities, in-scope distances or None, intent scores or None,
        encodings, tokenize seconds, inference seconds, sentence embeddings or None (``embeddings``,
        default ``with_embeddings``), clause vectors). With ``read_clauses`` and a
        clause reader, the clause vectors map each message whose clauses could matter to its clauses and
        their vectors (router.compound.clause_vectors), taken from each chunk's token states as it runs;
        else they are None."""
        t0 = time.perf_counter()
        encs = self._encode(texts)
        t1 = time.perf_counter()
        lengths = [len(e) for e in encs]  # len(e), not len(e.ids): .ids builds a new list on every access
        probs = np.empty((len(encs), len(self.labels)), dtype=np.float32)
        dist = np.empty(len(encs), dtype=np.float32) if self.distance_threshold is not None else None
        scores = (
            np.empty((len(encs), len(self.compound_intents)), dtype=np.float32)
            if self.compound_intents
            else None
        )
        vectors = {} if read_clauses and self._reader is not None and scores is not None else None
        emb = [None] * len(encs) if (self.with_embeddings if embeddings is None else embeddings) else None
        floor = clause_floor(self.manifest.compound) if vectors is not None else 0.0
        single = len(encs) == 1
        if single:  # one message needs no plan
            chunks = [[0]]
        else:
            order = sorted(range(len(encs)), key=lengths.__getitem__)
            chunks = length_batches(order, lengths, self.max_batch, self.max_tokens)
        for idx in chunks:
            at = slice(0, 1) if single else idx  # a slice sets one row in a third of a list index's time
            # the tokenizer pads nothing, so a message's attention mask is ones over its own tokens
            if len(idx) == 1:  # no padding: the arrays straight from the encoding
                ids = np.asarray([encs[idx[0]].ids], dtype=np.int64)
                mask = np.ones(ids.shape, dtype=np.int64)
            else:
                width = lengths[idx[-1]]
                ids = np.zeros((len(idx), width), dtype=np.int64)
                mask = np.zeros((len(idx), width), dtype=np.int64)
                for row, i in enumerate(idx):
                    ids[row, : lengths[i]] = encs[i].ids
                    mask[row, : lengths[i]] = 1
            fetch = self._outputs if vectors is None else self._outputs_states
            out = self.session.run(
                [*fetch, self.embedding_output] if emb is not None else fetch,
                {"input_ids": ids, "attention_mask": mask},
            )
            if emb is not None:
                for row, i in enumerate(idx):
                    emb[i] = out[-1][row]
                out.pop()
            probs[at] = out[0]
            if dist is not None:
                dist[at] = out[1]
            if scores is not None:
                scores[at] = out[len(self._outputs) - 1]  # the last of _outputs; the states follow
            if vectors is not None:  # the chunk's own rows: out, not probs and scores indexed again
                self._clause_vectors(
                    texts, encs, idx, out[0], out[len(self._outputs) - 1], out[-1], floor, vectors
                )
        return probs, dist, scores, encs, t1 - t0, time.perf_counter() - t1, emb, vectors

    def _encode(self, texts: Sequence[str]) -> list:
        """Encodings in input order: router.wordpiece's where it takes the text, the tokenizer's elsewhere."""
        if self.wordpiece is None:
            return self._tokenize(texts)
        encs = [self.wordpiece.encode(t) for t in texts]
        rest = [i for i, e in enumerate(encs) if e is None]
        if rest:
            for i, e in zip(rest, self._tokenize([texts[i] for i in rest]), strict=True):
                encs[i] = e
        return encs

    def _tokenize(self, texts: Sequence[str]) -> list:
        # encode_batch's thread pool pays from 8 texts on (measured: 2-6 clauses encode faster one by one)
        if len(texts) >= 8:
            return self.tokenizer.encode_batch(list(texts))
        return [self.tokenizer.encode(t) for t in texts]

    def _clause_vectors(self, texts, encs, idx, probs, scores, states, floor, vectors) -> None:
        """``probs``, ``scores`` and ``states``: the chunk's rows, in ``idx`` order."""
        # plain floats and one argmax per chunk, not numpy scalars per message
        tops, rows = probs.argmax(axis=1).tolist(), scores.tolist()
        for row, i in enumerate(idx):
            primary = self.labels[tops[row]]
            clauses = clauses_to_read(self.manifest.compound, texts[i], primary, rows[row], floor)
            if clauses:
                n = len(encs[i])
                vectors[i] = (clauses, clause_vectors(texts[i], clauses, encs[i].offsets, states[row, :n]))

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        """Calibrated probabilities, shape (n, labels), columns in ``self.labels`` order."""
        return self.predict(texts)[0]

    def predict(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray | None]:
        """(probabilities, in-scope distances): the distances are None when the model has none."""
        check_texts(texts)
        if not texts:
            empty = np.zeros(0, dtype=np.float32) if self.distance_threshold is not None else None
            return np.zeros((0, len(self.labels)), dtype=np.float32), empty
        probs, dist, *_ = self._run(texts)
        return probs, dist

    def predict_compound(
        self, texts: Sequence[str]
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, list[list[str]], list[list[dict]]]:
        """(probabilities, in-scope distances or None, one-vs-rest intent scores in ``compound_intents``
        order, each message's intents by router.compound.resolve_intents, each message's clauses with their
        top label and probability); the scores are (n, 0) and every message has at most one intent when the
        model has no compound head."""
        check_texts(texts)
        if not texts:
            empty = np.zeros(0, dtype=np.float32) if self.distance_threshold is not None else None
            k = len(self.compound_intents)
            return (
                np.zeros((0, len(self.labels)), dtype=np.float32),
                empty,
                np.zeros((0, k), np.float32),
                [],
                [],
            )
        probs, dist, scores, *_, vectors = self._run(texts, read_clauses=True)
        intents, clauses = self._intents(texts, probs, scores, vectors)
        if scores is None:
            scores = np.zeros((len(texts), 0), np.float32)
        return probs, dist, scores, intents, clauses

    def _intents(self, texts, probs, scores, vectors) -> tuple[list[list[str]], list[list[dict]]]:
        primaries = [self.labels[j] for j in probs.argmax(axis=1).tolist()]
        if vectors is None:  # each clause classified on its own, in a second run
            return resolve_batch(
                texts,
                primaries,
                self.manifest.compound,
                scores,
                lambda split: classify_clauses(split, self.labels, lambda t: self._run(t)[0]),
            )
        # read in context: _run has applied the same rule (clauses_to_read) to every message
        split = [vectors[i][0] if i in vectors else [] for i in range(len(texts))]
        found = [vectors[i][1] if i in vectors else np.zeros((0, 1)) for i in range(len(texts))]
        return resolve_batch(
            texts,
            primaries,
            self.manifest.compound,
            scores,
            lambda _: read_in_context(found, *self._reader_head, self.labels),
            split=split,
        )

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The sentence embeddings of ``texts``: the graph's embedding output (training.embeddings), raw."""
        if self.embedding_output is None:
            raise ModelError(
                f"{self.model_dir}: the graph has no sentence-embedding output; re-export the model"
            )
        check_texts(texts)
        emb = self._run(texts, embeddings=True)[6] if texts else []
        return np.asarray(emb, dtype=np.float32).reshape(len(texts), -1)

    # --------------------------------------------------------------------------------- classify
    def classify(self, text: str) -> Classification:
        return self.classify_batch([text])[0]

    def classify_batch(self, texts: Sequence[str]) -> list[Classification]:
        check_texts(texts)
        if not texts:
            return []
        probs, dist, scores, encs, tok_s, inf_s, emb, vectors = self._run(texts, read_clauses=True)
        t0 = time.perf_counter()
        intents, clauses = self._intents(texts, probs, scores, vectors)
        inf_s += time.perf_counter() - t0  # the clauses' own run
        tok_ms, inf_ms = tok_s * 1000 / len(texts), inf_s * 1000 / len(texts)
        # plain floats, converted once per batch rather than as numpy scalars per message
        rows, dists = probs.tolist(), dist.tolist() if dist is not None else None
        rows_scores = scores.tolist() if scores is not None else None
        out = []
        for i, enc in enumerate(encs):
            ranking = sorted(zip(self.labels, rows[i], strict=True), key=_by_probability)
            out.append(
                Classification(
                    label=ranking[0][0],
                    confidence=ranking[0][1],
                    ranking=ranking,
                    tokenize_ms=tok_ms,
                    inference_ms=inf_ms,
                    truncated=bool(enc.overflowing),
                    num_tokens=len(enc),
                    distance=dists[i] if dists is not None else None,
                    intent_scores=dict(zip(self.compound_intents, rows_scores[i], strict=True))
                    if rows_scores is not None
                    else None,
                    intents=intents[i],
                    clauses=clauses[i],
                    embedding=emb[i] if emb is not None else None,
                )
            )
        return out


def _by_probability(item: tuple[str, float]) -> float:
    return -item[1]
