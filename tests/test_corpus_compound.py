"""`data check` and the loader on data/compound/: compound rows checked and counted, files named for a
split read as that split, twin pairs, leaks and duplicates, and the checker and loader agreeing on the
shipped rows; the blind split leaking with every other."""

import json
from pathlib import Path

import pytest

from tests.test_corpus import FIX, check_rules


def _row(text, *labels, kind=None, pair=None, **extra):
    """A compound row (two labels; pair_kind from them unless given) or a twin (one label)."""
    from training.corpus.compound_rows import pair_kind_of

    if len(labels) == 2:
        row = {"text": text, "labels": list(labels), "pair_kind": kind or pair_kind_of(labels)}
    else:
        row = {"text": text, "label": labels[0], "twin": True}
    if pair:
        row["pair"] = pair
    return {**row, **extra}


def _write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8"
    )


def _data_dir(tmp_path, compound=None, five=None):
    """tmp data/ with train/dev/test/oos five-intent files and data/compound/{split}.jsonl."""
    d = tmp_path / "data"
    five = five or {
        "train": [{"text": "pull up the q3 deck", "label": "SEARCH"}],
        "dev": [{"text": "restart the indexer", "label": "ACTION"}],
        "test": [{"text": "plan the migration", "label": "PLANNING"}],
        "oos": [{"text": "hello there"}],
    }
    for split, rows in five.items():
        _write(d / f"{split}.jsonl", rows)
    compound = (
        {
            "train": [
                _row("find the board deck and email it to Maria", "ACTION", "SEARCH", pair="C-1"),
                _row("find and list the board decks from 2023", "SEARCH", pair="C-1"),
                _row("what did I say about the offsite? plan it", "PLANNING", "MEMORY"),
            ],
            "dev": [_row("pull the claims and compare their deductibles", "REASONING", "SEARCH", pair="D-1")],
            "test": [_row("reindex the wiki and then search it for the leave page", "SEARCH", "ACTION")],
        }
        if compound is None
        else compound
    )
    for split, rows in compound.items():
        _write(d / "compound" / f"{split}.jsonl", rows)
    return d


def _errors(report):
    return [(f"{Path(i.source).parent.name}/{Path(i.source).name}", i.line, i.message) for i in report.errors]


def test_compound_files_are_checked_and_counted(tmp_path):
    report = check_rules([_data_dir(tmp_path)])
    assert report.errors == [] and report.warnings == []
    assert [Path(f).parent.name + "/" + Path(f).name for f in report.files][-3:] == [
        "compound/train.jsonl",
        "compound/dev.jsonl",
        "compound/test.jsonl",
    ]
    counts = report.compound_counts()
    assert set(counts) == {"compound/train", "compound/dev", "compound/test"}
    train = counts["compound/train"]
    assert (train["rows"], train["compound"], train["twins"]) == (3, 2, 1)
    # pair kinds come from the rows, named as first written; the dev and test splits' kinds count 0 here
    assert train["ACTION+SEARCH"] == 1 and train["PLANNING+MEMORY"] == 1 and train["REASONING+SEARCH"] == 0
    assert report.class_balance()["compound/train"] == {"ACTION": 1, "PLANNING": 1, "SEARCH": 1}
    assert (
        "Compound requests by pair kind (A = ACTION, M = MEMORY, P = PLANNING, R = REASONING, S = SEARCH)"
        in [t for t, _, _ in report.tables()]
    )
    assert report.to_dict()["compound"] == counts
    # the compound directory given on its own is read with the same rules
    alone = check_rules([tmp_path / "data" / "compound"])
    assert alone.errors == [] and alone.compound_counts() == counts


def test_compound_files_named_for_a_split_are_checked_as_that_split(tmp_path):
    d = _data_dir(tmp_path)
    everyday = [_row("book the 6pm table and text ana the time", "ACTION", "SEARCH", pair="E-1")]
    _write(d / "compound" / "train_everyday_pairs.jsonl", everyday)
    _write(d / "compound" / "blind_everyday.jsonl", [_row("plan the migration", "PLANNING", pair="E-2")])
    report = check_rules([d])
    names = [Path(f).name for f in report.files][-5:]
    assert names == [
        "train.jsonl",
        "train_everyday_pairs.jsonl",
        "dev.jsonl",
        "test.jsonl",
        "blind_everyday.jsonl",
    ]
    assert report.compound_counts()["compound/train"]["rows"] == 4
    # the everyday blind twin repeats a test row: a leak, found only if the file is read
    assert any(
        "blind_everyday.jsonl" in str(i.source) and "plan the migration" in i.message for i in report.errors
    ), report.errors


