"""The one data loader: labelled and unlabelled messages from JSONL, CSV, TSV, Parquet, a Hub dataset
(through ``datasets``) or plain text lines, with file:line errors.

``load_labeled`` returns texts and labels and refuses (``DataError``) rows with an empty text, a
missing or unknown label, naming the file and the line (JSONL) or row (other formats) of each
problem. A row may carry ``labels``, a list of one or two intents (primary first), instead of ``label``:
a compound request (data/compound/); ``labels`` then holds the primary and ``secondary`` the second. ``load_unlabeled`` reads out-of-scope files: texts only, whitespace-only rows allowed (they
are what such a file tests), empty strings and missing texts refused. ``load_messages`` reads
messages to route: JSONL rows (their ``text``) or one plain message per line, from a file or stdin.

The sources are read by eval.readers.sources: JSONL and plain text with the standard library (the runtime
install has no ``datasets``); CSV, TSV, Parquet and Hub datasets need ``datasets`` (the ``eval`` or
``train`` extra).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from eval.readers.sources import LOCAL_FORMATS, DataError, jsonl_table, load_table, read_text
from router.intents import RESERVED

MAX_SHOWN = 10


@dataclass
class LabeledData:
    texts: list[str]
    labels: list[str]  # the (primary) label of each row
    source: str
    format: str
    rows: list[int] = field(default_factory=list)  # 1-based row (data row, not counting a CSV header)
    lines: list[int] | None = None  # 1-based file line of each row, JSONL only
    split: str | None = None
    sha256: str | None = None
    skipped: list[dict] = field(default_factory=list)
    secondary: list[str | None] = field(default_factory=list)  # second intent of a compound row, else None

    @property
    def label_sets(self) -> list[list[str]]:
        """Every row's labels, primary first: [label] or [primary, secondary]."""
        second = self.secondary or [None] * len(self.labels)
        return [[l] + ([s] if s else []) for l, s in zip(self.labels, second, strict=True)]

    @property
    def compound(self) -> bool:
        return any(self.secondary)

    def where(self, i: int) -> str:
        return _where(self.lines[i] if self.lines else None, self.rows[i])

    def __len__(self) -> int:
        return len(self.texts)


@dataclass
class UnlabeledData:
    texts: list[str]
    source: str
    format: str
    rows: list[int] = field(default_factory=list)
    lines: list[int] | None = None
    split: str | None = None
    sha256: str | None = None
    skipped: list[dict] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.texts)


def _where(line: int | None, row: int) -> str:
    return f"line {line}" if line is not None else f"row {row}"


def _loc(source, line: int | None, row: int) -> str:
    return f"{source}:{line}" if line is not None else f"{source}: row {row}"


# ------------------------------------------------------------------------------------- loading
def load_labeled(
    source: str | Path,
    *,
    labels: Sequence[str] | None = None,
    text_column: str = "text",
    label_column: str = "label",
    split: str | None = None,
    skip_invalid: bool = False,
) -> LabeledData:
    """Load labeled messages. Invalid rows raise DataError, or are dropped and listed in ``skipped``.
    ``labels``: the labels a row may carry (a model's); None accepts any non-empty string."""
    table, fmt, lines, digest = load_table(source, split)
    multi_column = label_column + "s"  # "labels": a compound row's intents, primary first
    has_multi = multi_column in table.column_names
    _require_columns(table, source, [text_column] + ([] if has_multi else [label_column]), "label")
    label_names = _class_label_names(table, label_column)
    texts_col = table[text_column]
    labels_col = table[label_column] if label_column in table.column_names else [None] * len(table)
    multi_col = table[multi_column] if has_multi else [None] * len(table)
    known = list(labels) if labels is not None else None
    texts, out_labels, second, rows, kept_lines, problems = [], [], [], [], [], []
    for i, (text, label, multi) in enumerate(zip(texts_col, labels_col, multi_col, strict=True)):
        if label_names is not None and isinstance(label, int) and 0 <= label < len(label_names):
            label = label_names[label]
        reason = _text_problem(text, text_column, allow_blank=False, fmt=fmt)
        secondary = None
        if reason is None and multi is not None:
            reason, primary, secondary = _multi_problem(multi, label, multi_column, label_column, known)
            label = primary if reason is None else label
        elif reason is None:
            if label is None:
                reason = f"{_absent(fmt)} '{label_column}'"
            elif isinstance(label, str) and not label.strip():
                reason = f"empty '{label_column}'"
            elif not isinstance(label, str):
                reason = f"'{label_column}' must be a string, got {type(label).__name__} {label!r}"
            elif known is not None and label not in known:
                reason = f"unknown label {label!r} (the model knows: {', '.join(known)})"
        if reason is not None:
            problems.append({"row": i + 1, "line": lines[i] if lines else None, "reason": reason})
            continue
        texts.append(text)
        out_labels.append(label)
        second.append(secondary)
        rows.append(i + 1)
        if lines:
            kept_lines.append(lines[i])
    _handle_problems(problems, source, skip_invalid)
    if not texts:
        raise DataError(f"{source}: no usable rows")
    return LabeledData(
        texts=texts,
        labels=out_labels,
        source=str(source),
        format=fmt,
        rows=rows,
        lines=kept_lines if lines else None,
        split=split if fmt == "hub" else None,
        sha256=digest,
        skipped=problems,
        secondary=second,
    )


