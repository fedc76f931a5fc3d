"""Export an untuned sentence-transformers encoder for tool search (router.tools.encoder).

The graph is transformer -> mean pooling -> L2 normalisation, fp32 with the attention fused by
onnxruntime's optimizer (the int8 recipes are tuned to the routing model, not to this one). The export is
checked against sentence-transformers on a few texts before ``encoder.json`` is written: a directory
without it is not an encoder.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from router.manifest import ModelError, file_entry
from router.tools.encoder import ENCODER_FILE, ENCODER_KIND, SentenceEncoder
from training.export.recipes import fuse_transformer
from training.export.torch_graph import OPSET

PARITY_TEXTS = (
    "will it rain in Lisbon tomorrow",
    "Get the weather forecast for a city",
    "open a ticket for the failing deploy and page whoever is on call",
    "短い文",
)
MIN_COSINE = 0.999


def pooled_module(body):
    """transformer -> mean pooling -> L2 normalisation of a sentence-transformers ``body``."""
    import torch
    from torch import nn

    pooling = body[1]
    mode = getattr(pooling, "pooling_mode", None) or (
        "mean" if getattr(pooling, "pooling_mode_mean_tokens", False) else None
    )
    if mode not in ("mean", "mean_tokens"):
        raise ModelError(f"the tool-search encoder must use mean pooling, this one uses {mode!r}")
    transformer = body[0].auto_model
    if hasattr(transformer, "set_attn_implementation"):  # eager attention: the pattern ORT fuses
        transformer.set_attn_implementation("eager")

    class Pooled(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids, attention_mask):
            hidden = self.transformer(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            emb = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            return torch.nn.functional.normalize(emb, p=2.0, dim=1)

    return Pooled().eval()


def export_sentence_encoder(base: str, out: Path, report: Callable[[str], None] = print) -> dict:
    """Write the encoder directory ``out`` from ``base`` (a local path or a hub name); returns its spec."""
    import torch
    from sentence_transformers import SentenceTransformer

    from training.train_config import resolve_base_model

    body = SentenceTransformer(resolve_base_model(base), device="cpu")
    module = pooled_module(body)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / ENCODER_FILE).unlink(missing_ok=True)  # the directory is no encoder until parity passed
    sample = body.tokenizer(["an example request", "two"], padding=True, return_tensors="pt")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "plain.onnx"
        with torch.no_grad():
            torch.onnx.export(
                module,
                (sample["input_ids"], sample["attention_mask"]),
                str(plain),
                input_names=["input_ids", "attention_mask"],
                output_names=["sentence_embedding"],
                dynamic_axes={
                    "input_ids": {0: "batch", 1: "sequence"},
                    "attention_mask": {0: "batch", 1: "sequence"},
                    "sentence_embedding": {0: "batch"},
                },
                opset_version=OPSET,
                dynamo=False,
            )
        cfg = module.transformer.config
        try:
            fused = fuse_transformer(plain, out / "encoder.onnx", cfg.num_attention_heads, cfg.hidden_size)
            report(f"fused {fused or 'nothing'}")
        except Exception as e:  # an architecture the optimizer does not know: the unfused graph
            report(f"attention fusion failed ({type(e).__name__}: {e}); keeping the unfused graph")
            shutil.copyfile(plain, out / "encoder.onnx")
    body.tokenizer.backend_tokenizer.save(str(out / "tokenizer.json"))
    report(f"graph exported in {time.perf_counter() - t0:.1f}s")
    spec = {
        "kind": ENCODER_KIND,
        "base": base,
        "dimension": int(_dimension(body)),
        "max_seq_length": int(body.max_seq_length),
        "created_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "files": {
            "graph": file_entry(out, "encoder.onnx").model_dump(),
            "tokenizer": file_entry(out, "tokenizer.json").model_dump(),
        },
    }
    spec["parity_min_cosine"] = _parity(body, out, spec)
    (out / ENCODER_FILE).write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
    report(f"encoder written to {out} (parity: cosine {spec['parity_min_cosine']:.5f} at least)")
    return spec


def _parity(body, out: Path, spec: dict) -> float:
    """The smallest cosine between the graph's and sentence-transformers' embeddings of PARITY_TEXTS;
    below MIN_COSINE the export is refused."""
    (out / ENCODER_FILE).write_text(json.dumps(spec), encoding="utf-8")
    try:
        got = SentenceEncoder(out).embed(list(PARITY_TEXTS))
    finally:
        (out / ENCODER_FILE).unlink()
    want = body.encode(list(PARITY_TEXTS), normalize_embeddings=True)
    worst = float(np.min(np.sum(got * want, axis=1)))
    if worst < MIN_COSINE:
        raise ModelError(
            f"the exported encoder differs from {spec['base']}: cosine {worst:.5f} < {MIN_COSINE}"
        )
    return round(worst, 6)


def _dimension(body) -> int:
    get = getattr(body, "get_embedding_dimension", None) or body.get_sentence_embedding_dimension
    return get()
