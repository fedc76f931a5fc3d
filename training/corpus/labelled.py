"""Loading and checking the labeled JSONL corpus.

Rows are ``{"text": str, "label": str}``; files whose name starts with ``oos`` hold out-of-scope
messages without a label. Extra keys (for example ``pair``, the id of a boundary-rule pair) are kept.
A directory's ``compound/`` files (two-intent rows and their twins: ``{train,dev,test,blind}.jsonl`` and
those named ``<split>_*.jsonl``) are checked too, by training.corpus.compound_rows's rules; each split is
one of its own ("compound/train"...) for leakage.
"""

from __future__ import annotations

import re
import statistics
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from eval.readers.sources import DATA_SUFFIXES, DataError, iter_rows
from router.intents import intents_of, label_problem
from training.corpus.compound_rows import (
    CompoundRow,
    check_pairs,
    compound_counts,
    compound_files,
    file_stem,
    is_compound_file,
    named_for,
    pair_kinds,
    parse_row,
)
from training.corpus.label_set import label_set_issues

SPLIT_ORDER = ("train", "dev", "test", "oos", "blind")
# Overlap between these splits leaks evaluation data into training (or one eval set into another);
# a compound split overlaps with no other split at all (see leaks()).
LEAK_PAIRS = {
    ("train", "dev"),
    ("train", "test"),
    ("dev", "test"),
    ("train", "oos"),
    ("dev", "oos"),
    ("test", "oos"),
    # blind.jsonl: written by writers who saw only the labeling contract, never the corpus (data/README.md)
    ("train", "blind"),
    ("dev", "blind"),
    ("test", "blind"),
    ("oos", "blind"),
}


class CorpusError(ValueError):
    """A corpus file cannot be used; the message names the file and line."""


@dataclass(frozen=True)
class Example:
    text: str
    label: str | None
    source: str = ""
    line: int = 0
    secondary: str | None = None  # the second intent of a compound row


def is_unlabeled_file(path: Path) -> bool:
    return Path(path).name.lower().startswith("oos")


def split_of(path: Path) -> str:
    """The split a file belongs to, from its name: train.jsonl -> train, oos.jsonl -> oos,
    compound/dev.jsonl -> compound/dev."""
    prefix = "compound/" if is_compound_file(path) else ""
    for s in SPLIT_ORDER:
        if named_for(path, s):
            return prefix + s
    return prefix + file_stem(path)


def leaks(split_a: str, split_b: str) -> bool:
    """Whether a text shared by these two splits leaks: the pairs of LEAK_PAIRS, and any other split
    with a compound split (its texts are in no other file)."""
    if split_a == split_b:
        return False
    pair = (split_a, split_b)
    return pair in LEAK_PAIRS or pair[::-1] in LEAK_PAIRS or "compound/" in split_a + split_b


def normalize_text(text: str) -> str:
    """Key for near-duplicate detection: case, accents, punctuation and whitespace folded."""
    t = unicodedata.normalize("NFKC", text).casefold()
    t = "".join(ch if (ch.isalnum() or ch.isspace()) else " " for ch in t)
    return re.sub(r"\s+", " ", t).strip()


def load_examples(path: str | Path, labels: Sequence[str] | None = None) -> list[Example]:
    """Load a labeled JSONL file strictly: the first problem raises CorpusError with file and line."""
    report = check_files([Path(path)], labels=labels, duplicates=False, label_set=False)
    if report.errors:
        shown = "\n".join(f"  {i}" for i in report.errors[:10])
        more = f"\n  ... and {len(report.errors) - 10} more" if len(report.errors) > 10 else ""
        raise CorpusError(f"{path}: {len(report.errors)} problem(s):\n{shown}{more}")
    return report.examples[str(Path(path))]


@dataclass
class Issue:
    severity: str  # "error" | "warning"
    source: str
    line: int
    message: str

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        return f"{self.severity}: {where}: {self.message}"


