"""Merging reviewed rows (a production review queue's JSONL or CSV export) into a training file.

Each reviewed row needs a non-empty ``text`` and a ``label``; other fields (``suggested``, ``llm_label``,
``reviewer``, ``model_id``...) are dropped, except ``kind``, which is kept, and ``id``, which is kept as
``review_id``. A label must be one of the target file's labels (or, for an empty or new target, those of
``train.jsonl`` in the data directory), a reserved label (OUT_OF_SCOPE, CONTINUATION) or one allowed by
name. Rows are compared by the review queue's near-duplicate key (eval.review.queue.normalise: case,
punctuation and apostrophes folded, every run of digits one '0'), so that a message ``review`` counts as
a repeat is one here too:

- a row whose key is that of a row of an evaluation file in the data directory (dev, test, blind, oos,
  compound/*, conversations/*) is skipped as a leak, so the evaluation splits stay clean;
- a row whose key is that of an existing training row is skipped as a duplicate, or, with another
  label, as a conflicting label; so is a later reviewed row with the key of an earlier one (two reviewed
  rows with one key and different labels are both skipped as conflicting).

Added rows carry their provenance in the row: ``source`` (a name for the review batch) and ``added``
(the ISO date); ``data check`` keeps extra keys, so the corpus stays valid. Any schema or label error
means nothing is written. The target is rewritten through a temporary file and an atomic rename, so a
failure leaves it as it was.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path

from eval.readers.sources import iter_jsonl
from eval.review.queue import normalise
from training.corpus.compound_rows import compound_files, is_compound_file
from training.corpus.label_set import MIN_ROWS
from training.corpus.labelled import (
    CorpusError,
    is_unlabeled_file,
    leaks,
    load_examples,
    split_of,
)
from training.corpus.reviewed import KEPT_FIELDS, DataAddError, read_reviewed, row_problem

CONVERSATIONS_DIR = "conversations"


@dataclass
class Skip:
    line: int
    reason: str  # "duplicate" | "leak" | "conflict"
    detail: str
    text: str


@dataclass
class AddReport:
    reviewed: str
    target: str
    source: str
    added_date: str
    dry_run: bool
    read: int = 0
    rows: list[dict] = field(default_factory=list)  # the rows added (or, with dry_run, to add)
    skipped: list[Skip] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # "file:line: problem"
    warnings: list[str] = field(default_factory=list)
    checked_against: list[str] = field(default_factory=list)  # evaluation and training files compared
    written: bool = False

    def added_per_label(self) -> dict[str, int]:
        return dict(sorted(Counter(r["label"] for r in self.rows).items()))

    def skipped_counts(self) -> dict[str, int]:
        counts = Counter(s.reason for s in self.skipped)
        return {reason: counts.get(reason, 0) for reason in ("duplicate", "leak", "conflict")}

    def summary_rows(self) -> list[list]:
        """[what, count] rows for the summary table."""
        rows: list[list] = [["read", self.read]]
        rows += [[f"added {label}", n] for label, n in self.added_per_label().items()]
        rows.append(["added (total)", len(self.rows)])
        skipped = self.skipped_counts()
        rows += [
            ["skipped: duplicate", skipped["duplicate"]],
            ["skipped: leak into an evaluation file", skipped["leak"]],
            ["skipped: conflicting label", skipped["conflict"]],
            ["errors", len(self.errors)],
        ]
        return rows

    def to_dict(self) -> dict:
        return {
            "reviewed": self.reviewed,
            "target": self.target,
            "source": self.source,
            "added_date": self.added_date,
            "provenance": "in-row fields 'source' and 'added'",
            "dry_run": self.dry_run,
            "written": self.written,
            "read": self.read,
            "added": self.added_per_label(),
            "added_total": len(self.rows),
            "skipped": self.skipped_counts(),
            "errors": self.errors,
            "warnings": self.warnings,
            "skipped_rows": [asdict(s) for s in self.skipped],
            "checked_against": self.checked_against,
        }


def duplicate_key(text: str) -> str:
    """The key reviewed rows are compared by: the review queue's near-duplicate key, which folds digits
    ("book room 4" is a repeat of "Book room 12!"); for a text that normalises to nothing (punctuation or
    emoji only), the stripped text itself."""
    return normalise(text)


def _texts(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every row of an evaluation file; a conversation file gives each turn's text."""
    try:
        raw = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DataAddError(f"{path}: cannot read it for the leak check: {e}") from None
    out = []
    for n, obj, _ in iter_jsonl(raw):
        if obj is None:
            continue
        turns = obj.get("turns") if isinstance(obj.get("turns"), list) else [obj]
        out += [(n, t["text"]) for t in turns if isinstance(t, dict) and isinstance(t.get("text"), str)]
    return out


def evaluation_files(data_dir: Path) -> list[Path]:
    """The files of ``data_dir`` a training row must not overlap (the splits training.corpus.labelled.leaks pairs
    with train, the compound splits and the conversations but their training file)."""
    top = [p for p in sorted(data_dir.glob("*.jsonl")) if leaks("train", split_of(p))]
    talk = [p for p in sorted((data_dir / CONVERSATIONS_DIR).glob("*.jsonl")) if split_of(p) != "train"]
    return [*top, *compound_files(data_dir), *talk]


