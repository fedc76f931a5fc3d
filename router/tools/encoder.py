"""A general-purpose sentence encoder for tool search, run by onnxruntime (no torch).

The routing model's own embedding is tuned to tell five intents apart and has lost much of the general
similarity that finding a tool takes (docs/tools.md). Tool search (``ToolStage.search``: ``tools search``,
``/v1/tools/search``, the MCP server) can fuse BM25 with an untuned encoder instead, exported once by
``intent-router tools encoder OUT`` (extra 'train'). ``route()`` never runs it: the tools of a Decision
stay lexical, so routing costs one graph run per message.

An encoder directory holds ``encoder.json`` (what it is, and the sha256 of its files), ``encoder.onnx``
(transformer, mean pooling and L2 normalisation; output ``sentence_embedding``) and ``tokenizer.json``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from router import env as envvars
from router.manifest import FileEntry, ModelError, verify_file

ENCODER_FILE = "encoder.json"
ENCODER_KIND = "intent-router/sentence-encoder"
BATCH = 32


class SentenceEncoder:
    """An exported encoder directory, its files checked against ``encoder.json``."""

    def __init__(self, directory: str | Path, threads: int | None = None) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.directory = Path(directory)
        spec = read_spec(self.directory)
        graph = verify_file(self.directory, FileEntry(**spec["files"]["graph"]))
        tok = verify_file(self.directory, FileEntry(**spec["files"]["tokenizer"]))
        self.base, self.dimension = spec["base"], int(spec["dimension"])
        # the cache key of the tools' embeddings: which encoder, down to its graph's bytes
        self.model_id = f"encoder-{spec['files']['graph']['sha256'][:16]}"
        self.tokenizer = Tokenizer.from_file(str(tok))
        self.tokenizer.enable_truncation(max_length=int(spec["max_seq_length"]))
        self.tokenizer.enable_padding()
        opts = ort.SessionOptions()
        threads = envvars.threads() if threads is None else envvars.check_threads(threads, "threads")
        if threads:  # as the routing model's: INTENT_ROUTER_THREADS, else onnxruntime's choice
            opts.intra_op_num_threads = threads
        self.session = ort.InferenceSession(str(graph), sess_options=opts, providers=["CPUExecutionProvider"])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised sentence embeddings of ``texts``, (len(texts), dimension)."""
        out = [np.zeros((0, self.dimension), dtype=np.float32)]
        for start in range(0, len(texts), BATCH):
            encodings = self.tokenizer.encode_batch(list(texts[start : start + BATCH]))
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            out.append(
                self.session.run(["sentence_embedding"], {"input_ids": ids, "attention_mask": mask})[0]
            )
        return np.concatenate(out).astype(np.float32, copy=False)


def read_spec(directory: Path) -> dict:
    """``encoder.json`` of ``directory``, checked to describe an exported sentence encoder."""
    path = Path(directory) / ENCODER_FILE
    if not path.is_file():
        raise ModelError(
            f"{directory} has no {ENCODER_FILE}: not a sentence encoder written by 'intent-router tools encoder'"
        )
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelError(f"{path} is not valid JSON: {e}") from None
    if not isinstance(spec, dict) or spec.get("kind") != ENCODER_KIND:
        raise ModelError(f"{path}: kind is not {ENCODER_KIND!r}")
    missing = [k for k in ("base", "dimension", "max_seq_length", "files") if k not in spec]
    files = spec.get("files") if isinstance(spec.get("files"), dict) else {}
    missing += [f"files.{k}" for k in ("graph", "tokenizer") if k not in files]
    if missing:
        raise ModelError(f"{path} lacks {', '.join(missing)}")
    return spec
