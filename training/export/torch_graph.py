"""The exported graph as a torch module, and the fp32 ONNX file written from it.

The graph is transformer -> mean pooling -> L2 normalisation -> logistic head -> / T -> softmax, with
dynamic batch and sequence axes, exported with eager attention so that onnxruntime's optimizer fuses it
(training.export.recipes.fuse_transformer). Its further outputs, in this order: the in-scope distance,
the one-vs-rest intent scores and the clause reader's token states, when the model has them.
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from router.manifest import Manifest, ModelError
from training.export.recipes import fuse_transformer
from training.fit.head import softmax_weights
from training.fit.intent_model import IntentModel

OPSET = 17


def graph_module(intent_model: IntentModel, temperature: float):
    """The graph as a torch module: probabilities, plus the in-scope distance, the one-vs-rest intent
    scores and the clause reader's token states when the model has them (in that order)."""
    import torch
    from torch import nn

    model, scope, compound = intent_model.setfit, intent_model.scope, intent_model.compound
    body = model.model_body
    transformer = body[0].auto_model
    pooling = body[1]
    mode = getattr(pooling, "pooling_mode", None) or (
        "mean" if getattr(pooling, "pooling_mode_mean_tokens", True) else None
    )
    if mode not in ("mean", "mean_tokens"):
        raise ModelError(f"export supports mean pooling only, the body uses {mode!r}")
    normalize = any(type(m).__name__ == "Normalize" for m in body)
    coef, intercept = softmax_weights(model.model_head)

    reader_layers = list(compound.reader_layers or []) if compound is not None else []

    class IntentGraph(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = transformer
            self.register_buffer("weight", torch.from_numpy(coef))
            self.register_buffer("bias", torch.from_numpy(intercept))
            self.inv_temperature = float(1.0 / temperature)
            if scope is not None:  # Mahalanobis: ||x F - m F||^2, the smallest over in-scope classes
                self.register_buffer("factor", torch.from_numpy(scope.factor.astype(np.float32)))
                centres = (scope.means @ scope.factor).astype(np.float32)
                self.register_buffer("centres", torch.from_numpy(centres))
            if compound is not None:  # one logistic regression per intent: sigmoid(x W^T + b)
                self.register_buffer("ovr_weight", torch.from_numpy(compound.coef.astype(np.float32)))
                self.register_buffer("ovr_bias", torch.from_numpy(compound.intercept.astype(np.float32)))

        def forward(self, input_ids, attention_mask):
            run = self.transformer(
                input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=bool(reader_layers)
            )
            hidden = run.last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            emb = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            if normalize:
                emb = torch.nn.functional.normalize(emb, p=2.0, dim=1)
            logits = emb @ self.weight.T + self.bias
            out = [torch.softmax(logits * self.inv_temperature, dim=-1)]
            if scope is not None:
                proj = emb @ self.factor
                diff = proj.unsqueeze(1) - self.centres.unsqueeze(0)
                out.append((diff**2).sum(dim=-1).min(dim=1).values)
            if compound is not None:
                out.append(torch.sigmoid(emb @ self.ovr_weight.T + self.ovr_bias))
            if reader_layers:  # the clauses' tokens are pooled by the router (router.compound.clause_vectors)
                out.append(torch.cat([run.hidden_states[k] for k in reader_layers], dim=-1))
            return out[0] if len(out) == 1 else tuple(out)

    return IntentGraph().eval(), normalize


def graph_outputs(manifest: Manifest) -> list[str]:
    """The graph's output names, in the order graph_module returns them."""
    reader = manifest.compound.reader if manifest.compound else None
    return (
        ["probabilities"]
        + ([manifest.in_scope.output] if manifest.in_scope else [])
        + ([manifest.compound.output] if manifest.compound else [])
        + ([reader.output] if reader else [])
    )


def write_fp32(
    model: IntentModel, manifest: Manifest, plain: Path, fused_path: Path, report: Callable[[str], None]
) -> bool:
    """Export the graph to ``plain`` (unfused) and ``fused_path`` (attention fused, or a copy of the
    unfused graph for an architecture the optimizer does not know); returns the graph's normalize flag."""
    import torch

    transformer = model.setfit.model_body[0].auto_model
    graph, normalize = graph_module(model, manifest.calibration.temperature)
    outputs = graph_outputs(manifest)
    reader = manifest.compound.reader if manifest.compound else None
    tokenizer = model.setfit.model_body.tokenizer
    sample = tokenizer(["an example message", "two"], padding=True, return_tensors="pt")
    t0 = time.perf_counter()
    with torch.no_grad():
        torch.onnx.export(
            graph,
            (sample["input_ids"], sample["attention_mask"]),
            str(plain),
            input_names=["input_ids", "attention_mask"],
            output_names=outputs,
            dynamic_axes={
                "input_ids": {0: "batch", 1: "sequence"},
                "attention_mask": {0: "batch", 1: "sequence"},
                **{name: {0: "batch"} for name in outputs},
                **({reader.output: {0: "batch", 1: "sequence"}} if reader else {}),
            },
            opset_version=OPSET,
            dynamo=False,
        )
    cfg = transformer.config
    try:
        fused = fuse_transformer(plain, fused_path, cfg.num_attention_heads, cfg.hidden_size)
    except Exception as e:  # an architecture the optimizer does not know: ship the unfused graph
        report(f"attention fusion failed ({type(e).__name__}: {e}); keeping the unfused graph")
        fused = {}
        fused_path.write_bytes(plain.read_bytes())
    report(
        f"fp32 graph exported in {time.perf_counter() - t0:.1f}s ({fused_path.stat().st_size / 1e6:.1f} MB; "
        f"fused {fused or 'nothing'})"
    )
    return normalize


def onnx_feeds(tokenizer, texts: Sequence[str], max_length: int | None, batch: int) -> list[dict]:
    """Length-sorted batches of ``batch`` texts as ONNX feeds."""
    order = sorted(texts, key=len)
    out = []
    for s in range(0, len(order), batch):
        enc = tokenizer(
            order[s : s + batch], padding=True, truncation=True, max_length=max_length, return_tensors="np"
        )
        out.append(
            {
                "input_ids": enc["input_ids"].astype(np.int64),
                "attention_mask": enc["attention_mask"].astype(np.int64),
            }
        )
    return out


class _PreprocessingHint(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()


@contextlib.contextmanager
def known_export_noise_silenced():
    """The export's known, harmless chatter left out of the build's output: torch's notice of its legacy
    exporter and trace warnings (the parity check judges the graph), and onnxruntime's hint to pre-process
    a graph before quantization (its recipes here run on the exported graph as it is)."""
    hint = _PreprocessingHint()
    root = logging.getLogger()
    root.addFilter(hint)
    try:
        with warnings.catch_warnings():
            # torch's notices about its legacy exporter, not every DeprecationWarning raised meanwhile
            for notice in (r"You are using the legacy TorchScript", r"The feature will be removed"):
                warnings.filterwarnings("ignore", message=notice, category=DeprecationWarning)
            warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.onnx")
            warnings.filterwarnings("ignore", message=r"Converting a tensor to a Python")
            yield
    finally:
        root.removeFilter(hint)
