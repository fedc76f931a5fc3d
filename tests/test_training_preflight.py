"""A training config of the user's own takes no file of the shipped corpus it does not name, and a build
checks its files and router config before it trains: a mismatch fails in seconds."""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import ROOT
from tests.test_own_intents import MODEL, cli
from training.train_config import TrainConfig


@pytest.fixture
def project(tmp_path):
    assert cli("init", tmp_path / "shop").exit_code == 0
    return tmp_path / "shop"


def _with(project, **keys):
    cfg = yaml.safe_load((project / "train.yaml").read_text())
    for key, value in keys.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    (project / "train.yaml").write_text(yaml.safe_dump(cfg))


def test_a_users_config_takes_no_corpus_file_it_does_not_name(project):
    _with(project, compound_train_file=None, compound_dev_file=None, conversation_train_file=None)
    cfg = TrainConfig.from_file(project / "train.yaml")
    assert cfg.train_file.as_posix() == "data/train.jsonl" and cfg.compound_train_file is None
    assert cfg.conversation_train_file is None and cfg.conversation_test_file is None
    shipped = TrainConfig.from_file(ROOT / "training/configs/default.yaml")
    assert shipped.conversation_train_file is not None  # a shipped recipe reads the shipped corpus


def test_a_users_config_names_its_train_and_dev_files(project):
    _with(project, train_file=None)
    with pytest.raises(ValueError, match="name train_file: a training config outside training/configs/"):
        TrainConfig.from_file(project / "train.yaml")


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"conversation_test_file": str(ROOT / "data/conversations/test.jsonl")}, "conversations/test.jsonl"),
        ({"compound_test_file": str(ROOT / "data/compound/test.jsonl")}, "compound/test.jsonl"),
        ({"router_config": str(ROOT / "router/config/default.yaml")}, "has no entry for ORDER_STATUS"),
        ({"heads_only_file": "data/missing.jsonl"}, "missing.jsonl"),
    ],
    ids=["five-intent conversations", "five-intent compound", "the shipped router config", "a missing file"],
)
def test_a_build_whose_files_do_not_fit_fails_before_training(project, keys, message):
    _with(project, **keys)
    out = cli("build", "--config", "train.yaml", cwd=project)
    assert out.exit_code != 0 and message in out.output, out.output
    assert "== train + calibrate" not in out.output and not (project / MODEL).exists()
