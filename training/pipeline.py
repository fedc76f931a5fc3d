"""The jobs behind the CLI, as library functions: ``build`` (train -> calibrate -> export -> turn reader
-> evaluate), ``evaluate_model`` (any model, written report), ``speed_benchmark``. Each writes its own result files;
``intent-router`` only parses arguments, calls one of these and prints.

    from training.pipeline import build
    manifest, report = build()          # the shipped recipe on data/, into models/intent-minilm
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from training.train_config import TrainConfig

Reporter = Callable[[str], None]
DEFAULT_OOS = Path("data/oos.jsonl")
DEFAULT_BUILD_REPORT = Path("reports/build")


def build(
    config: TrainConfig | None = None,
    out: str | Path | None = None,
    report_dir: str | Path | None = DEFAULT_BUILD_REPORT,
    oos: str | Path | None = DEFAULT_OOS,
    report: Reporter = print,
    show_progress: bool = True,
):
    """Train on ``config``'s files, calibrate on dev, export fp32 + int8 with the parity check (on the
    test and dev splits and ``oos``, each file also on its own) and, when there is a test split and eval's extras are installed, evaluate the
    int8 router on it (with ``oos`` when that file exists) into ``report_dir``.

    ``out`` defaults to models/<name> under the working directory (TrainConfig.output_dir). Returns
    ``(manifest, report or None)``; the build's wall time is recorded in the manifest."""
    from router.intents import CONTINUATION
    from router.manifest import load_manifest
    from training.corpus.preflight import check_build_files
    from training.export.exporter import export_model
    from training.export.options import ExportOptions
    from training.fit.train import train
    from training.fit.turn_reading import fit_turn_reader

    cfg = config or TrainConfig()
    out = Path(out) if out is not None else cfg.output_dir
    t0 = time.perf_counter()
    report("== check the corpus and the router config")
    labels = check_build_files(cfg)
    report(f"labels: {', '.join(labels)}")
    report("== train + calibrate")
    train(cfg, out, report=report, show_progress=show_progress)
    report("== export")
    oos = oos if oos is not None and Path(oos).is_file() else None
    parity_files = [f for f in (cfg.test_file, cfg.dev_file, oos, cfg.compound_test_file) if f is not None]
    export_model(out, ExportOptions.from_config(cfg), parity_file=parity_files, report=report)
    turns = cfg.conversation_train_file
    if turns is not None and Path(turns).is_file() and CONTINUATION in load_manifest(out).labels:
        report("== turn reader")
        fit_turn_reader(out, turns, cfg.train_file, seed=cfg.seed, report=report)
    seconds = time.perf_counter() - t0
    manifest = load_manifest(out)
    manifest.training["seconds"]["build_total"] = round(seconds, 2)
    manifest.save(out)
    report(f"train + calibrate + export: {seconds:.1f}s")
    if not (cfg.test_file and report_dir is not None and _has_eval_extras()):
        return manifest, None
    report("== evaluate")
    compound = (
        cfg.compound_test_file if cfg.compound_test_file and Path(cfg.compound_test_file).is_file() else None
    )
    conv = cfg.conversation_test_file
    conversations = conv if conv and Path(conv).is_file() else None
    result = evaluate_model(
        out,
        cfg.test_file,
        oos=oos,
        out=report_dir,
        compound=compound,
        conversations=conversations,
        config=cfg.router_config,
    )
    return manifest, result


def _has_eval_extras() -> bool:
    try:
        import matplotlib  # noqa: F401
        import sklearn  # noqa: F401
    except ImportError:
        return False
    return True


def evaluate_model(
    model: str | Path | None,
    data: str | Path,
    *,
    out: str | Path | None = None,
    backend: str = "auto",
    variant: str | None = None,
    verifier=None,
    **options,
) -> dict:
    """Open ``model`` (default: the default model directory) with ``backend`` (training.measure.backends.
    load_predictor), run eval's evaluator on ``data`` and, with ``out``, write eval.json, report.md and
    the plots there. ``options`` go to eval.metrics.evaluator.run_evaluation (oos, threshold, columns, ...)."""
    from eval.metrics.evaluator import run_evaluation
    from eval.reports.report_files import write_report
    from router.shipped import default_model_dir
    from training.measure.backends import load_predictor

    model = model or default_model_dir()
    predictor = load_predictor(model, backend=backend, variant=variant)
    result = run_evaluation(model, data, predictor=predictor, verifier=verifier, **options)
    if out is not None:
        write_report(result, out)
    return result


def speed_benchmark(
    model: str | Path | None,
    data: str | Path,
    *,
    limit: int = 500,
    include_torch: bool = True,
    reference: str | Path | None = None,
    batch_size: int = 64,
    threads: int | None = None,
    out: str | Path | None = None,
    report: Reporter = print,
    runs: int = 3,
    compare: Sequence[str | Path] = (),
) -> dict:
    """Time the exported router (int8, fp32) beside SetFit PyTorch and the int8 router of each model in
    ``compare``, on the first ``limit`` messages of ``data``; with ``out``, also write the results as JSON.

    The PyTorch row is ``reference``'s SetFit model (default: ``model``'s): its checkpoint, or, for an
    exported model that ships without one, the model read back from its graph (training.export.readback), so that
    the ratio to SetFit can be measured on any machine. A model whose graph runs int8 activations, or a
    student with fewer layers than its base model (the fast model), cannot be read back: name the default
    model as the reference."""
    from eval.bench.speed import run_speed_benchmark
    from eval.readers.loader import load_unlabeled
    from eval.reports.report_files import write_json
    from router.shipped import default_model_dir

    model = Path(model or default_model_dir())
    texts = load_unlabeled(data).texts[:limit]
    with tempfile.TemporaryDirectory(prefix="reference-") as workdir:
        torch_row = (
            _torch_reference(Path(reference) if reference is not None else model, Path(workdir), report)
            if include_torch
            else None
        )
        res = run_speed_benchmark(
            model,
            texts,
            reference=torch_row[:2] if torch_row else None,
            reference_model=torch_row[2] if torch_row else None,
            batch_size=batch_size,
            threads=threads,
            report=report,
            runs=runs,
            compare=compare,
        )
    if out is not None:
        write_json(res, out)
    return res


def _torch_reference(model: Path, workdir: Path, report: Reporter):
    """(name, loader, model id) of ``model``'s SetFit PyTorch predictor for the speed benchmark, or None
    when it has neither a checkpoint nor a graph a model can be read back from (said through ``report``)."""
    from router.manifest import ModelError, load_manifest
    from training.fit.checkpoints import checkpoint_of
    from training.fit.intent_model import IntentModel

    manifest = load_manifest(model)
    ckpt = checkpoint_of(model, manifest)
    name = "setfit pytorch predict_proba"
    if not ckpt.is_dir():
        from training.export.readback import recover_model

        report(f"no checkpoint at {ckpt}: reading the PyTorch model back from {model}'s graph")
        ckpt = workdir / "recovered"
        try:
            recover_model(model, ckpt, report=report)
        except ModelError as e:
            report(f"skipping setfit pytorch: {e}")
            return None
        name = "setfit pytorch (read back from the graph)"
    return name, lambda: IntentModel.load(ckpt, manifest=manifest), manifest.model_id
