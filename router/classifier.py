"""ONNX Runtime intent classifier over an exported model directory (no torch)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from router.manifest import Manifest, ModelError, load_manifest, verify_file


@dataclass(frozen=True)
class Classification:
    label: str
    confidence: float
    ranking: list[tuple[str, float]]
    tokenize_ms: float = 0.0
    inference_ms: float = 0.0
    truncated: bool = False
    num_tokens: int = 0


@dataclass
class _Batch:
    input_ids: np.ndarray
    attention_mask: np.ndarray
    truncated: list[bool] = field(default_factory=list)


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
    ) -> None:
        self.model_dir = Path(model_dir)
        self.manifest = manifest or load_manifest(self.model_dir)
        export = self.manifest.export
        if export is None:
            raise ModelError(f"{self.model_dir}: the manifest has no export section; run 'intent-router export' first")
        self.variant = variant or export.default_variant
        if self.variant not in export.variants:
            raise ModelError(f"{self.model_dir}: no '{self.variant}' graph (has: {', '.join(export.variants)})")
        spec = export.variants[self.variant]
        if require_parity and spec.parity is not None and not spec.parity.passed:
            raise ModelError(f"{self.model_dir}: the {self.variant} graph failed its parity check at export; re-export it")
        graph_path = verify_file(self.model_dir, spec.file)
        tok_path = verify_file(self.model_dir, export.tokenizer)

        self.labels: list[str] = list(self.manifest.labels)
        self.max_length = self.manifest.max_seq_length
        self.tokenizer = Tokenizer.from_file(str(tok_path))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=self.max_length)

        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        threads = intra_op_threads if intra_op_threads is not None else int(os.environ.get("INTENT_ROUTER_THREADS", "0"))
        if threads:
            opts.intra_op_num_threads = threads
        self.session = ort.InferenceSession(str(graph_path), sess_options=opts, providers=["CPUExecutionProvider"])
        outputs = self.session.get_outputs()
        if outputs[0].shape[-1] not in (len(self.labels), None) and isinstance(outputs[0].shape[-1], int):
            raise ModelError(f"graph has {outputs[0].shape[-1]} outputs but the manifest lists {len(self.labels)} labels")
        self._output = export.output

    @property
    def model_id(self) -> str:
        return f"{self.manifest.model_id}/{self.variant}"

    # ----------------------------------------------------------------------------------- encode
    def _encode(self, texts: Sequence[str]) -> _Batch:
        encs = self.tokenizer.encode_batch(list(texts)) if len(texts) > 1 else [self.tokenizer.encode(texts[0])]
        width = max(len(e.ids) for e in encs)
        ids = np.zeros((len(encs), width), dtype=np.int64)
        mask = np.zeros((len(encs), width), dtype=np.int64)
        truncated = []
        for i, e in enumerate(encs):
            n = len(e.ids)
            ids[i, :n] = e.ids
            mask[i, :n] = e.attention_mask
            truncated.append(bool(e.overflowing))
        return _Batch(ids, mask, truncated)

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        """Calibrated probabilities, shape (n, labels), columns in ``self.labels`` order."""
        _check_texts(texts)
        if not texts:
            return np.zeros((0, len(self.labels)), dtype=np.float32)
        b = self._encode(texts)
        return self.session.run([self._output], {"input_ids": b.input_ids, "attention_mask": b.attention_mask})[0]

    # --------------------------------------------------------------------------------- classify
    def classify(self, text: str) -> Classification:
        return self.classify_batch([text])[0]

    def classify_batch(self, texts: Sequence[str]) -> list[Classification]:
        _check_texts(texts)
        if not texts:
            return []
        t0 = time.perf_counter()
        b = self._encode(texts)
        t1 = time.perf_counter()
        probs = self.session.run([self._output], {"input_ids": b.input_ids, "attention_mask": b.attention_mask})[0]
        t2 = time.perf_counter()
        tok_ms, inf_ms = (t1 - t0) * 1000 / len(texts), (t2 - t1) * 1000 / len(texts)
        out = []
        for i, row in enumerate(probs):
            order = np.argsort(-row)
            ranking = [(self.labels[j], float(row[j])) for j in order]
            out.append(Classification(
                label=ranking[0][0], confidence=ranking[0][1], ranking=ranking, tokenize_ms=tok_ms,
                inference_ms=inf_ms, truncated=b.truncated[i], num_tokens=int(b.attention_mask[i].sum()),
            ))
        return out


def _check_texts(texts: Sequence[str]) -> None:
    if isinstance(texts, str):
        raise TypeError("expected a sequence of strings, got one str: use classify(text) for a single message")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"message {i} is {type(t).__name__}, expected str")
