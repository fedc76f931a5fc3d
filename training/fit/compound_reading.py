"""IntentModel's compound requests: fitting the compound head (training.fit.compound_head) and its threshold
on the model's body and softmax head, reading a message's clauses alone or, with a clause reader, in
context, and predicting intents as the exported graph and the router give them.

``CompoundReading`` is a part of IntentModel (training.fit.intent_model), which supplies ``config``,
``setfit``, ``labels``, ``encode``, ``predict_proba``, ``temperature``, ``scope`` and ``compound``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from eval.metrics.calibration import softmax
from router.clauses import split_clauses
from router.compound import best_by_label, classify_clauses, clause_vectors, read_in_context, resolve_batch
from router.intents import OUT_OF_SCOPE, intents_of
from training.fit.compound_head import CompoundHead, fit_clause_reader

Reporter = Callable[[str], None]


class CompoundReading:
    """The compound head and the clause reading of an IntentModel."""

    def fit_compound_head(
        self,
        texts: Sequence[str],
        labels: Sequence[str],
        secondary: Sequence[str | None],
        emb: np.ndarray | None = None,
        report: Reporter = print,
    ) -> CompoundHead:
        """Fit the compound head (training.fit.compound_head) on the current body and softmax head, with the
        in-context clause reader when the config names its layers; ``calibrate`` then fits its threshold.
        Part of ``fit``; callable on its own to refit the head of a loaded checkpoint."""
        config = self.config
        t0 = time.perf_counter()
        texts = list(texts)
        emb = self.encode(texts) if emb is None else emb
        split = [split_clauses(t) for t in texts]
        clause_probs = classify_clauses(split, self.labels, self.predict_proba)
        reader = None
        if config.clause_context_layers:  # the stacker learns from the reader's cross-fitted clauses
            layers = list(config.clause_context_layers)
            check_reader_layers(layers, len(self.setfit.model_body[0].auto_model.encoder.layer))
            targets = [np.array([[r[k] for k in self.labels] for r in rows]) for rows in clause_probs]
            coef, intercept, crossed = fit_clause_reader(
                self.clause_vectors(texts, split, layers),
                targets,
                l2=config.clause_reader_l2,
                seed=config.seed,
            )
            clause_probs = [[dict(zip(self.labels, map(float, p), strict=True)) for p in m] for m in crossed]
            reader = (layers, coef, intercept)
        clause_best = [best_by_label(rows) for rows in clause_probs]
        order = [*(config.intents or []), *sorted(intents_of(self.labels))]
        head = CompoundHead.fit(
            emb,
            _label_sets(labels, secondary),
            clause_best,
            list(dict.fromkeys(i for i in order if i in self.labels)),
            c=config.compound_head_c,
            seed=config.seed,
        )
        if reader is not None:
            head.reader_layers, head.reader_coef, head.reader_intercept = reader
        self.compound = head
        report(
            f"compound head fitted on {sum(map(bool, secondary))} two-intent rows"
            + (f", clauses read in context from layers {reader[0]}" if reader else "")
            + f": {time.perf_counter() - t0:.1f}s"
        )
        return head

    def _calibrate_compound(
        self,
        texts: Sequence[str],
        labels: Sequence[str],
        secondary: Sequence[str | None],
        emb: np.ndarray,
        logits: np.ndarray,
    ) -> None:
        """The compound head's threshold on held-out rows (part of ``calibrate``), given their embeddings
        and head logits."""
        primaries = [self.labels[i] for i in logits.argmax(axis=1)]
        self.compound.fit_threshold(
            primaries,
            self.compound.scores(emb),
            self.clause_probabilities(texts),
            _label_sets(labels, secondary),
            max_single_compound=self.config.compound_max_single,
        )

    @property
    def compound_spec(self):
        """The manifest's ``compound`` section for this model (None without a fitted compound head)."""
        head = self.compound
        return head.spec() if head is not None and head.threshold is not None else None

    @property
    def compound_intents(self) -> list[str]:
        return list(self.compound.intents) if self.compound is not None else []

    def clause_probabilities(self, texts: Sequence[str]) -> list[list[dict[str, float]]]:
        """Per message, each of its clauses (router.clauses) as label -> probability, read as the router
        reads them: alone (calibrated) or, with a clause reader, in context."""
        texts = list(texts)
        return self._read_clauses(texts, [split_clauses(t) for t in texts])

    def _read_clauses(
        self, texts: Sequence[str], split: Sequence[Sequence[str]]
    ) -> list[list[dict[str, float]]]:
        head = self.compound
        if head is None or not head.reader_layers:
            return classify_clauses(split, self.labels, self.predict_proba)
        vectors = self.clause_vectors(texts, split, head.reader_layers)
        return read_in_context(vectors, head.reader_coef, head.reader_intercept, self.labels)

    def clause_vectors(
        self,
        texts: Sequence[str],
        split: Sequence[Sequence[str]],
        layers: Sequence[int],
        batch_size: int = 64,
    ) -> list[np.ndarray]:
        """Per message, its clauses' vectors (router.compound.clause_vectors) from the token states of encoder
        ``layers`` in one run over the whole message, as the exported graph's ``clause_states`` gives them."""
        import torch

        body = self.setfit.model_body
        transformer, tokenizer = body[0].auto_model, body.tokenizer
        out = [np.zeros((0, 1), np.float32) for _ in texts]
        # messages of similar length batched together: less padding to run through the body
        todo = sorted((i for i, clauses in enumerate(split) if clauses), key=lambda i: len(texts[i]))
        was_training = transformer.training
        transformer.eval()
        try:
            with torch.inference_mode():
                for s in range(0, len(todo), batch_size):
                    rows = todo[s : s + batch_size]
                    enc = tokenizer(
                        [texts[i] for i in rows],
                        padding=True,
                        truncation=True,
                        max_length=body.max_seq_length,
                        return_offsets_mapping=True,
                        return_tensors="pt",
                    )
                    offsets = enc.pop("offset_mapping").numpy()
                    hidden = transformer(**enc, output_hidden_states=True).hidden_states
                    states = torch.cat([hidden[k] for k in layers], dim=-1).float().numpy()
                    lengths = enc["attention_mask"].sum(dim=1).tolist()
                    for r, i in enumerate(rows):
                        n = int(lengths[r])
                        out[i] = clause_vectors(texts[i], split[i], offsets[r, :n], states[r, :n])
        finally:
            transformer.train(was_training)
        return out

    def predict_compound(
        self, texts: Sequence[str]
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, list[list[str]], list[list[dict]]]:
        """(calibrated probabilities, in-scope distances or None, one-vs-rest intent scores, intents by
        router.compound.resolve_intents, clauses), as the exported graph and the router give them."""
        texts = list(texts)
        if not texts:
            k = len(self.compound_intents)
            return (
                np.zeros((0, len(self.labels))),
                (None if self.scope is None else np.zeros(0)),
                np.zeros((0, k)),
                [],
                [],
            )
        emb = self.encode(texts)
        probs = softmax(self._head_logits(emb), self.temperature)
        dist = self.scope.distance(emb) if self.scope is not None else None
        scores = self.compound.scores(emb) if self.compound is not None else None
        primaries = [self.labels[i] for i in probs.argmax(axis=1)]
        intents, clauses = resolve_batch(
            texts, primaries, self.compound_spec, scores, lambda split: self._read_clauses(texts, split)
        )
        return probs, dist, scores if scores is not None else np.zeros((len(texts), 0)), intents, clauses


def check_reader_layers(layers: Sequence[int], n: int) -> None:
    """The clause reader's layers exist in a body of ``n`` encoder layers (0 = the embeddings)."""
    bad = [k for k in layers if not 0 <= k <= n] or ([] if len(set(layers)) == len(layers) else list(layers))
    if bad or not layers:
        raise ValueError(
            f"clause_context_layers must be distinct layers in 0..{n} of this body, got {list(layers)}"
        )


def _label_sets(labels: Sequence[str], secondary: Sequence[str | None]) -> list[list[str]]:
    """Intents of each row for the one-vs-rest head: [] for out of scope, one or two intents otherwise."""
    return [
        [] if l == OUT_OF_SCOPE else [l] + ([s] if s else []) for l, s in zip(labels, secondary, strict=True)
    ]