def test_without_compound_dir_nothing_changes(tmp_path):
    for name in ("train", "dev", "test", "oos"):
        (tmp_path / f"{name}.jsonl").write_bytes((FIX / "tiny" / f"{name}.jsonl").read_bytes())
    report = check_rules([tmp_path])
    assert report.compound == {} and report.compound_counts() == {}
    assert "Compound requests" not in " ".join(t for t, _, _ in report.tables())


@pytest.mark.parametrize(
    "row, problem",
    [
        (
            {"text": "find x and send it", "labels": ["ACTION"], "pair_kind": "SEARCH+ACTION"},
            "list of two intents",
        ),
        (_row("find x and send it", "ACTION", "ACTION", kind="SEARCH+ACTION"), "repeats 'ACTION'"),
        (
            _row("find x and send it", "ACTION", "OUT_OF_SCOPE", kind="SEARCH+ACTION"),
            "OUT_OF_SCOPE is not an intent",
        ),
        (
            _row("find x and send it", "ACTION", "SEARCH", kind="SEARCH+REASONING"),
            "'pair_kind' 'SEARCH+REASONING'",
        ),
        ({"text": "find x and send it", "labels": ["ACTION", "SEARCH"]}, "'pair_kind' None does not match"),
        (_row("find x and send it", "ACTION", "SEARCH", label="SEARCH"), "'label' 'SEARCH' differs"),
        (_row("find x and send it", "ACTION", "SEARCH", twin=True), "cannot be a twin"),
        ({"text": "find x", "label": "SEARCH"}, "needs 'labels' (compound) or 'label' with 'twin': true"),
        ({"text": "find x", "label": "SEARCH", "twin": "yes", "pair": "C-1"}, "needs 'labels'"),
        ({"text": "find x", "label": "SEARCH", "twin": True}, "a twin row needs 'pair'"),
        (
            {"text": "find x", "label": "OUT_OF_SCOPE", "twin": True, "pair": "C-1"},
            "twin's 'label': OUT_OF_SCOPE is not an intent",
        ),
        (
            {"text": "find x", "label": "SEARCH", "twin": True, "pair": "C-1", "pair_kind": "SEARCH+ACTION"},
            "no 'pair_kind'",
        ),
        ({"text": "find x", "label": "SEARCH", "twin": True, "pair": 7}, "'pair' must be a non-empty string"),
        ({"text": "  ", "labels": ["ACTION", "SEARCH"], "pair_kind": "SEARCH+ACTION"}, "empty text"),
        ("{not json", "invalid JSON"),
    ],
)
def test_invalid_compound_rows_are_caught(tmp_path, row, problem):
    good = _row("find the board deck and email it to Maria", "ACTION", "SEARCH", pair="C-1")
    d = _data_dir(tmp_path, compound={"train": [good, row]})
    errors = _errors(check_rules([d]))
    assert len(errors) == 1, errors
    assert errors[0][:2] == ("compound/train.jsonl", 2) and problem in errors[0][2], errors


def test_twin_pairs_must_name_a_compound_row_of_the_same_split(tmp_path):
    d = _data_dir(
        tmp_path,
        compound={
            "train": [
                _row("find the board deck and email it to Maria", "ACTION", "SEARCH", pair="C-1"),
                _row("find and list the board decks", "SEARCH", pair="C-404"),  # no such compound row
                _row("pull the contracts and compare them", "REASONING", "SEARCH", pair="C-1"),  # id taken
            ],
            "dev": [
                _row("find and list the claim forms", "SEARCH", pair="C-1"),  # C-1 lives in train
            ],
        },
    )
    errors = _errors(check_rules([d]))
    assert ("compound/train.jsonl", 2) in [e[:2] for e in errors]
    assert any(
        e[:2] == ("compound/train.jsonl", 3) and "also the compound row of line 1" in e[2] for e in errors
    )
    assert any(
        e[:2] == ("compound/dev.jsonl", 1) and "no compound row with that pair in this split" in e[2]
        for e in errors
    )
    assert any("pair id 'C-1' is used in 2 splits" in e[2] for e in errors)
    assert len(errors) == 4, errors


