"""The review queue's inputs and outputs: the log read with clear errors, the model's embedder, the
verifier's pre-labels, and the queue written as JSONL, CSV or Label Studio tasks (eval.review.queue)."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from eval.review.queue import Embedder, Entry, ReviewError, message_id

FORMATS = ("jsonl", "csv")
FIELDS = (
    "id",
    "text",
    "previous_message",
    "previous_intents",
    "top_intents",
    "role",
    "model_id",
    "suggested",
    "confidence",
    "why",
    "cluster",
    "seen",
)
LIST_FIELDS = ("previous_intents", "top_intents", "why")  # joined by WHY_SEPARATOR in CSV
WHY_SEPARATOR = "|"  # a row's reasons in one CSV cell


def read_records(path: str | Path) -> Iterator[dict]:
    """Every record of a decision log file or directory (router.decision_log.read_log), streamed; a
    missing path or a directory without log files is a ReviewError."""
    from router.decision_log import log_files, read_log

    try:
        files = log_files(path)
    except FileNotFoundError as e:
        raise ReviewError(str(e)) from None
    if not files:
        raise ReviewError(f"{path}: no decision log files (decisions-*.jsonl or decisions-*.parquet)")
    yield from read_log(path)


def model_embedder(classifier) -> Embedder:
    """The classifier's sentence embeddings (router.classifier.Classifier.embed), or None for every call
    when its graph has no embedding output: the queue then clusters on the ranking vectors."""

    def embed(texts: list[str]) -> np.ndarray | None:
        if getattr(classifier, "embedding_output", None) is None or not hasattr(classifier, "embed"):
            return None
        return classifier.embed(texts)

    return embed


def pre_label(entries: Sequence[Entry], classifier, verifier) -> dict:
    """Set each entry's ``llm_label``: the verifier's intent from the log when it accepted one, else the
    verifier asked now with the message's classification (and its previous message, when logged). A
    failed call leaves it None. Returns how many came from the log, were asked, and failed."""
    counts = {"from_log": 0, "asked": 0, "failed": 0}
    ask = []
    for e in entries:
        v = e.verifier or {}
        if v.get("status") == "accepted" and v.get("intent"):
            e.llm_label = v["intent"]
            counts["from_log"] += 1
        else:
            ask.append(e)
    if not ask:
        return counts
    for e, c in zip(ask, classifier.classify_batch([e.text for e in ask]), strict=True):
        counts["asked"] += 1
        try:
            e.llm_label = verifier.verify(e.text, c, None, e.previous_message).intent
        except Exception:  # a failed pre-label leaves the row to the reviewer alone
            counts["failed"] += 1
    return counts


def row_of(e: Entry, with_llm: bool) -> dict:
    """One row of the queue; ``label`` is left empty for the reviewer."""
    row = {
        "id": message_id(e.text),
        "text": e.text,
        "previous_message": e.previous_message,  # the turn before, when the caller sent its message
        "previous_intents": list(e.previous_intents),  # and the conversation's intents, from its Decision
        "top_intents": e.top_intents,
        "role": e.role,
        "model_id": e.model_id,
        "suggested": e.suggested,
        "confidence": e.confidence,
        "why": list(e.why),
        "cluster": e.cluster,
        "seen": e.seen,
    }
    if with_llm:
        row["llm_label"] = e.llm_label
    row["label"] = ""
    return row


def write_queue(rows: Sequence[dict], path: str | Path, fmt: str = "jsonl") -> Path:
    """The queue as JSONL (one row a line) or CSV (a header; ``why`` joined by '|', None empty)."""
    if fmt not in FORMATS:
        raise ReviewError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "jsonl":
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        path.write_text(text, encoding="utf-8")
        return path
    columns = list(rows[0]) if rows else [*FIELDS, "label"]
    with path.open("w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=columns)
        w.writeheader()
        for r in rows:
            w.writerow(
                {
                    k: WHY_SEPARATOR.join(v) if k in LIST_FIELDS else ("" if v is None else v)
                    for k, v in r.items()
                }
            )
    return path


def read_csv_queue(path: str | Path) -> list[dict]:
    """A CSV queue read back: ``why`` a list again, numbers as numbers, empty cells None (``label`` "")."""
    out = []
    with Path(path).open(encoding="utf-8", newline="") as fh:
        for r in csv.DictReader(fh):
            row: dict = {k: (v if v != "" or k == "label" else None) for k, v in r.items()}
            for k in LIST_FIELDS:
                if k in r:
                    row[k] = r[k].split(WHY_SEPARATOR) if r[k] else []
            row["confidence"] = float(r["confidence"]) if r["confidence"] else None
            row["cluster"], row["seen"] = int(r["cluster"]), int(r["seen"])
            out.append(row)
    return out


def label_studio_tasks(rows: Sequence[dict]) -> list[dict]:
    """Label Studio import tasks: the text and id as data, the router's suggestion as a prediction of a
    ``choices`` control named ``intent`` over the ``text`` object (eval/README.md has the label config)."""
    tasks = []
    for r in rows:
        prediction = {
            "model_version": r["model_id"],
            "result": [
                {
                    "from_name": "intent",
                    "to_name": "text",
                    "type": "choices",
                    "value": {"choices": [r["suggested"]]},
                }
            ],
        }
        if r["confidence"] is not None:
            prediction["score"] = r["confidence"]
        data = {
            "text": r["text"],
            "id": r["id"],
            "previous_message": r.get("previous_message") or "",
            "previous_intents": ", ".join(r.get("previous_intents") or []),
            "top_intents": ", ".join(r.get("top_intents") or []),
        }
        tasks.append({"data": data, "predictions": [prediction]})
    return tasks


def write_label_studio(rows: Sequence[dict], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(label_studio_tasks(rows), ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
    )
    return path
