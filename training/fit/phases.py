"""The phases of fitting IntentModel's SetFit model: the base model with a fresh head (after seeding), the
contrastive fine-tuning of its body (or a teacher's body loaded instead), the optional distillation into
fewer encoder layers or, from a teacher of another encoder, into the base model's body, the optional label
phase, and the trainer whose classifier step then fits the logistic head.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence

from router.clauses import split_clauses
from router.intents import OUT_OF_SCOPE
from training.fit.checkpoints import load_body
from training.fit.compound_reading import check_reader_layers
from training.libraries import quiet_libraries, set_seed
from training.train_config import TrainConfig, resolve_base_model

Reporter = Callable[[str], None]


def base_model(config: TrainConfig, labels: Sequence[str], report: Reporter):
    """The config's base model with an unfitted logistic head for ``labels``, every generator seeded first;
    and the head's parameters."""
    from setfit import SetFitModel

    quiet_libraries()

    set_seed(config.seed)
    base = resolve_base_model(config.base_model)
    report(f"base model: {base}")
    head_params = {"C": config.head_c, "max_iter": config.head_max_iter}
    model = SetFitModel.from_pretrained(base, labels=labels, head_params=head_params)
    model.model_body.max_seq_length = config.max_seq_length
    return model, head_params


def check_layer_choices(config: TrainConfig, model) -> None:
    """The student's layers and feed-forward width and the clause reader's layers fit ``model``'s body:
    checked before the contrastive phase, not after it."""
    if config.distil_layers is not None:
        from training.distil.shallow import check_ffn_width, check_layers

        check_layers(config.distil_layers, len(model.model_body[0].auto_model.encoder.layer))
        if config.distil_ffn_width is not None:
            check_ffn_width(config.distil_ffn_width, model.model_body[0].auto_model.config.intermediate_size)
    if config.clause_context_layers is not None:  # the same, for the body the heads will sit on
        depth = len(config.distil_layers or model.model_body[0].auto_model.encoder.layer)
        check_reader_layers(config.clause_context_layers, depth)


def training_arguments(config: TrainConfig, output_dir: str):
    """SetFit's arguments for both the contrastive phase and the head, from the config."""
    from setfit import TrainingArguments

    return TrainingArguments(
        output_dir=output_dir,
        batch_size=config.batch_size,
        num_epochs=config.num_epochs,
        max_steps=config.max_steps,
        num_iterations=config.num_iterations,
        sampling_strategy=config.sampling_strategy,
        body_learning_rate=config.body_learning_rate,
        warmup_proportion=config.warmup_proportion,
        max_length=config.max_seq_length,
        seed=config.seed,
        report_to="none",
        save_strategy="no",
        logging_strategy="no",
        show_progress_bar=False,
    )


