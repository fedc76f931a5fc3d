"""ONNX Runtime intent classifier over an exported model directory (no torch)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from router import env as envvars
from router.batches import DEFAULT_MAX_TOKENS, check_texts, graph_inputs, length_batches
from router.classification import Classification
from router.compound import (
    clause_probabilities,
    clause_vectors,
    clauses_of_batch,
    flat_clauses,
    read_in_context,
    resolve_clauses,
)
from router.manifest import Manifest, ModelError, load_manifest, verify_file
from router.model_card import check_graph_metadata, read_graph_metadata
from router.shipped import resolve_model_dir
from router.turn_reader import TurnReader
from router.wordpiece import AsciiWordPiece

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GraphRun:
    """One pass of the graph over a batch of messages (``Classifier._run``), rows in input order."""

    probabilities: np.ndarray  # (messages, labels), calibrated, columns in ``labels`` order
    distances: np.ndarray | None  # in-scope distances (manifest.in_scope), when the graph computes them
    intent_scores: np.ndarray | None  # (messages, compound intents) one-vs-rest scores (manifest.compound)
    encodings: list  # the tokenizer's encodings
    tokenize_s: float
    inference_s: float
    embeddings: list[np.ndarray] | None  # sentence embeddings, when fetched
    # each message's clauses to read (router.compound.clauses_of_batch), when the run was asked for them
    # and the model has a compound head; with a clause reader, their vectors (router.compound.clause_vectors)
    # from the run's own token states, (0, 1) for a message without clauses
    clauses: list[list[str]] | None = None
    clause_vectors: list[np.ndarray] | None = None


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
        self.model_dir = resolve_model_dir(model_dir)
        self.max_batch = max(1, int(max_batch))
        self.max_tokens = max(1, int(max_tokens))
        self.manifest = manifest or load_manifest(self.model_dir)
        graph_path, tok_path = self._checked_files(variant, require_parity)
        self.labels: list[str] = list(self.manifest.labels)
        self.max_length = self.manifest.max_seq_length
        self._load_tokenizer(tok_path, fast_tokenizer)
        self._open_session(graph_path, intra_op_threads)
        self._read_outputs(graph_path)

    def _checked_files(self, variant: str | None, require_parity: bool) -> tuple[Path, Path]:
        """The variant's graph and the tokenizer, their sha256 checked; the variant must have passed parity."""
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
        return verify_file(self.model_dir, spec.file), verify_file(self.model_dir, export.tokenizer)

    def _load_tokenizer(self, tok_path: Path, fast_tokenizer: bool) -> None:
        self.tokenizer = Tokenizer.from_file(str(tok_path))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=self.max_length)
        # ASCII text skips the tokenizer's Encoding (router.wordpiece); None for other tokenizers, or when off
        self.wordpiece = AsciiWordPiece.for_tokenizer(self.tokenizer) if fast_tokenizer else None

    def _open_session(self, graph_path: Path, intra_op_threads: int | None) -> None:
        """The InferenceSession, and the graph's own metadata checked against the manifest."""
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
            raise ModelError(
                f"{graph_path}: the graph carries no intent_router metadata, so the manifest's labels, "
                "max_seq_length and temperature cannot be checked against it; export the model again"
            )
        check_graph_metadata(meta, self.manifest, str(graph_path))
        self.graph_metadata = meta

    def _read_outputs(self, graph_path: Path) -> None:
        """Which outputs each call fetches: probabilities, in-scope distance, compound scores, the clause
        reader's token states, the sentence embedding; and the heads that read them."""
        outputs = self.session.get_outputs()
        if outputs[0].shape[-1] not in (len(self.labels), None) and isinstance(outputs[0].shape[-1], int):
            raise ModelError(
                f"graph has {outputs[0].shape[-1]} outputs but the manifest lists {len(self.labels)} labels"
            )
        export = self.manifest.export
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
        spec = self.manifest.conversation  # the turn reader, run only for messages read after a turn
        self.turn_reader = TurnReader.load(self.model_dir, spec) if spec and self.embedding_output else None
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

    @property
    def languages(self) -> list[str] | None:
        """The languages of the training text (the manifest's model card), None when not recorded."""
        return self.manifest.languages

    @property
    def label_counts(self) -> dict[str, int] | None:
        """Training rows per label, as the manifest records them (None when it does not)."""
        data = self.manifest.training.data
        return data.label_counts if data is not None else None

    # ------------------------------------------------------------------------------------- run
    def _run(
        self, texts: Sequence[str], read_clauses: bool = False, embeddings: bool | None = None
    ) -> GraphRun:
        """Tokenize, then run the graph in length-sorted batches (router.batches.length_batches) so padding
        stays short; rows come back in input order. The sentence embeddings are fetched with
        ``embeddings`` (default ``with_embeddings``). With ``read_clauses`` and a compound head, each
        message's clauses to read are picked as its chunk runs (``_read_chunk_clauses``)."""
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
        spec = self.manifest.compound
        split = [[] for _ in encs] if read_clauses and spec is not None and scores is not None else None
        in_context = split is not None and self._reader is not None
        vectors = [_NO_CLAUSES] * len(encs) if in_context else None
        emb = [None] * len(encs) if (self.with_embeddings if embeddings is None else embeddings) else None
        single = len(encs) == 1
        if single:  # one message needs no plan
            chunks = [[0]]
        else:
            order = sorted(range(len(encs)), key=lengths.__getitem__)
            chunks = length_batches(order, lengths, self.max_batch, self.max_tokens)
        for idx in chunks:
            at = slice(0, 1) if single else idx  # a slice sets one row in a third of a list index's time
            fetch = self._outputs_states if in_context else self._outputs
            out = self.session.run(
                [*fetch, self.embedding_output] if emb is not None else fetch,
                graph_inputs(encs, idx, lengths),
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
            if split is not None:  # the chunk's own rows: out, not probs and scores indexed again
                states = out[-1] if in_context else None
                self._read_chunk_clauses(
                    texts, encs, idx, out[0], out[len(self._outputs) - 1], states, split, vectors
                )
        return GraphRun(probs, dist, scores, encs, t1 - t0, time.perf_counter() - t1, emb, split, vectors)

    def _read_chunk_clauses(self, texts, encs, idx, probs, scores, states, split, vectors) -> None:
        """Each message of a chunk: its clauses to read (router.compound.clauses_of_batch) into ``split``
        and, with a clause reader, their vectors from the chunk's token ``states`` into ``vectors``.
        ``probs``, ``scores`` and ``states``: the chunk's rows, in ``idx`` order."""
        # plain floats and one argmax per chunk, not numpy scalars per message
        primaries = [self.labels[j] for j in probs.argmax(axis=1).tolist()]
        chunk = clauses_of_batch(self.manifest.compound, [texts[i] for i in idx], primaries, scores.tolist())
        for row, i in enumerate(idx):
            split[i] = clauses = chunk[row]
            if clauses and states is not None:
                n = len(encs[i])
                vectors[i] = clause_vectors(texts[i], clauses, encs[i].offsets, states[row, :n])

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

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        """Calibrated probabilities, shape (n, labels), columns in ``self.labels`` order."""
        return self.predict(texts)[0]

    def predict(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray | None]:
        """(probabilities, in-scope distances): the distances are None when the model has none."""
        check_texts(texts)
        if not texts:
            empty = np.zeros(0, dtype=np.float32) if self.distance_threshold is not None else None
            return np.zeros((0, len(self.labels)), dtype=np.float32), empty
        run = self._run(texts)
        return run.probabilities, run.distances

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
        run = self._run(texts, read_clauses=True)
        intents, clauses = self._intents(run)
        scores = run.intent_scores if run.intent_scores is not None else np.zeros((len(texts), 0), np.float32)
        return run.probabilities, run.distances, scores, intents, clauses

    def _intents(self, run: GraphRun) -> tuple[list[list[str]], list[list[dict]]]:
        """Each message's intents and the clauses read for them (router.compound.resolve_clauses), from a
        run that picked its clauses to read."""
        primaries = [self.labels[j] for j in run.probabilities.argmax(axis=1).tolist()]
        clause_probs = self._clause_probabilities(run) if run.clauses is not None else []
        return resolve_clauses(
            primaries, self.manifest.compound, run.intent_scores, run.clauses or [], clause_probs
        )

    def _clause_probabilities(self, run: GraphRun) -> list[list[dict[str, float]]]:
        """Each clause of ``run.clauses`` as label -> probability: read in context, from the vectors the
        run took from its token states (the manifest's clause reader), else classified alone in a second
        run over all of them."""
        if run.clause_vectors is not None:
            return read_in_context(run.clause_vectors, *self._reader_head, self.labels)
        flat = flat_clauses(run.clauses)
        probs = self._run(flat).probabilities if flat else np.zeros((0, len(self.labels)))
        return clause_probabilities(run.clauses, probs, self.labels)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The sentence embeddings of ``texts``: the graph's embedding output (training.export.example_embeddings), raw."""
        return self.embed_and_predict(texts)[0]

    def embed_and_predict(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(sentence embeddings, calibrated probabilities) of ``texts``, from one run of the graph."""
        if self.embedding_output is None:
            raise ModelError(
                f"{self.model_dir}: the graph has no sentence-embedding output; re-export the model"
            )
        check_texts(texts)
        if not texts:
            return np.zeros((0, 0), dtype=np.float32), np.zeros((0, len(self.labels)), dtype=np.float32)
        run = self._run(texts, embeddings=True)
        return np.asarray(run.embeddings, dtype=np.float32).reshape(len(texts), -1), run.probabilities

    # --------------------------------------------------------------------------------- classify
    def classify(self, text: str) -> Classification:
        return self.classify_batch([text])[0]

    def classify_batch(self, texts: Sequence[str], read_turns: bool = False) -> list[Classification]:
        """One Classification per text; with ``read_turns`` and a turn reader, each also says what kind of
        turn it is when it follows a request (``turn``, router.turn_reader)."""
        check_texts(texts)
        if not texts:
            return []
        reader = self.turn_reader if read_turns else None
        run = self._run(texts, read_clauses=True, embeddings=True if reader else None)
        turns = reader.read(np.stack(run.embeddings), run.probabilities) if reader else None
        t0 = time.perf_counter()
        intents, clauses = self._intents(run)
        inf_s = run.inference_s + time.perf_counter() - t0  # with the clauses' own run
        tok_ms, inf_ms = run.tokenize_s * 1000 / len(texts), inf_s * 1000 / len(texts)
        # plain floats, converted once per batch rather than as numpy scalars per message
        rows = run.probabilities.tolist()
        dists = run.distances.tolist() if run.distances is not None else None
        rows_scores = run.intent_scores.tolist() if run.intent_scores is not None else None
        emb = run.embeddings
        out = []
        for i, enc in enumerate(run.encodings):
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
                    turn=turns[i] if turns is not None else None,
                )
            )
        return out


_NO_CLAUSES = np.zeros((0, 1), dtype=np.float64)  # the clause vectors of a message without clauses


def _by_probability(item: tuple[str, float]) -> float:
    return -item[1]
