import json
from pathlib import Path

import pytest

from tests.conftest import SHIPPED_INTENTS
from training.corpus.labelled import CorpusError, check_files, load_examples, normalize_text, split_of

FIX = Path(__file__).parent / "fixtures"
SHIPPED_LABELS = (*SHIPPED_INTENTS, "OUT_OF_SCOPE", "CONTINUATION")


def check_rules(paths, **kw):
    """The row, compound, duplicate and leak rules, without the label-set checks (a fixture here has a
    row or two per label)."""
    return check_files(paths, label_set=False, **kw)


def _messages(report):
    return [(Path(i.source).name, i.line, i.severity, i.message) for i in report.issues]


def test_load_examples_reads_labels_and_extra_keys(tmp_path):
    p = tmp_path / "train.jsonl"
    p.write_text(
        json.dumps({"text": "pull up the q3 deck", "label": "SEARCH", "pair": "R6-01"})
        + "\n\n"
        + json.dumps({"text": "archive the q3 deck", "label": "ACTION", "pair": "R6-01"})
        + "\n",
        encoding="utf-8",
    )
    rows = load_examples(p)
    assert [(r.text, r.label, r.line) for r in rows] == [
        ("pull up the q3 deck", "SEARCH", 1),
        ("archive the q3 deck", "ACTION", 3),
    ]


def test_load_examples_raises_with_file_and_line():
    with pytest.raises(CorpusError) as e:
        load_examples(FIX / "bad" / "train.jsonl")
    assert "train.jsonl:2: invalid JSON" in str(e.value)


def test_checker_reports_each_malformed_line():
    report = check_rules([FIX / "bad" / "train.jsonl"], labels=SHIPPED_LABELS)
    msgs = {
        (line, msg.split(":")[0].split(" (")[0]) for _, line, sev, msg in _messages(report) if sev == "error"
    }
    assert (2, "invalid JSON") in msgs
    assert (3, "expected a JSON object, got list") in msgs
    assert (4, "missing 'text'") in msgs
    assert (5, "'text' must be a string, got int") in msgs
    assert (6, "empty text") in msgs
    assert (7, "unknown label 'GOSSIP'") in msgs
    assert (8, "missing 'label'") in msgs
    assert (9, "'label' must be a string, got int") in msgs
    # line 12 repeats line 1 with another label: a conflict, not just a duplicate
    assert any(line == 12 and "conflicting labels" in msg for _, line, _, msg in _messages(report))
    # line 11 is a near-duplicate of line 1 (case and punctuation) within one split: a warning
    assert any(
        line == 11 and sev == "warning" and "near-duplicate" in msg for _, line, sev, msg in _messages(report)
    )


def test_checker_finds_leaks_across_splits():
    report = check_rules([FIX / "leaky"])
    leaks = [
        (name, line)
        for name, line, sev, msg in _messages(report)
        if sev == "error" and msg.startswith("leak")
    ]
    assert ("dev.jsonl", 1) in leaks  # near-duplicate of train
    assert ("test.jsonl", 1) in leaks  # exact duplicate of train
    assert ("test.jsonl", 2) in leaks  # dev and test overlap
    assert ("oos.jsonl", 2) in leaks  # an out-of-scope row that is also a training row
    assert len(report.errors) == 4


def test_clean_fixture_passes_and_counts():
    report = check_files([FIX / "tiny"])
    assert report.errors == [] and report.warnings == []
    bal = report.class_balance()
    assert bal["train"] == {
        "ACTION": 8,
        "MEMORY": 8,
        "OUT_OF_SCOPE": 8,
        "PLANNING": 8,
        "REASONING": 8,
        "SEARCH": 8,
    }
    assert bal["oos"] == {"(none)": 7}
    stats = report.length_stats()
    assert stats["train"]["rows"] == 48 and stats["train"]["min_words"] >= 1


def test_unlabeled_file_rejects_labels(tmp_path):
    p = tmp_path / "oos.jsonl"
    p.write_text('{"text": "hi", "label": "SEARCH"}\n{"text": "   "}\n{"text": ""}\n', encoding="utf-8")
    report = check_rules([p])
    assert [(i.line, i.message.split(",")[0]) for i in report.errors] == [
        (1, "out-of-scope file rows carry no label"),
        (3, "empty text"),
    ]


def test_normalize_and_split_names():
    assert normalize_text("  Find   the VPN-policy!! ") == "find the vpn policy"
    assert split_of(Path("data/train.jsonl")) == "train"
    assert split_of(Path("x/test_hard.jsonl")) == "test"
    assert split_of(Path("oos.jsonl")) == "oos"
    assert split_of(Path("data/compound/Dev-More.jsonl")) == "compound/dev"
    # a split's name must end the name or be followed by _ or -
    assert split_of(Path("data/trainer.jsonl")) == "trainer"


def test_compound_files_and_split_names_read_one_rule(tmp_path):
    from training.corpus.compound_rows import compound_files

    folder = tmp_path / "compound"
    folder.mkdir()
    for name in (
        "blind.jsonl",
        "Dev-More.jsonl",
        "dev.jsonl",
        "trainer.jsonl",
        "train_b.jsonl",
        "train.jsonl",
    ):
        (folder / name).write_text("")
    found = compound_files(tmp_path)
    # each split's own file first, then the others named for it; trainer.jsonl is named for no split
    assert [p.name for p in found] == [
        "train.jsonl",
        "train_b.jsonl",
        "dev.jsonl",
        "Dev-More.jsonl",
        "blind.jsonl",
    ]
    assert [split_of(p) for p in found] == [
        "compound/" + s for s in ("train", "train", "dev", "dev", "blind")
    ]


def test_missing_file_is_an_error(tmp_path):
    report = check_rules([tmp_path / "nope.jsonl"])
    assert report.errors and "file not found" in report.errors[0].message