def test_compound_leaks_across_splits_and_with_the_five_intent_files(tmp_path):
    five = {
        "train": [{"text": "pull up the q3 deck", "label": "SEARCH"}],
        "dev": [{"text": "restart the indexer", "label": "ACTION"}],
        "test": [{"text": "plan the migration", "label": "PLANNING"}],
        "oos": [{"text": "hello there"}],
    }
    compound = {
        "train": [
            _row("Pull up the Q3 deck!", "SEARCH", pair="C-1"),  # = data/train.jsonl (same split name)
            _row("find the q3 deck and email it", "ACTION", "SEARCH", pair="C-1"),
            _row("hello  THERE", "SEARCH", "ACTION"),  # = data/oos.jsonl
        ],
        "dev": [_row("Find the Q3 deck and email it.", "ACTION", "SEARCH")],  # = compound/train
        "test": [_row("restart the indexer", "ACTION", "SEARCH")],  # = data/dev.jsonl
    }
    errors = _errors(check_rules([_data_dir(tmp_path, compound, five)]))
    leaks = sorted(e[:2] for e in errors if e[2].startswith("leak"))
    assert leaks == [
        ("compound/dev.jsonl", 1),
        ("compound/test.jsonl", 1),
        ("compound/train.jsonl", 1),
        ("compound/train.jsonl", 3),
    ], errors
    assert len(errors) == 4


def test_duplicates_within_a_compound_split(tmp_path):
    compound = {
        "train": [
            _row("find the q3 deck and email it", "ACTION", "SEARCH"),
            _row("Find the Q3 deck, and email it", "ACTION", "SEARCH"),  # same labels: a warning
            _row("find the q3 deck and email it!", "SEARCH", "ACTION"),  # other order: a conflict
            _row("find the q3 deck and email it?", "ACTION", "MEMORY"),  # other secondary: a conflict
        ]
    }
    report = check_rules([_data_dir(tmp_path, compound)])
    assert [(i.line, i.severity) for i in report.issues] == [(2, "warning"), (3, "error"), (4, "error")]
    assert "is ACTION+SEARCH, here SEARCH+ACTION" in report.issues[1].message
    assert "is ACTION+SEARCH, here ACTION+MEMORY" in report.issues[2].message


def test_checker_and_loader_agree_on_the_shipped_compound_rows():
    """Every row the checker accepts loads with eval.readers.loader.load_labeled to the same intents."""
    from eval.readers.loader import load_labeled

    data = Path(__file__).resolve().parent.parent / "data"
    report = check_rules([data / "compound"])
    assert report.errors == [] and report.compound
    for src, rows in report.compound.items():
        loaded = load_labeled(src)
        assert [tuple(ls) for ls in loaded.label_sets] == [r.labels for r in rows]
        assert loaded.lines == [r.line for r in rows]


def test_blind_split_leaks_with_every_other_split(tmp_path):
    """data/blind.jsonl and compound/blind.jsonl are evaluation text written without the corpus: a text
    they share with any other file is a leak, and the compound one is checked like the other splits."""
    five = {
        "train": [{"text": "pull up the q3 deck", "label": "SEARCH"}],
        "dev": [{"text": "restart the indexer", "label": "ACTION"}],
        "test": [{"text": "plan the migration", "label": "PLANNING"}],
        "oos": [{"text": "hello there"}],
        "blind": [
            {"text": "Pull up the Q3 deck", "label": "SEARCH"},  # = train
            {"text": "hello there!", "label": "OUT_OF_SCOPE"},  # = oos, and an unlabeled row there
            {"text": "why did churn rise in march", "label": "REASONING"},  # new text: fine
        ],
    }
    compound = {
        "train": [_row("find the board deck and email it to Maria", "ACTION", "SEARCH", pair="C-1")],
        "blind": [
            _row("plan the migration", "PLANNING", "ACTION"),  # = data/test.jsonl
            _row("find and list the onboarding forms", "SEARCH", pair="B-404"),  # no such compound row
        ],
    }
    report = check_rules([_data_dir(tmp_path, compound, five)])
    assert "blind" in report.class_balance() and "compound/blind" in report.compound_counts()
    errors = sorted(e[:2] for e in _errors(report))
    assert errors == [
        ("compound/blind.jsonl", 1),
        ("compound/blind.jsonl", 2),
        ("data/blind.jsonl", 1),
        ("data/blind.jsonl", 2),
    ]
