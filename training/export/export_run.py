"""One export in progress (ExportRun), shared by the exporter and the int8 recipe search: the files a
model's export writes, the manifest it fills, and the parity gate each variant passes through."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from router.manifest import Export, FileEntry, Manifest, Variant, file_entry
from router.model_card import graph_scope_metadata, stamp_graph
from training.export.options import ExportOptions
from training.export.parity import ParityText, check_parity
from training.export.torch_graph import OPSET
from training.fit.intent_model import IntentModel

TOKENIZER_FILE = "tokenizer.json"
# fp16: the fp32 graph with its weights stored in half precision (training.export.half_storage), fp32 compute
VARIANT_FILES = {"fp32": "model.fp32.onnx", "fp16": "model.fp16.onnx", "int8": "model.int8.onnx"}
CLAUSE_READER_FILE = "clause_reader.npz"  # the in-context clause head (router.manifest.ClauseReader)
PLAIN_FP32 = "model.fp32.plain.onnx"  # unfused, the input of the nbits recipe; removed after export


@dataclass
class ExportRun:
    """One export in progress: the model, its manifest and the parity reference every variant is checked
    against. ``register`` writes a variant into the manifest; ``check`` gates it."""

    model_dir: Path
    manifest: Manifest
    model: IntentModel
    options: ExportOptions
    parity: ParityText
    tokenizer_entry: FileEntry
    report: Callable[[str], None]
    ref: tuple | None = None  # the PyTorch model's outputs on the parity text (parity.reference)
    failures: list[str] = field(default_factory=list)

    def path(self, variant: str) -> Path:
        return self.model_dir / VARIANT_FILES[variant]

    def register(self, v: str, recipe: str | None = None, description: str | None = None) -> Variant:
        # the graph carries what it depends on, inside the bytes its sha256 covers
        stamp_graph(
            self.path(v),
            labels=self.manifest.labels,
            max_seq_length=self.manifest.max_seq_length,
            temperature=self.manifest.calibration.temperature,
            extra=graph_scope_metadata(self.manifest),
        )
        spec = Variant(
            file=file_entry(self.model_dir, VARIANT_FILES[v]), quantization=description, recipe=recipe
        )
        old = self.manifest.export.variants if self.manifest.export else {}
        self.manifest.export = Export(
            opset=OPSET,
            tokenizer=self.tokenizer_entry,
            variants={**old, v: spec},
            default_variant=next(
                d for d in ("int8", "fp16", "fp32", v) if d in self.options.variants or d == v
            ),
        )
        self.manifest.save(self.model_dir)
        return spec

    def check(self, v: str) -> list[str]:
        return check_parity(
            self.model, self.model_dir, self.manifest, self.parity, self.report, [v], self.ref
        )


def train_file(manifest: Manifest) -> Path | None:
    """The training file the manifest names, if it is here."""
    files = (manifest.training.get("data") or {}).get("files") or {}
    return next((Path(f) for f in files if "train" in Path(f).stem and Path(f).is_file()), None)
