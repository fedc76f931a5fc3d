"""The int8 variant: the export's recipes tried fastest first, the first that passes parity with margin
kept. A recipe that passes the gates without margin is remembered; when none passes with margin, the first
such recipe's graph is kept. The -keepK recipes rank the encoder nodes once, and the smoothed recipe
measures its MatMul inputs, on the same calibration text.
"""

from __future__ import annotations

import os
import random
import shutil
import time
from collections.abc import Sequence

from router.manifest import Manifest, Variant
from training.export.export_run import PLAIN_FP32, VARIANT_FILES, ExportRun, train_file
from training.export.half_storage import HALF_INT8, store_half
from training.export.parity import PARITY_BATCH, margin_shortfalls
from training.export.recipes import RECIPES, kept_count, quantize, rank_sensitivity
from training.export.torch_graph import onnx_feeds

CALIBRATION_TEXTS = 256  # training texts for the -keepK recipes' sensitivity pass and for smoothing


class Int8Builder:
    """Builds and checks the int8 graph of one recipe at a time, ranking the nodes on first need."""

    def __init__(self, run: ExportRun, calibration_texts: Sequence[str] | None):
        self.run = run
        self.calib = list(calibration_texts or _calibration_texts(run.manifest, run.parity.texts))
        self.ranking: list[tuple[str, float]] = []
        self._feeds: list[dict] = []

    @property
    def feeds(self) -> list[dict]:
        """The calibration texts as onnx feeds, tokenized on first need."""
        if not self._feeds:
            tokenizer = self.run.model.setfit.model_body.tokenizer
            self._feeds = onnx_feeds(tokenizer, self.calib, self.run.manifest.max_seq_length, PARITY_BATCH)
        return self._feeds

    def _rank(self) -> None:
        t0 = time.perf_counter()
        self.ranking = rank_sensitivity(
            self.run.path("fp32"), self.feeds, portable=self.run.options.portable_int8
        )
        self.run.report(
            f"sensitivity of {len(self.ranking)} encoder nodes on {len(self.calib)} texts in "
            f"{time.perf_counter() - t0:.0f}s; most sensitive: "
            + ", ".join(f"{n} {s:.3f}" for n, s in self.ranking[:6])
        )

    def build(self, recipe: str) -> tuple[Variant, list[str]]:
        """Write ``recipe``'s graph, register it and return it with its parity failures."""
        run, options = self.run, self.run.options
        if kept_count(recipe) and not self.ranking:
            self._rank()
        t0 = time.perf_counter()
        keep = self.ranking[: kept_count(recipe)]
        dst = run.model_dir / VARIANT_FILES["int8"]
        description = quantize(
            recipe,
            run.path("fp32"),
            run.model_dir / PLAIN_FP32,
            dst,
            keep=[n for n, _ in keep],
            portable=options.portable_int8,
            kept_fp32=options.int8_kept_fp32,
            calibration=self.feeds if RECIPES[recipe].smoothed else (),
        )
        if options.int8_half_weights:
            store_half(dst, dst)
            description += HALF_INT8
        run.report(
            f"int8 {recipe} quantized in {time.perf_counter() - t0:.1f}s ({dst.stat().st_size / 1e6:.1f} MB)"
        )
        spec = run.register("int8", recipe, description)
        spec.kept_nodes = dict(keep)
        spec.calibration_texts = len(self.calib) if keep or RECIPES[recipe].smoothed else None
        return spec, run.check("int8")


def best_int8(run: ExportRun, calibration_texts: Sequence[str] | None = None) -> list[str]:
    """Try the recipes in turn; the int8 variant left registered is the first that passes with margin
    (without ``int8_prefer_margin``: the first that passes), else the first that passes (its graph and
    entry set aside when it was checked, and put back), else the last tried. Returns the export's int8 failures; the variant's ``rejected`` lists why the others
    were passed over."""
    builder = Int8Builder(run, calibration_texts)
    rejected: list[str] = []
    fallback = None  # the first recipe that passes the gates but not with margin, set aside
    aside = run.path("int8").with_name(VARIANT_FILES["int8"] + ".aside")
    try:
        for recipe in run.options.export_recipes:
            spec, failed = builder.build(recipe)
            if not failed:
                short = margin_shortfalls(spec.parity) if run.options.int8_prefer_margin else []
                if not short:
                    break
                failed = [f"int8 ({recipe}) passes, without margin: {', '.join(short)}"]
                if fallback is None:
                    shutil.copyfile(run.path("int8"), aside)
                    fallback = (recipe, spec.model_copy(deep=True))
            rejected += failed
            run.report(f"int8 {recipe} rejected: {'; '.join(failed)}")
        else:  # no recipe passed with margin: ``failed`` is the last recipe's
            if fallback is not None:
                kept, spec = fallback
                run.report(f"int8: no recipe passes with margin; keeping {kept}, the first that passes")
                os.replace(aside, run.path("int8"))  # the same bytes its entry's sha256 covers
                run.manifest.export.variants["int8"] = spec
                failed = []
                rejected = [r for r in rejected if not r.startswith(f"int8 ({kept})")]
            spec.rejected = [r for r in rejected if r not in failed]
            run.manifest.save(run.model_dir)
            return failed
    finally:
        aside.unlink(missing_ok=True)
    spec.rejected = list(rejected)
    return []


def _calibration_texts(manifest: Manifest, fallback: Sequence[str]) -> list[str]:
    """CALIBRATION_TEXTS texts (seeded sample) of the training file the manifest names, if it is here."""
    from eval.readers.loader import load_unlabeled

    train = train_file(manifest)
    texts = list(load_unlabeled(train).texts) if train is not None else list(fallback)
    random.Random(0).shuffle(texts)
    return texts[:CALIBRATION_TEXTS]
