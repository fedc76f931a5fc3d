"""What a build checks before it trains, so that a mismatch fails in seconds, not after the contrastive
phase: every file the training config names exists and uses only the model's labels (the train file's,
plus the intents the router config defines by examples, which the build trains as classes), and the
router config the build's evaluation routes with fits the model those labels make."""

from __future__ import annotations

from eval.metrics.conversation_turns import load_conversations
from eval.readers.loader import load_labeled
from router.config import RouterConfig
from router.intents import intents_of
from training.train_config import TrainConfig


def model_labels(cfg: TrainConfig) -> list[str]:
    """The labels a build on ``cfg`` gives its model."""
    labels = set(load_labeled(cfg.train_file).labels)
    if cfg.router_config is not None:
        labels |= set(RouterConfig.load(cfg.router_config).example_intents(sorted(labels)))
    return sorted(labels)


def check_build_files(cfg: TrainConfig) -> list[str]:
    """Raise (naming the file) on the first file or router config that does not fit; return the labels."""
    labels = model_labels(cfg)
    single = [cfg.dev_file, cfg.test_file, *cfg.more_train_files, *cfg.heads_only_files, *cfg.label_files]
    compound = [
        cfg.compound_train_file,
        *cfg.more_compound_train_files,
        *cfg.compound_label_files,
        cfg.compound_dev_file,
        cfg.compound_test_file,
    ]
    for path in [p for p in (*single, *compound) if p is not None]:
        load_labeled(path, labels=labels)
    intents = tuple(intents_of(labels))
    for path in (cfg.conversation_train_file, cfg.conversation_test_file):
        if path is not None:
            load_conversations(path, intents)
    if cfg.test_file is not None:  # the build's evaluation routes with it
        where = cfg.router_config or "the shipped router config"
        try:
            RouterConfig.load(cfg.router_config).check_intents(intents, f"the model {cfg.train_file} trains")
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from e
    return labels