@dataclass
class CheckReport:
    files: list[str] = field(default_factory=list)
    examples: dict[str, list[Example]] = field(default_factory=dict)
    issues: list[Issue] = field(default_factory=list)
    compound: dict[str, list[CompoundRow]] = field(default_factory=dict)  # file -> rows, compound files

    @property
    def errors(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == "error"]

    @property
    def warnings(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == "warning"]

    def class_balance(self) -> dict[str, dict[str, int]]:
        """split -> label -> count (out-of-scope rows under the label '(none)')."""
        out: dict[str, Counter] = defaultdict(Counter)
        for src, rows in self.examples.items():
            for ex in rows:
                out[split_of(Path(src))][ex.label or "(none)"] += 1
        return {s: dict(sorted(c.items())) for s, c in out.items()}

    def length_stats(self) -> dict[str, dict[str, float]]:
        by_split: dict[str, list[int]] = defaultdict(list)
        for src, rows in self.examples.items():
            by_split[split_of(Path(src))].extend(len(ex.text.split()) for ex in rows)
        out = {}
        for s, lens in by_split.items():
            if not lens:
                continue
            lens.sort()
            out[s] = {
                "rows": len(lens),
                "min_words": lens[0],
                "median_words": statistics.median(lens),
                "mean_words": round(statistics.fmean(lens), 2),
                "p90_words": lens[min(len(lens) - 1, int(0.9 * len(lens)))],
                "max_words": lens[-1],
                "share_le_4_words": round(sum(n <= 4 for n in lens) / len(lens), 3),
                "share_ge_25_words": round(sum(n >= 25 for n in lens) / len(lens), 3),
            }
        return out

    def compound_counts(self) -> dict[str, dict[str, int]]:
        """compound split -> rows, compound rows, twins and compound rows per pair kind."""
        by_split: dict[str, list[CompoundRow]] = defaultdict(list)
        for src, rows in self.compound.items():
            by_split[split_of(Path(src))].extend(rows)
        return compound_counts(by_split)

    def tables(self) -> list[tuple[str, list[str], list[list]]]:
        """(title, header, rows) of the class balance and the length statistics, for printing."""
        balance = self.class_balance()
        labels = sorted({l for c in balance.values() for l in c})
        out = [
            (
                "Class balance",
                ["split", *labels, "total"],
                [[s, *[c.get(l, 0) for l in labels], sum(c.values())] for s, c in balance.items()],
            )
        ]
        stats = self.length_stats()
        cols = ["rows", "min_words", "median_words", "mean_words", "p90_words", "max_words"]
        cols += ["share_le_4_words", "share_ge_25_words"]
        header = ["split", *[c.replace("_words", "").replace("share_", "") for c in cols]]
        out.append(("Length (words)", header, [[s, *[v[c] for c in cols]] for s, v in stats.items()]))
        if self.compound:
            counts = self.compound_counts()
            kinds = pair_kinds(self.compound.values())
            cols = ["rows", "compound", "twins", *kinds]
            short = _abbreviations({i for k in kinds for i in k.split("+")})
            header = ["split", *cols[:3], *("+".join(short[i] for i in k.split("+")) for k in kinds)]
            key = ", ".join(f"{a} = {i}" for i, a in sorted(short.items(), key=lambda kv: kv[1]))
            rows = [[s, *[c.get(k, 0) for k in cols]] for s, c in counts.items()]
            out.append((f"Compound requests by pair kind ({key})", header, rows))
        return out

    def to_dict(self) -> dict:
        return {
            "files": self.files,
            "errors": [vars(i) for i in self.errors],
            "warnings": [vars(i) for i in self.warnings],
            "class_balance": self.class_balance(),
            "length_stats": self.length_stats(),
            "compound": self.compound_counts(),
        }


def _abbreviations(names: set[str]) -> dict[str, str]:
    """Each name's shortest prefix that no other name shares (a table header: S+A for SEARCH+ACTION)."""
    for k in range(1, max(map(len, names), default=1) + 1):
        short = {n: n[:k] for n in names}
        if len(set(short.values())) == len(names):
            return short
    return {n: n for n in names}