def leak_index(eval_files: list[Path]) -> dict[str, tuple[str, int, str]]:
    """(file, line, text) of the first evaluation row with each duplicate key."""
    index: dict[str, tuple[str, int, str]] = {}
    for path in eval_files:
        for n, text in _texts(path):
            index.setdefault(duplicate_key(text), (str(path), n, text))
    return index


def held_out(data_dir: str | Path) -> Callable[[str], bool]:
    """Whether a message is, or nearly is, a row of ``data_dir``'s evaluation files: a row ``data add``
    would refuse as a leak, so ``review`` leaves it out of the queue."""
    keys = leak_index(evaluation_files(Path(data_dir)))
    return lambda text: duplicate_key(text) in keys


def _training_files(target: Path, data_dir: Path) -> list[Path]:
    """The target and the data directory's train split files, each once."""
    files = [target, *sorted(p for p in data_dir.glob("*.jsonl") if split_of(p) == "train")]
    out: list[Path] = []
    for p in files:
        if p.is_file() and all(not q.samefile(p) for q in out):
            out.append(p)
    return out


def _load(path: Path):
    try:
        return load_examples(path)
    except CorpusError as e:
        raise DataAddError(f"{e}; fix it (intent-router data check) before adding rows") from None


def _corpus_of(target: Path) -> Path:
    """The corpus folder a training file belongs to: its own folder when it holds a dev or test split."""
    here = target.parent
    return here if any(here.glob("dev*.jsonl")) or any(here.glob("test*.jsonl")) else Path("data")


def add_reviewed(
    reviewed: str | Path,
    target: str | Path,
    *,
    source: str | None = None,
    data_dir: str | Path | None = None,
    new_labels: tuple[str, ...] | list[str] = (),
    dry_run: bool = False,
    today: date | None = None,
    keep_existing: bool = False,
) -> AddReport:
    """Check the reviewed rows against the schema, the label set, the evaluation files of ``data_dir``
    (leaks) and the training rows (duplicates, conflicting labels), then append the rows that pass to
    ``target`` with their provenance. Nothing is written with ``dry_run``, or when any row has an error
    (see the report's errors); a conflicting label is an error unless ``keep_existing``, which keeps the
    training file's label and leaves the disagreeing reviewed rows out. ``data_dir`` defaults to the folder ``target`` is in when that holds a dev
    or test file, else ./data."""
    reviewed, target = Path(reviewed), Path(target)
    data_dir = Path(data_dir) if data_dir is not None else _corpus_of(target)
    source = source if source is not None else reviewed.stem
    eval_files = _check_places(source, data_dir, target)
    report = AddReport(str(reviewed), str(target), source, (today or date.today()).isoformat(), dry_run)
    parsed = read_reviewed(reviewed)
    target_rows = _load(target) if target.is_file() and target.read_bytes().strip() else []
    labels_from, labels = _label_set(target, target_rows, data_dir)
    train_files = _training_files(target, data_dir)
    train_index: dict[str, tuple[str, int, str, str | None]] = {}
    for path in train_files:
        for ex in target_rows if path == target else _load(path):
            train_index.setdefault(duplicate_key(ex.text), (str(path), ex.line, ex.text, ex.label))
    report.checked_against = [str(p) for p in (*eval_files, *train_files)]
    check = _RowCheck(
        reviewed, report, labels, set(new_labels), labels_from, leak_index(eval_files), train_index
    )
    for n, obj, problem in parsed:
        check.row(n, obj, problem)
    report.rows = _whole_pairs([row for key, (_, row) in check.kept.items() if key not in check.conflicted])
    report.skipped.sort(key=lambda s: s.line)
    conflicts = sum(s.reason == "conflict" for s in report.skipped)
    if conflicts and not keep_existing:
        report.errors.append(
            f"{conflicts} reviewed row(s) give a label that another row disagrees with (skipped (conflict), "
            "above): correct them, or pass --keep-existing to keep the training file's labels"
        )
    counts = Counter(ex.label for ex in target_rows) + Counter(r["label"] for r in report.rows)
    for label in sorted({r["label"] for r in report.rows} - labels):
        if counts[label] < MIN_ROWS:
            report.warnings.append(
                f"label {label!r} will have {counts[label]} row(s) in {target}; "
                f"data check needs at least {MIN_ROWS} train rows of a label"
            )
    if report.rows and not report.errors and not dry_run:
        append_rows(target, report.rows)
        report.written = True
    return report


