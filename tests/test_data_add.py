"""intent-router data add: reviewed rows merged into a training file with schema, label, duplicate and
leakage checks, provenance and an atomic write. Every test works on small files written into tmp_path."""

import json
import os
from datetime import date
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from training.corpus.labelled import check_files
from training.corpus.merge import DataAddError, add_reviewed, read_reviewed

TODAY = date(2026, 3, 14)
TRAIN = [
    ("find the onboarding checklist for new engineers", "SEARCH"),
    ("where is the q3 vendor contract", "SEARCH"),
    ("pull up ticket INC0012345", "SEARCH"),
    ("gdpr retention policy", "SEARCH"),
    ("restart the staging api pods", "ACTION"),
    ("send the invoice to maria", "ACTION"),
    ("book a room for friday at 10", "ACTION"),
    ("create a jira ticket for the login bug", "ACTION"),
    ("hi there", "OUT_OF_SCOPE"),
    ("thanks a lot", "OUT_OF_SCOPE"),
    ("good morning", "OUT_OF_SCOPE"),
    ("see you tomorrow", "OUT_OF_SCOPE"),
]


def _write(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def corpus(tmp_path):
    """A data directory: train, dev, test, blind, a compound split and a conversation file."""
    d = tmp_path / "data"
    _write(d / "train.jsonl", [{"text": t, "label": l} for t, l in TRAIN])
    _write(d / "dev.jsonl", [{"text": "locate the security audit from march", "label": "SEARCH"}])
    _write(d / "test.jsonl", [{"text": "deploy the billing service to prod", "label": "ACTION"}])
    _write(d / "blind.jsonl", [{"text": "archive the old sales decks", "label": "ACTION"}])
    compound = {"text": "find the q2 deck and email it to Sam", "labels": ["ACTION", "SEARCH"]}
    _write(d / "compound" / "dev.jsonl", [{**compound, "pair_kind": "SEARCH+ACTION"}])
    turns = [{"text": "cancel my gym renewal", "label": "ACTION"}, {"text": "do it now", "label": "ACTION"}]
    _write(d / "conversations" / "test.jsonl", [{"turns": turns}])
    return d


def _review(tmp_path, rows, name="review-batch.jsonl") -> Path:
    return _write(tmp_path / name, rows)


def _add(reviewed, corpus, **kw):
    return add_reviewed(reviewed, corpus / "train.jsonl", data_dir=corpus, today=TODAY, **kw)


def test_schema_errors_name_file_and_line_and_nothing_is_written(tmp_path, corpus):
    p = tmp_path / "review.jsonl"
    lines = [
        json.dumps({"text": "email the agenda to the board", "label": "ACTION"}),
        json.dumps({"label": "SEARCH"}),
        json.dumps({"text": "show the travel policy"}),
        json.dumps({"text": "   ", "label": "SEARCH"}),
        json.dumps({"text": "merge the pull request", "label": 3}),
        "{not json",
        json.dumps(["a list"]),
    ]
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    before = (corpus / "train.jsonl").read_bytes()
    report = _add(p, corpus)
    assert report.errors == [
        f"{p}:2: missing 'text'",
        f"{p}:3: missing 'label'",
        f"{p}:4: empty text",
        f"{p}:5: 'label' must be a string, got int",
        f"{p}:6: invalid JSON: Expecting property name enclosed in double quotes (column 2)",
        f"{p}:7: expected a JSON object, got list",
    ]
    assert report.read == 7 and len(report.rows) == 1 and not report.written
    assert (corpus / "train.jsonl").read_bytes() == before


def test_csv_rows_carry_the_line_they_start_on(tmp_path, corpus):
    p = tmp_path / "queue.csv"
    p.write_text(
        'id,text,label,reviewer\n7,"send the\nweekly report to finance",ACTION,ana\n\n8,show the sla doc,,ana\n',
        encoding="utf-8",
    )
    assert [n for n, _, _ in read_reviewed(p)] == [2, 5]
    report = _add(p, corpus)
    assert report.errors == [f"{p}:5: missing 'label'"]
    assert (
        report.rows[0]["text"] == "send the\nweekly report to finance" and report.rows[0]["review_id"] == "7"
    )


def test_exact_and_near_duplicates_are_skipped_within_the_batch_and_against_train(tmp_path, corpus):
    rows = [
        {"text": "Restart the staging API pods!", "label": "ACTION"},  # near-duplicate of train:5
        {"text": "where is the q3 vendor contract", "label": "SEARCH"},  # exact duplicate of train:2
        {"text": "rotate the vpn keys tonight", "label": "ACTION"},
        {"text": "rotate the VPN keys tonight.", "label": "ACTION"},  # near-duplicate of line 3
        {"text": "rotate the vpn keys tonight", "label": "ACTION"},  # exact duplicate of line 3
    ]
    report = _add(_review(tmp_path, rows), corpus)
    assert [r["text"] for r in report.rows] == ["rotate the vpn keys tonight"]
    assert [(s.line, s.reason, s.detail.split(" of ")[0]) for s in report.skipped] == [
        (1, "duplicate", "near-duplicate"),
        (2, "duplicate", "exact duplicate"),
        (4, "duplicate", "near-duplicate"),
        (5, "duplicate", "exact duplicate"),
    ]
    assert report.skipped[0].detail.endswith("train.jsonl:5")
    assert report.skipped_counts() == {"duplicate": 4, "leak": 0, "conflict": 0}


def test_conflicting_labels_are_reported_and_not_added(tmp_path, corpus):
    rows = [
        {"text": "send the invoice to Maria", "label": "SEARCH"},  # train:6 says ACTION
        {"text": "the sso runbook", "label": "SEARCH"},
        {"text": "The SSO runbook", "label": "ACTION"},  # reviewers disagree: both rows are held back
    ]
    report = _add(_review(tmp_path, rows), corpus)
    assert report.rows == []
    assert [(s.line, s.reason) for s in report.skipped] == [(1, "conflict"), (2, "conflict"), (3, "conflict")]
    assert "which is ACTION, here SEARCH" in report.skipped[0].detail
    assert "3 reviewed row(s) give a label" in report.errors[0] and not report.written


def test_a_conflict_fails_the_batch_unless_the_training_labels_are_kept(tmp_path, corpus):
    rows = [
        {"text": "send the invoice to Maria", "label": "SEARCH"},  # train says ACTION
        {"text": "where is the onboarding checklist for new hires", "label": "SEARCH"},
    ]
    reviewed = _review(tmp_path, rows)
    refused = _add(reviewed, corpus)
    assert refused.errors and not refused.written
    kept = _add(reviewed, corpus, keep_existing=True)
    assert kept.errors == [] and kept.written and [r["text"] for r in kept.rows] == [rows[1]["text"]]
    out = CliRunner().invoke(app, ["data", "add", str(reviewed), "--to", str(corpus / "train.jsonl")])
    assert out.exit_code == 1 and "--keep-existing" in out.output


def test_an_unknown_label_suggests_the_label_it_likely_means(tmp_path, corpus):
    rows = [
        {"text": "restart the staging db", "label": "action"},
        {"text": "find the deck", "label": "SERCH"},
    ]
    report = _add(_review(tmp_path, rows), corpus)
    assert "did you mean ACTION?" in report.errors[0] and "did you mean SEARCH?" in report.errors[1]


def test_a_label_studio_export_comes_back(tmp_path, corpus):
    """The tasks review --label-studio writes, labelled and exported, are rows data add takes."""

    def task(text, choice, cancelled=False):
        result = [
            {"from_name": "intent", "to_name": "text", "type": "choices", "value": {"choices": [choice]}}
        ]
        return {"id": 1, "data": {"text": text, "id": "ab12"}, "annotations": [
            {"result": [{**result[0], "value": {"choices": ["ACTION"]}}], "was_cancelled": False},
            {"result": result, "was_cancelled": cancelled},
        ]}  # fmt: skip

    export = [task("where is the vendor contract for the cafe", "SEARCH"), task("and the other one", "SEARCH", True),
              {"id": 3, "data": {"text": "nobody labelled me"}, "annotations": []}]  # fmt: skip
    path = tmp_path / "export.json"
    path.write_text(json.dumps(export), encoding="utf-8")
    report = _add(path, corpus)
    assert [e.split(": ", 1)[1] for e in report.errors] == ["no annotation chose a label"]
    ok = _add(_write_json(tmp_path / "ok.json", export[:2]), corpus)
    assert ok.errors == [] and ok.written
    assert [(r["text"], r["label"], r["review_id"]) for r in ok.rows] == [
        ("where is the vendor contract for the cafe", "SEARCH", "ab12"),  # the latest annotation's choice
        ("and the other one", "ACTION", "ab12"),  # the cancelled one does not count
    ]


def _write_json(path: Path, data) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_near_duplicates_fold_digits_as_the_review_queue_does(tmp_path, corpus):
    """A message that differs from a training or evaluation row only in its numbers is the repeat the
    review queue deduplicates, so data add skips it too."""
    rows = [
        {"text": "Book a room for Monday at 2", "label": "ACTION"},  # train:7 but for the day's number
        {"text": "book a room for friday at 11", "label": "ACTION"},  # train:7, another hour
        {"text": "Where is the Q4 vendor-contract?", "label": "SEARCH"},  # train:2, q3 -> q4
        {"text": "find the Q7 deck and email it to Sam", "label": "ACTION"},  # compound/dev, q2 -> q7
    ]
    report = _add(_review(tmp_path, rows), corpus)
    skipped = {s.line: (s.reason, s.detail) for s in report.skipped}
    assert skipped[2] == ("duplicate", "near-duplicate of " + str(corpus / "train.jsonl") + ":7")
    assert skipped[3][0] == "duplicate" and skipped[3][1].endswith("train.jsonl:2")
    assert skipped[4][0] == "leak" and skipped[4][1].endswith(str(Path("compound") / "dev.jsonl:1"))
    assert [r["text"] for r in report.rows] == ["Book a room for Monday at 2"]


def test_rows_overlapping_an_evaluation_file_are_refused(tmp_path, corpus):
    rows = [
        {"text": "Locate the security audit from March", "label": "SEARCH"},  # dev
        {"text": "deploy the billing service to prod", "label": "ACTION"},  # test
        {"text": "archive the old sales decks!", "label": "ACTION"},  # blind
        {"text": "find the Q2 deck and email it to sam", "label": "ACTION"},  # compound/dev
        {"text": "Do it now", "label": "ACTION"},  # a conversation turn
        {"text": "summarise the incident channel into a ticket", "label": "ACTION"},
    ]
    before = (corpus / "train.jsonl").read_text(encoding="utf-8")
    report = _add(_review(tmp_path, rows), corpus)
    leaked = {s.line: s.detail for s in report.skipped if s.reason == "leak"}
    assert sorted(leaked) == [1, 2, 3, 4, 5]
    assert leaked[1].endswith("dev.jsonl:1") and leaked[2].startswith("exact duplicate of")
    assert leaked[4].endswith(str(Path("compound") / "dev.jsonl:1"))
    assert leaked[5].endswith(str(Path("conversations") / "test.jsonl:1"))
    assert [r["text"] for r in report.rows] == ["summarise the incident channel into a ticket"]
    after = (corpus / "train.jsonl").read_text(encoding="utf-8")
    assert after.startswith(before) and after.count("\n") == before.count("\n") + 1


def test_unknown_label_is_refused_unless_allowed(tmp_path, corpus):
    rows = [
        {"text": "what did i tell you about my shoe size", "label": "MEMORY"},
        {"text": "yes go ahead", "label": "CONTINUATION", "kind": "confirmation"},  # reserved: accepted
    ]
    reviewed = _review(tmp_path, rows)
    refused = _add(reviewed, corpus)
    assert len(refused.errors) == 1 and refused.errors[0].startswith(f"{reviewed}:1: unknown label 'MEMORY'")
    assert "--new-label MEMORY" in refused.errors[0] and not refused.written
    allowed = _add(reviewed, corpus, new_labels=["MEMORY"])
    assert allowed.errors == [] and allowed.written
    assert allowed.added_per_label() == {"CONTINUATION": 1, "MEMORY": 1}
    # one row of a label new to the file is below data check's minimum: said, not hidden
    assert any("'MEMORY' will have 1 row(s)" in w for w in allowed.warnings)
    bad_name = _add(
        _review(tmp_path, [{"text": "xyz please", "label": "9LIVES"}], "b.jsonl"),
        corpus,
        new_labels=["9LIVES"],
    )
    assert bad_name.errors and "9LIVES" in bad_name.errors[0]


def test_a_new_target_learns_its_labels_from_train_and_is_created(tmp_path, corpus):
    target = corpus / "train_reviewed.jsonl"
    reviewed = _review(tmp_path, [{"text": "open the expense report from june", "label": "SEARCH"}])
    report = add_reviewed(reviewed, target, data_dir=corpus, today=TODAY)
    assert report.written and target.is_file()
    unknown = add_reviewed(
        _review(tmp_path, [{"text": "plan the q4 roadmap", "label": "PLANNING"}], "p.jsonl"),
        tmp_path / "other.jsonl",
        data_dir=corpus,
    )
    assert "labels of " + str(corpus / "train.jsonl") in unknown.errors[0]


def test_provenance_is_recorded_in_the_row_and_data_check_accepts_it(tmp_path, corpus):
    rows = [
        {
            "id": "rq-17",
            "text": "escalate the outage to the on-call lead",
            "label": "ACTION",
            "suggested": "SEARCH",
            "llm_label": "ACTION",
            "reviewer": "kim",
            "model_id": "intent-minilm@1.2",
        },
        {"text": "cheers, that helped", "label": "OUT_OF_SCOPE", "kind": "thanks"},
    ]
    reviewed = _review(tmp_path, rows, "queue-week-11.jsonl")
    report = _add(reviewed, corpus)
    assert report.written and report.source == "queue-week-11"
    added = [json.loads(l) for l in (corpus / "train.jsonl").read_text(encoding="utf-8").splitlines()[-2:]]
    assert added == [
        {
            "text": "escalate the outage to the on-call lead",
            "label": "ACTION",
            "source": "queue-week-11",
            "added": "2026-03-14",
            "review_id": "rq-17",
        },
        {
            "text": "cheers, that helped",
            "label": "OUT_OF_SCOPE",
            "kind": "thanks",
            "source": "queue-week-11",
            "added": "2026-03-14",
        },
    ]
    named = _add(
        _review(tmp_path, [{"text": "reindex the wiki", "label": "ACTION"}], "x.jsonl"),
        corpus,
        source="support-q1",
    )
    assert json.loads((corpus / "train.jsonl").read_text().splitlines()[-1])["source"] == "support-q1"
    assert named.written
    check = check_files([corpus])  # the fixture's labels have under 8 rows: warnings about counts only
    assert (
        check.errors == []
        and [i for i in check.warnings if i.line or "write at least" not in i.message] == []
    )


def test_a_failed_replace_leaves_the_target_unchanged(tmp_path, corpus, monkeypatch):
    target = corpus / "train.jsonl"
    before = target.read_bytes()

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    reviewed = _review(tmp_path, [{"text": "page the database team", "label": "ACTION"}])
    with pytest.raises(OSError, match="No space left"):
        _add(reviewed, corpus)
    assert target.read_bytes() == before
    assert sorted(p.name for p in corpus.iterdir() if p.name.endswith(".tmp")) == []


def test_dry_run_writes_nothing(tmp_path, corpus):
    before = (corpus / "train.jsonl").read_bytes()
    report = _add(
        _review(tmp_path, [{"text": "page the database team", "label": "ACTION"}]), corpus, dry_run=True
    )
    assert len(report.rows) == 1 and not report.written
    assert (corpus / "train.jsonl").read_bytes() == before


def test_unusable_inputs_are_one_line_errors(tmp_path, corpus):
    reviewed = _review(tmp_path, [{"text": "page the database team", "label": "ACTION"}])
    with pytest.raises(DataAddError, match="evaluation file"):
        add_reviewed(reviewed, corpus / "dev.jsonl", data_dir=corpus)
    with pytest.raises(DataAddError, match="file not found"):
        _add(tmp_path / "missing.jsonl", corpus)
    with pytest.raises(DataAddError, match="data directory not found"):
        add_reviewed(reviewed, corpus / "train.jsonl", data_dir=tmp_path / "nope")


def test_the_corpus_is_the_training_files_folder_from_any_working_directory(tmp_path, corpus, monkeypatch):
    """Run from elsewhere, `data add --to CORPUS/train.jsonl` checks leaks against CORPUS's evaluation files."""
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    dev_text = json.loads((corpus / "dev.jsonl").read_text().splitlines()[0])["text"]
    rows = [{"text": dev_text, "label": "SEARCH"}, {"text": "page the database team", "label": "ACTION"}]
    reviewed = _review(tmp_path, rows)
    report = add_reviewed(reviewed, corpus / "train.jsonl", today=TODAY)
    assert [s.reason for s in report.skipped] == ["leak"] and len(report.rows) == 1


def test_cli_prints_a_summary_json_and_exits_non_zero_on_errors(tmp_path, corpus):
    runner = CliRunner()
    target = corpus / "train.jsonl"
    rows = [
        {"text": "page the database team", "label": "ACTION"},
        {"text": "deploy the billing service to prod", "label": "ACTION"},
    ]
    reviewed = _review(tmp_path, rows)
    args = ["data", "add", str(reviewed), "--to", str(target), "--data-dir", str(corpus)]
    dry = runner.invoke(app, [*args, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "skipped (leak)" in dry.output and "nothing written" in dry.output
    done = runner.invoke(app, [*args, "--json", "--source", "ops-review"])
    assert done.exit_code == 0, done.output
    summary = json.loads(done.output)
    assert summary["added"] == {"ACTION": 1} and summary["skipped"]["leak"] == 1 and summary["written"]
    assert summary["source"] == "ops-review"
    bad = _review(tmp_path, [{"text": "do the thing", "label": "NOPE"}], "bad.jsonl")
    failed = runner.invoke(app, ["data", "add", str(bad), "--to", str(target), "--data-dir", str(corpus)])
    assert failed.exit_code == 1
    assert f"{bad}:1: unknown label 'NOPE'" in failed.output.replace("\n", "")


def test_a_rows_domain_and_pair_travel_with_it_and_half_a_pair_is_a_plain_row(tmp_path, corpus):
    rows = [
        {
            "text": "do you like jazz at all",
            "label": "OUT_OF_SCOPE",
            "kind": "personal_chitchat",
            "pair": "T-01",
        },
        {"text": "put on some jazz in the kitchen", "label": "ACTION", "domain": "media", "pair": "T-01"},
        {
            "text": "ugh my phone is always dying",
            "label": "OUT_OF_SCOPE",
            "kind": "small_talk_mood",
            "pair": "T-02",
        },
        {"text": "hi there", "label": "OUT_OF_SCOPE", "pair": "T-02"},  # a training row already: skipped
    ]
    report = _add(_review(tmp_path, rows), corpus)
    assert report.written and len(report.rows) == 3
    added = [json.loads(l) for l in (corpus / "train.jsonl").read_text(encoding="utf-8").splitlines()[-3:]]
    assert [r.get("pair") for r in added] == ["T-01", "T-01", None]
    assert added[1]["domain"] == "media" and added[2]["kind"] == "small_talk_mood"