def expand_paths(paths: Iterable[str | Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            found = [q for q in p.iterdir() if q.suffix.lower() in DATA_SUFFIXES and q.is_file()]
            found.sort(key=lambda q: (_split_rank(q), q.name))
            out.extend(found)
            if not is_compound_file(p / "x"):
                out.extend(compound_files(p))
        else:
            out.append(p)
    return out


def _split_rank(p: Path) -> int:
    s = split_of(p)
    return SPLIT_ORDER.index(s) if s in SPLIT_ORDER else len(SPLIT_ORDER)


def _parse_file(path: Path, labels: Sequence[str], report: CheckReport) -> list[Example]:
    src = str(path)
    unlabeled = is_unlabeled_file(path)
    compound = is_compound_file(path)
    rows: list[Example] = []
    if compound:
        report.compound[src] = []

    def err(line: int, msg: str) -> None:
        report.issues.append(Issue("error", src, line, msg))

    if not path.is_file():
        err(0, "file not found")
        return rows
    try:
        parsed = list(iter_rows(path))
    except DataError as e:
        err(0, str(e).removeprefix(f"{path}: "))
        return rows
    for n, obj, problem in parsed:
        if problem is None:
            example, problem = _example(obj, n, src, labels, unlabeled, compound)
        if problem is not None:
            err(n, problem)
            continue
        if compound:
            report.compound[src].append(example.row)
        rows.append(example.example)
    if not rows and not any(i.source == src and i.severity == "error" for i in report.issues):
        err(0, "no rows")
    return rows


@dataclass
class _Parsed:
    example: Example
    row: object = None  # a compound file's row (training.corpus.compound_rows)


def _example(
    obj: dict, n: int, src: str, labels, unlabeled: bool, compound: bool
) -> tuple[_Parsed | None, str | None]:
    """One parsed row as an Example, or the problem that keeps it out."""
    if "text" not in obj:
        return None, "missing 'text'"
    text = obj["text"]
    if not isinstance(text, str):
        return None, f"'text' must be a string, got {type(text).__name__}"
    label = obj.get("label")
    if unlabeled:
        # Out-of-scope rows may be whitespace or emoji only: that is what they test.
        if label is not None:
            return None, f"out-of-scope file rows carry no label, found {label!r}"
        if text == "":
            return None, "empty text"
        return _Parsed(Example(text=text, label=label, source=src, line=n)), None
    if not text.strip():
        return None, "empty text"
    if compound:
        row, problem = parse_row(obj, n, None if labels is None else intents_of(labels))
        if row is None:
            return None, problem
        second = row.labels[1] if len(row.labels) > 1 else None
        return _Parsed(
            Example(text=text, label=row.labels[0], source=src, line=n, secondary=second), row
        ), None
    if "label" not in obj or label is None:
        return None, "missing 'label'"
    if not isinstance(label, str):
        return None, f"'label' must be a string, got {type(label).__name__}"
    if labels is not None and label not in labels:
        return None, f"unknown label {label!r} (expected one of {', '.join(labels)})"
    problem = label_problem(label) if labels is None else None
    if problem:
        return None, problem
    return _Parsed(Example(text=text, label=label, source=src, line=n)), None


def check_files(
    paths: Iterable[str | Path],
    labels: Sequence[str] | None = None,
    duplicates: bool = True,
    label_set: bool = True,
) -> CheckReport:
    """Validate corpus files and find duplicates within and across splits. ``labels``: the labels a row
    may carry; None learns them from the train split (any valid names), and then, with ``label_set``,
    the other splits may only use those, and each label's rows and the balance are checked
    (training.corpus.label_set)."""
    report = CheckReport()
    paths = [Path(p) for p in paths]
    files = expand_paths(paths)
    for folder in (p for p in paths if p.is_dir() and not any(f.parent == p for f in files)):
        report.issues.append(Issue("error", str(folder), 0, f"no data files ({', '.join(DATA_SUFFIXES)})"))
    for path in files:
        report.files.append(str(path))
        report.examples[str(path)] = _parse_file(path, labels, report)
    report.issues += [Issue("error", src, line, msg) for src, line, msg in check_pairs(report.compound)]
    if labels is None and label_set:
        report.issues += [Issue(*i) for i in label_set_issues(report.examples, split_of)]
    if duplicates:
        _find_duplicates(report)
    return report


def _find_duplicates(report: CheckReport) -> None:
    seen: dict[str, list[Example]] = defaultdict(list)
    for rows in report.examples.values():
        for ex in rows:
            key = normalize_text(ex.text)
            if key:  # punctuation/emoji-only rows normalise to nothing; compare those exactly
                seen[key].append(ex)
            else:
                seen["\x00" + ex.text.strip()].append(ex)
    for group in seen.values():
        if len(group) < 2:
            continue
        first = group[0]
        for other in group[1:]:
            s1, s2 = split_of(Path(first.source)), split_of(Path(other.source))
            exact = first.text == other.text
            kind = "exact duplicate" if exact else "near-duplicate"
            where = f"{first.source}:{first.line}"
            if leaks(s1, s2):
                report.issues.append(
                    Issue(
                        "error",
                        other.source,
                        other.line,
                        f"leak: {kind} of {where} ({s1} and {s2} overlap): {other.text!r}",
                    )
                )
            elif (first.label, first.secondary) != (other.label, other.secondary):
                report.issues.append(
                    Issue(
                        "error",
                        other.source,
                        other.line,
                        f"conflicting labels: {kind} of {where} is {_labels(first)}, here {_labels(other)}",
                    )
                )
            else:
                report.issues.append(
                    Issue("warning", other.source, other.line, f"{kind} of {where}: {other.text!r}")
                )


def _labels(ex: Example) -> str:
    return f"{ex.label}+{ex.secondary}" if ex.secondary else str(ex.label)