def _check_places(source: str, data_dir: Path, target: Path) -> list[Path]:
    """Refuse an empty batch name, a missing corpus, and a target that is not a training file; returns
    the corpus's evaluation files."""
    if not source.strip():
        raise DataAddError("--source must name the review batch, got an empty name")
    if not data_dir.is_dir():
        raise DataAddError(
            f"{data_dir}: data directory not found (the leak check needs its dev/test files; name it with "
            "--data-dir)"
        )
    if target.exists() and not target.is_file():
        raise DataAddError(f"{target}: not a file")
    if not target.parent.is_dir():
        raise DataAddError(f"{target.parent}: directory not found")
    if is_unlabeled_file(target) or is_compound_file(target):
        raise DataAddError(f"{target}: out-of-scope and compound files take other rows; name a training file")
    eval_files = evaluation_files(data_dir)
    if target.exists() and any(target.samefile(p) for p in eval_files):
        raise DataAddError(
            f"{target}: an evaluation file of {data_dir}; add reviewed rows to a training file"
        )
    return eval_files


def _label_set(target: Path, target_rows, data_dir: Path) -> tuple[str, set[str]]:
    """The labels a reviewed row may take, and the file they come from: the target's, else train.jsonl's."""
    labels_from, labels = str(target), {ex.label for ex in target_rows if ex.label}
    if not labels and (data_dir / "train.jsonl").is_file():
        labels_from = str(data_dir / "train.jsonl")
        labels = {ex.label for ex in _load(data_dir / "train.jsonl") if ex.label}
    return labels_from, labels


@dataclass
class _RowCheck:
    """Each reviewed row in turn: an error, skipped (a leak, a duplicate, a conflicting label), or kept."""

    reviewed: Path
    report: AddReport
    labels: set[str]
    allowed: set[str]
    labels_from: str
    leaked: dict
    train_index: dict
    kept: dict = field(default_factory=dict)  # key -> (line, row) of the first reviewed row with that key
    conflicted: set = field(default_factory=set)

    def row(self, n: int, obj: dict, problem: str | None) -> None:
        report, reviewed = self.report, self.reviewed
        report.read += 1
        problem = problem or row_problem(obj, self.labels, self.allowed, self.labels_from)
        if problem:
            report.errors.append(f"{reviewed}:{n}: {problem}")
            return
        text, label = obj["text"], obj["label"]
        key = duplicate_key(text)
        if key in self.leaked:
            src, line, other = self.leaked[key]
            report.skipped.append(Skip(n, "leak", f"{_kind(text, other)} of {src}:{line}", text))
        elif key in self.train_index:
            src, line, other, other_label = self.train_index[key]
            detail = f"{_kind(text, other)} of {src}:{line}"
            if other_label == label:
                report.skipped.append(Skip(n, "duplicate", detail, text))
            else:
                report.skipped.append(
                    Skip(n, "conflict", f"{detail}, which is {other_label}, here {label}", text)
                )
        elif key in self.kept:
            self._again(n, key, text, label)
        else:
            self.kept[key] = (n, _training_row(obj, report.source, report.added_date))

    def _again(self, n: int, key: str, text: str, label: str) -> None:
        """A reviewed row whose text an earlier reviewed row had: a duplicate, or both rows conflict."""
        first_line, first = self.kept[key]
        detail = f"{_kind(text, first['text'])} of {self.reviewed}:{first_line}"
        if first["label"] == label and key not in self.conflicted:
            self.report.skipped.append(Skip(n, "duplicate", detail, text))
            return
        self.report.skipped.append(
            Skip(n, "conflict", f"{detail}, which is {first['label']}, here {label}", text)
        )
        if key not in self.conflicted:
            self.conflicted.add(key)
            again = f"{_kind(text, first['text'])} of {self.reviewed}:{n}, which is {label}"
            self.report.skipped.append(Skip(first_line, "conflict", again, first["text"]))


def _kind(text: str, other: str) -> str:
    return "exact duplicate" if text == other else "near-duplicate"


def _training_row(obj: dict, source: str, added: str) -> dict:
    """A reviewed row as a training row: text, label, the kept fields and the provenance."""
    row = {"text": obj["text"], "label": obj["label"]}
    row.update({k: obj[k] for k in KEPT_FIELDS if obj.get(k)})
    row.update(source=source, added=added)
    if obj.get("id") not in (None, ""):
        row["review_id"] = obj["id"]
    return row


def _whole_pairs(rows: list[dict]) -> list[dict]:
    """``rows`` with the pair id taken off a row whose pair has no other row among them: a pair is two
    contrasting rows in one split, and half of one is a plain row."""
    sizes = Counter(r["pair"] for r in rows if "pair" in r)
    return [
        r if sizes.get(r.get("pair"), 2) >= 2 else {k: v for k, v in r.items() if k != "pair"} for r in rows
    ]


def append_rows(path: Path, rows: list[dict]) -> None:
    """Append JSONL rows to ``path`` (created if missing): the old content and the new rows go to a
    temporary file beside it, which then replaces it, so the file is whole before and after."""
    old = path.read_bytes() if path.exists() else b""
    if old and not old.endswith(b"\n"):
        old += b"\n"
    new = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")
    write_atomic(path, old + new)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in its directory and os.replace; on any failure
    the temporary file is removed and ``path`` is untouched."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename durable too
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