def _multi_problem(
    multi, label, column: str, label_column: str, known
) -> tuple[str | None, str | None, str | None]:
    """(problem or None, primary, secondary) of a row's ``labels`` list."""
    if not isinstance(multi, list) or not multi or len(multi) > 2:
        return f"'{column}' must be a list of one or two labels, got {multi!r}"[:200], None, None
    if not all(isinstance(m, str) and m.strip() for m in multi):
        return f"'{column}' must hold non-empty strings, got {multi!r}"[:200], None, None
    unknown = [m for m in multi if known is not None and m not in known]
    if unknown:
        return f"unknown label {unknown[0]!r} in '{column}' (the model knows: {', '.join(known)})", None, None
    if len(multi) == 2:
        if multi[0] == multi[1]:
            return f"'{column}' repeats {multi[0]!r}: a compound row has two different intents", None, None
        if set(multi) & set(RESERVED):
            return f"'{column}' pairs {multi}: only intents combine, not {' or '.join(RESERVED)}", None, None
    if label is not None and label != multi[0]:
        return f"'{label_column}' {label!r} differs from the first of '{column}' {multi}", None, None
    return None, multi[0], (multi[1] if len(multi) == 2 else None)


def load_unlabeled(
    source: str | Path,
    *,
    text_column: str = "text",
    split: str | None = None,
    skip_invalid: bool = False,
) -> UnlabeledData:
    """Load unlabeled (out-of-scope) messages; a label column, if present, is ignored."""
    table, fmt, lines, digest = load_table(source, split)
    return _unlabeled(table, source, fmt, lines, digest, text_column, split, skip_invalid)


def load_messages(source: str | Path, *, text_column: str = "text") -> list[str]:
    """Messages to route, from a file or '-' (stdin): a JSONL/CSV/TSV/Parquet file gives its ``text``
    column (every row must hold a string there); any other file gives one message per non-blank line,
    and so does stdin unless its first non-blank line is a JSON object (then it is read as JSONL)."""
    if str(source) != "-" and Path(str(source)).suffix.lower() in LOCAL_FORMATS:
        return load_unlabeled(source, text_column=text_column).texts
    text = read_text(source)
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].lstrip().startswith("{"):
        return lines
    name = "<stdin>" if str(source) == "-" else str(source)
    table, numbers = jsonl_table(name, text)
    return _unlabeled(table, name, "jsonl", numbers, None, text_column, None, False).texts


def _unlabeled(table, source, fmt, lines, digest, text_column, split, skip_invalid) -> UnlabeledData:
    _require_columns(table, source, [text_column], None)
    texts, rows, kept_lines, problems = [], [], [], []
    for i, text in enumerate(table[text_column]):
        reason = _text_problem(text, text_column, allow_blank=True, fmt=fmt)
        if reason is not None:
            problems.append({"row": i + 1, "line": lines[i] if lines else None, "reason": reason})
            continue
        texts.append(text)
        rows.append(i + 1)
        if lines:
            kept_lines.append(lines[i])
    _handle_problems(problems, source, skip_invalid)
    if not texts:
        raise DataError(f"{source}: no usable rows")
    return UnlabeledData(
        texts=texts,
        source=str(source),
        format=fmt,
        rows=rows,
        lines=kept_lines if lines else None,
        split=split if fmt == "hub" else None,
        sha256=digest,
        skipped=problems,
    )


def _absent(fmt: str) -> str:
    """A null cell: an empty field in CSV/TSV, a missing key (or null) in JSON and Hub data."""
    return "empty" if fmt in ("csv", "tsv") else "missing"


def _text_problem(text, column: str, allow_blank: bool, fmt: str) -> str | None:
    if text is None:
        return f"{_absent(fmt)} '{column}'"
    if not isinstance(text, str):
        return f"'{column}' must be a string, got {type(text).__name__}"
    if text == "" or (not allow_blank and not text.strip()):
        return f"empty '{column}'"
    return None


def _handle_problems(problems: list[dict], source, skip_invalid: bool) -> None:
    if not problems or skip_invalid:
        return
    located = [f"{_loc(source, p['line'], p['row'])}: {p['reason']}" for p in problems]
    rest = len(problems) - 1
    more = ""
    if rest:
        at = ", ".join(_where(p["line"], p["row"]) for p in problems[1:MAX_SHOWN])
        more = f" (and {rest} more invalid row(s): {at}{', ...' if rest >= MAX_SHOWN else ''})"
    raise DataError(
        f"{located[0]}{more}; {len(problems)} invalid row(s): fix the data, or pass --skip-invalid "
        "(skip_invalid=True) to leave them out",
        located,
    )


def _require_columns(table, source, columns: list[str], kind: str | None) -> None:
    have = list(table.column_names)
    for c in columns:
        if c not in have:
            flag = "--label-column" if kind == "label" and c == columns[-1] else "--text-column"
            raise DataError(
                f"{source}: no column {c!r} (columns: {', '.join(have) or 'none'}); name it with {flag}"
            )


def _class_label_names(table, column: str) -> list[str] | None:
    """Names of a ClassLabel column (Hub datasets often store labels as integers)."""
    feature = getattr(table, "features", {}).get(column)
    names = getattr(feature, "names", None)
    return list(names) if names else None
