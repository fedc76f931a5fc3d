"""The label set of a corpus: the train split's labels. ``data check`` holds the other splits to them and
checks that each label has rows enough to learn and that no label dwarfs another."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

MIN_ROWS = 4  # fewer train rows of a label is an error: too few to calibrate or cross-validate a class
FEW_ROWS = 8  # fewer is a warning: SetFit's few-shot regime starts at about 8 examples a label
MAX_IMBALANCE = 10.0  # a train label with over 10x the rows of another is a warning


def label_set_issues(
    examples: dict[str, list], split_of: Callable[[Path], str]
) -> list[tuple[str, str, int, str]]:
    """The train split's labels are the label set: rows of the other splits naming another label are
    errors; so are train labels with under MIN_ROWS rows (a warning under FEW_ROWS), and a label set
    whose largest label has over MAX_IMBALANCE times the rows of the smallest is a warning. ``examples``:
    file -> its training.corpus.labelled.Example rows. Returns (severity, file, line, message) tuples."""
    issues: list[tuple[str, str, int, str]] = []
    train = [(src, rows) for src, rows in examples.items() if split_of(Path(src)) == "train"]
    if not train:
        return issues
    counts = Counter(ex.label for _, rows in train for ex in rows if ex.label is not None)
    known = set(counts)
    for src, rows in examples.items():
        if split_of(Path(src)) == "train":
            continue
        for ex in rows:
            for label in (ex.label, ex.secondary):
                if label is not None and label not in known:
                    msg = f"label {label!r} is not a label of the train split ({', '.join(sorted(known))})"
                    issues.append(("error", src, ex.line, msg))
    where = train[0][0]
    for label, n in sorted(counts.items()):
        if n < FEW_ROWS:
            severity = "error" if n < MIN_ROWS else "warning"
            need = MIN_ROWS if n < MIN_ROWS else FEW_ROWS
            msg = f"label {label!r} has {n} train row(s); write at least {need}"
            issues.append((severity, where, 0, msg))
    if len(counts) >= 2 and max(counts.values()) > MAX_IMBALANCE * min(counts.values()):
        big, small = max(counts, key=counts.get), min(counts, key=counts.get)
        msg = (
            f"unbalanced labels: {big!r} has {counts[big]} train rows, {small!r} {counts[small]} "
            f"(over {MAX_IMBALANCE:g}x)"
        )
        issues.append(("warning", where, 0, msg))
    return issues
