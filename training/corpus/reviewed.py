"""Reading reviewed rows for ``data add``: a review queue's JSONL or CSV export, or a Label Studio export
of the tasks ``review --label-studio`` wrote, and the check of each row's text and label."""

from __future__ import annotations

import csv
import difflib
import io
import json
from pathlib import Path

from eval.readers.sources import iter_jsonl
from router.intents import RESERVED, label_problem

# reviewed fields that travel with the row into the training file: an out-of-scope row's kind, the domain
# it was written for, and the id of the boundary pair it belongs to (dropped when its other row is not added)
KEPT_FIELDS = ("kind", "domain", "pair")


class DataAddError(ValueError):
    """The reviewed file, the target or the data directory cannot be used; the message names the file."""


def read_reviewed(path: Path) -> list[tuple[int, dict | None, str | None]]:
    """(line, row, None) per row of a JSONL, CSV or Label Studio export (by suffix: .jsonl, .csv, .json), or
    (line, None, problem). A CSV row's empty cells are left out of its dict; its line is the line the
    record starts on; a Label Studio task's "line" is its place in the export (from 1)."""
    try:
        raw = Path(path).read_bytes().decode("utf-8-sig")
    except FileNotFoundError:
        raise DataAddError(f"{path}: file not found") from None
    except UnicodeDecodeError as e:
        raise DataAddError(f"{path}: not UTF-8: {e}") from None
    except OSError as e:
        raise DataAddError(f"{path}: {e.strerror or e}") from None
    if Path(path).suffix.lower() == ".json":
        return label_studio_rows(path, raw)
    if Path(path).suffix.lower() != ".csv":
        return list(iter_jsonl(raw))
    reader = csv.reader(io.StringIO(raw, newline=""))
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        return []
    except csv.Error as e:
        raise DataAddError(f"{path}:1: invalid CSV header: {e}") from None
    out: list[tuple[int, dict | None, str | None]] = []
    end = reader.line_num
    while True:
        start = end + 1
        try:
            cells = next(reader)
        except StopIteration:
            break
        except csv.Error as e:
            out.append((start, None, f"invalid CSV: {e}"))
            break
        end = reader.line_num
        if not any(c.strip() for c in cells):
            continue
        if len(cells) > len(header):
            out.append((start, None, f"{len(cells)} cells, the header names {len(header)}"))
            continue
        out.append((start, {h: c for h, c in zip(header, cells, strict=False) if h and c != ""}, None))
    return out


def row_problem(obj: dict, labels: set[str], allowed: set[str], labels_from: str) -> str | None:
    """Why a reviewed row cannot be added, or None."""
    if "text" not in obj or obj["text"] is None:
        return "missing 'text'"
    text = obj["text"]
    if not isinstance(text, str):
        return f"'text' must be a string, got {type(text).__name__}"
    if not text.strip():
        return "empty text"
    if "label" not in obj or obj["label"] is None:
        return "missing 'label'"
    label = obj["label"]
    if not isinstance(label, str):
        return f"'label' must be a string, got {type(label).__name__}"
    if not label:
        return "empty label"
    for name in KEPT_FIELDS:
        if name in obj and obj[name] is not None and not isinstance(obj[name], str):
            return f"'{name}' must be a string, got {type(obj[name]).__name__}"
    if label in labels or label in RESERVED:
        return None
    if label in allowed:
        return label_problem(label)
    known = ", ".join(sorted(labels)) or "none"
    near = did_you_mean(label, [*sorted(labels), *RESERVED])
    hint = f"did you mean {near}? " if near else ""
    return (
        f"unknown label {label!r} (labels of {labels_from}: {known}); {hint}allow it with --new-label {label}"
    )


def did_you_mean(label: str, known: list[str]) -> str | None:
    """The known label ``label`` most likely stands for: the same in another case, else a close spelling."""
    same = [k for k in known if k.casefold() == label.casefold()]
    if same:
        return same[0]
    close = difflib.get_close_matches(label.upper(), known, n=1, cutoff=0.75)
    return close[0] if close else None


def label_studio_rows(path: Path, raw: str) -> list[tuple[int, dict | None, str | None]]:
    """A Label Studio export (a JSON list of tasks): each task's text and id, and the choice of its latest
    annotation that was not cancelled; a task nobody labelled is a problem row."""
    try:
        tasks = json.loads(raw)
    except ValueError as e:
        raise DataAddError(f"{path}: not JSON: {e}") from None
    if not isinstance(tasks, list):
        raise DataAddError(f"{path}: a Label Studio export is a JSON list of tasks")
    out: list[tuple[int, dict | None, str | None]] = []
    for n, task in enumerate(tasks, start=1):
        data = task.get("data") if isinstance(task, dict) else None
        if not isinstance(data, dict):
            out.append((n, None, "a task without 'data'"))
            continue
        label = _choice(task)
        if label is None:
            out.append((n, None, "no annotation chose a label"))
            continue
        row = {"text": data.get("text"), "label": label}
        if data.get("id"):
            row["id"] = data["id"]
        out.append((n, row, None))
    return out


def _choice(task: dict) -> str | None:
    """The label of the task's latest annotation that was not cancelled."""
    for annotation in reversed(task.get("annotations") or []):
        if not isinstance(annotation, dict) or annotation.get("was_cancelled"):
            continue
        for result in annotation.get("result") or []:
            choices = (result.get("value") or {}).get("choices") if isinstance(result, dict) else None
            if choices:
                return str(choices[0])
    return None