def contrastive_phase(
    model,
    ds,
    args,
    config: TrainConfig,
    *,
    teacher,
    recovery: dict | None,
    workdir,
    report: Reporter,
    show_progress: bool,
):
    """Fine-tune ``model``'s body on contrastive pairs of ``ds``'s rows (``contrastive_rows``), or, given a
    ``teacher`` body (``recovery``: training.export.recover's note when it came from a graph), load that instead
    and clean up ``workdir`` (a student of another encoder, distilled later, skips both). Reports the
    phase; returns the trainer, whose classifier step fits the head, and the phase's seconds."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from setfit import Trainer
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    distilled = teacher is not None or config.teacher_targets is not None  # no contrastive phase

    with Progress(
        TextColumn("contrastive steps"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        disable=not show_progress or distilled,
    ) as progress:
        task = progress.add_task("train", total=None)
        trainer = Trainer(
            model=model,
            args=args,
            train_dataset=ds,
            callbacks=[_progress_callback(progress, task, report, config.batch_size)],
        )
        trainer.st_trainer.remove_callback(ProgressCallback)  # rich bar / our lines instead of tqdm
        trainer.st_trainer.remove_callback(PrinterCallback)
        if config.length_buckets:
            from training.fit.batching import LengthBucketBatchSampler

            trainer.st_trainer.args.batch_sampler = LengthBucketBatchSampler
        t0 = time.perf_counter()
        body_ds = contrastive_rows(ds, config.contrastive_oos_rows, config.seed)
        if not distilled:
            trainer.train_embeddings(*trainer.dataset_to_parameters(body_ds), args=args)
        elif config.distil_layers is not None:  # the set-up above runs either way: models/intent-minilm-fast
            load_body(model.model_body, teacher)  # was built through it
            workdir.cleanup()
        body_seconds = time.perf_counter() - t0
    if not distilled:
        report(f"contrastive phase: {body_seconds:.1f}s")
    elif config.distil_layers is not None:
        report(
            f"teacher's body loaded from {config.teacher if recovery else teacher}"
            f"{' (recovered from its graph)' if recovery else ''}: {body_seconds:.1f}s"
        )
    return trainer, body_seconds


def distil_phase(
    model,
    config: TrainConfig,
    texts: Sequence[str],
    labels: Mapping[str, str],
    head_params: dict,
    report: Reporter,
    show_progress: bool,
) -> float:
    """Replace ``model``'s body by a student distilled into the config's encoder layers (training.distil.shallow)
    on ``texts`` and their clauses, ``labels`` giving the single-intent messages' labels for the teacher's
    head. Returns its seconds."""
    from training.distil.shallow import distil_body

    t0 = time.perf_counter()
    model.model_body = distil_body(
        model.model_body,
        config.distil_layers,
        hidden_weight=config.distil_hidden_weight,
        clause_weight=config.distil_clause_weight,
        ffn_width=config.distil_ffn_width,
        **_distil_arguments(config, texts, labels, head_params, report, show_progress),
    )
    seconds = time.perf_counter() - t0
    report(f"distilled into encoder layers {config.distil_layers}: {seconds:.1f}s")
    return seconds


def distil_encoder_phase(
    model,
    config: TrainConfig,
    teacher,
    texts: Sequence[str],
    labels: Mapping[str, str],
    head_params: dict,
    report: Reporter,
    show_progress: bool,
) -> float:
    """Train ``model``'s body (the config's base model, any encoder) to match a teacher's
    (training.distil.encoder) on ``texts`` and their clauses, ``labels`` giving the single-intent
    messages' labels for the teacher's head. The teacher's targets come from the ``teacher`` body's folder
    (and are written to the config's ``teacher_targets`` when it names a file) or, without ``teacher``,
    from that file (training.distil.teacher_targets). Returns its seconds."""
    from training.distil.encoder import distil_encoder
    from training.distil.teacher_targets import TeacherTargets

    t0 = time.perf_counter()
    arguments = _distil_arguments(config, texts, labels, head_params, report, show_progress)
    texts = list(dict.fromkeys(arguments.pop("texts")))
    if teacher is not None:
        targets = _teacher_targets(config, teacher, texts, report)
        source = str(config.teacher)
    else:
        stored = TeacherTargets(config.teacher_targets)
        targets = stored.lookup(texts)
        source = f"the targets in {config.teacher_targets}"
        report(
            f"teacher targets for {len(texts)} texts read from {config.teacher_targets} (teacher "
            f"{stored.teacher.get('path', 'unnamed')}): {time.perf_counter() - t0:.0f}s"
        )
    distil_encoder(
        model.model_body,
        texts,
        targets,
        similarity_weight=config.distil_similarity_weight,
        clause_weight=config.distil_clause_weight,
        **arguments,
    )
    seconds = time.perf_counter() - t0
    report(f"distilled {source} into {config.base_model}'s body: {seconds:.1f}s")
    return seconds


def label_phase(
    model,
    config: TrainConfig,
    texts: Sequence[str],
    labels: Sequence[str],
    single: Sequence[int],
    head_params: dict,
    report: Reporter,
    show_progress: bool,
) -> float:
    """With ``label_epochs``, tune ``model``'s body on the labels of the single-intent rows (their indices
    ``single`` into ``texts``; training.distil.labels). Returns its seconds (0 without it)."""
    if not config.label_epochs:
        return 0.0
    from training.distil.labels import tune_on_labels

    t0 = time.perf_counter()
    tune_on_labels(
        model.model_body,
        [texts[i] for i in single],
        [labels[i] for i in single],
        epochs=config.label_epochs,
        learning_rate=config.label_learning_rate,
        anchor_weight=config.label_anchor_weight,
        batch_size=config.distil_batch_size,
        seed=config.seed,
        head_params=head_params,
        freeze_embeddings=config.distil_freeze_embeddings,
        bf16=bf16_steps(config),
        report=report,
        show_progress=show_progress,
    )
    seconds = time.perf_counter() - t0
    report(f"label phase: {seconds:.1f}s")
    return seconds


def _teacher_targets(config: TrainConfig, teacher, texts: list[str], report: Reporter):
    """The ``teacher`` body folder's embeddings of ``texts``, written to ``config.teacher_targets`` too
    when it is set."""
    from sentence_transformers import SentenceTransformer

    from training.distil.encoder import teacher_embeddings
    from training.distil.teacher_targets import TeacherTargets, write_targets
    from training.fit.checkpoints import teacher_description

    t0 = time.perf_counter()
    body = SentenceTransformer(str(teacher), device="cpu")
    body.max_seq_length = config.max_seq_length
    targets = teacher_embeddings(body, texts, config.distil_batch_size)
    report(
        f"teacher targets for {len(texts)} texts ({targets.shape[1]} dimensions): "
        f"{time.perf_counter() - t0:.0f}s"
    )
    if config.teacher_targets is not None:  # and learn from them as stored, as a build that reads them will
        path = write_targets(
            config.teacher_targets, texts, targets.numpy(), teacher_description(config.teacher)
        )
        targets = TeacherTargets(path).lookup(texts)
        report(f"teacher targets written to {path}")
    return targets


def _distil_arguments(
    config: TrainConfig,
    texts: Sequence[str],
    labels: Mapping[str, str],
    head_params: dict,
    report: Reporter,
    show_progress: bool,
) -> dict:
    """The arguments both distillations take from the config, and the texts they learn on."""
    return dict(
        # the messages and their clauses, which the router reads too: distilled on the two-intent
        # rows' clauses only, the student agreed with the teacher on 86% of single messages'
        # clauses (98% of the distilled ones), and its compound recall fell from 87% to 68%
        texts=list(texts) + [c for t in texts for c in split_clauses(t)],
        epochs=config.distil_epochs,
        learning_rate=config.distil_learning_rate,
        batch_size=config.distil_batch_size,
        seed=config.seed,
        freeze_embeddings=config.distil_freeze_embeddings,
        dropout=config.distil_dropout,
        labels=labels,
        head_weight=config.distil_head_weight,
        head_params=head_params,
        bf16=bf16_steps(config),
        report=report,
        show_progress=show_progress,
    )


def bf16_steps(config: TrainConfig) -> bool:
    """Whether the distillation and the label phase step under CPU autocast to bfloat16: the config's
    ``bf16_steps``, or, unset, where this CPU computes bfloat16 natively (training.distil.loop)."""
    from training.distil.loop import native_bf16

    return native_bf16() if config.bf16_steps is None else config.bf16_steps


def contrastive_rows(ds, oos_rows: int | None, seed: int):
    """The rows of the contrastive phase: all of them, or at most ``oos_rows`` OUT_OF_SCOPE rows (a
    seeded sample), so chit-chat does not take the pair budget from the intents. The head sees all."""
    oos = [i for i, l in enumerate(ds["label"]) if l == OUT_OF_SCOPE]
    if oos_rows is None or len(oos) <= oos_rows:
        return ds
    drop = set(random.Random(seed).sample(oos, len(oos) - oos_rows))
    return ds.select([i for i in range(len(ds)) if i not in drop])


def _progress_callback(progress, task, report: Reporter, batch_size: int):
    """Rich bar on a terminal; a line every 10% elsewhere (CI logs), with the pair rate."""
    from transformers import TrainerCallback

    interactive = progress.console.is_terminal and not progress.disable

    class RichProgress(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            self.t0, self.every = time.perf_counter(), max(1, state.max_steps // 10)
            progress.update(task, total=state.max_steps)

        def on_step_end(self, args, state, control, **kw):
            progress.update(task, completed=state.global_step)
            if not interactive and (
                state.global_step % self.every == 0 or state.global_step == state.max_steps
            ):
                rate = state.global_step * batch_size / (time.perf_counter() - self.t0)
                report(f"contrastive step {state.global_step}/{state.max_steps} ({rate:.0f} pairs/s)")

    return RichProgress()
