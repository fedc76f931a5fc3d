"""The decision log: one record per routed message, for review, relabelling and retraining.

Opt-in (``Router(..., decision_log=DecisionLog(dir))``, ``intent-router serve --decision-log DIR``). Each
record holds the message (or what the redaction hook makes of it), the role, the whole Decision, the model
id, the hash of the router config, the latency and the verifier's outcome.

Durability, by format:
- ``jsonl`` (default): each record is one ``write()`` of one line to a file opened for appending, with no
  buffer in between. A killed process loses at most the record it was writing, which then ends the file as
  an incomplete line: ``read_log`` skips it. ``fsync=True`` also survives a power cut, at the cost of a
  disk flush a record.
- ``parquet``: records are kept in memory and written every ``batch_rows`` as a part file of their own
  (written beside, then renamed, so a part is whole or absent). A killed process loses at most the
  records not yet written: ``batch_rows - 1``.

Files rotate at ``max_bytes`` (jsonl) and are named by their start time and process id, so the several
worker processes of one service never write the same file.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path

from router.decision import Decision

FORMATS = ("jsonl", "parquet")
RECORD_VERSION = 1


def config_hash(config) -> str:
    """sha256 of a router config's canonical JSON: which config routed a logged message."""
    text = json.dumps(config.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def verifier_outcome(decision: Decision) -> dict | None:
    """What the verifier did for this message (its trace step), or None when it was not asked."""
    for step in decision.trace:
        if step.stage == "verifier":
            out = {"status": step.status}
            for key in ("intent", "secondary", "reason_code", "error"):
                if key in step.detail:
                    out[key] = step.detail[key]
            return out
    return None


def record_of(
    decision: Decision,
    message: str,
    config_sha: str,
    redact: Callable[[str], str] | None = None,
    previous_message: str | None = None,
    previous: Decision | None = None,
    fields: Mapping[str, str | None] | None = None,
) -> dict:
    """The log record of one routed message; in a conversation, what the caller sent of the turn before:
    its message (``previous_message``) and, from its Decision, the conversation's intents. ``fields`` are
    the caller's own keys, such as the service's ``request_id`` and ``key_id`` (the API key's id, never
    the key)."""
    text = redact(message) if redact is not None else message
    record = {
        "v": RECORD_VERSION,
        "ts": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
        "message": text,
        "redacted": redact is not None,
        "role": decision.role,
        "model_id": decision.model_id,
        "config_sha": config_sha,
        "intent": decision.intent,
        "reason_code": decision.reason_code.value,
        "confidence": decision.confidence,
        "latency_ms": decision.latency.total_ms,
        "verifier": verifier_outcome(decision),
        "decision": decision.model_dump(mode="json"),
    }
    if previous_message is not None:
        record["previous_message"] = redact(previous_message) if redact is not None else previous_message
    if previous is not None:
        record["previous_intents"] = list(previous.conversation_intents or previous.intents)
    if fields:
        record.update({k: v for k, v in fields.items() if k not in record})
    return record


class DecisionLog:
    """Appends decision records under ``directory`` (created if missing). Thread-safe; one per process."""

    def __init__(
        self,
        directory: str | Path,
        fmt: str = "jsonl",
        max_bytes: int = 64 * 1024 * 1024,
        batch_rows: int = 1000,
        redact: Callable[[str], str] | None = None,
        fsync: bool = False,
    ) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"decision log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
        if max_bytes < 1024 or batch_rows < 1:
            raise ValueError("decision log: max_bytes must be >= 1024 and batch_rows >= 1")
        if fmt == "parquet":
            import pyarrow  # noqa: F401  (the scale extra), checked now rather than at the first flush
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.fmt, self.max_bytes, self.batch_rows = fmt, max_bytes, batch_rows
        self.redact, self.fsync = redact, fsync
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._size = 0
        self._pending: list[dict] = []
        self._parts = 0
        self.written = 0

    def redacted(self, text: str) -> str:
        """``text`` as this log records a message: after the redaction hook, if any."""
        return self.redact(text) if self.redact is not None else text

    def _name(self, suffix: str) -> Path:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        self._parts += 1
        return self.directory / f"decisions-{stamp}-{os.getpid()}-{self._parts:05d}.{suffix}"

    def write(
        self,
        decision: Decision,
        message: str,
        config_sha: str,
        previous_message: str | None = None,
        previous: Decision | None = None,
        fields: Mapping[str, str | None] | None = None,
    ):
        """Log one routed message (record_of)."""
        record = record_of(decision, message, config_sha, self.redact, previous_message, previous, fields)
        if self.fmt == "parquet":
            with self._lock:
                self._pending.append(record)
                self.written += 1
                if len(self._pending) >= self.batch_rows:
                    self._write_part()
            return
        line = (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        with self._lock:
            if self._fd is None or self._size >= self.max_bytes:
                self._open()
            os.write(self._fd, line)  # one write a record: whole, or the file's incomplete last line
            if self.fsync:
                os.fsync(self._fd)
            self._size += len(line)
            self.written += 1

    def _open(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        self._fd = os.open(self._name("jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
        self._size = 0

    def _write_part(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = [
            {**r, "decision": json.dumps(r["decision"]), "verifier": json.dumps(r["verifier"])}
            for r in self._pending
        ]
        # every key of any row is a column (from_pylist alone keeps only the first row's keys), so a
        # follow-up's previous_message survives a part whose first row has none
        columns = list(dict.fromkeys(k for r in rows for k in r))
        path = self._name("parquet")
        tmp = path.with_suffix(".parquet.tmp")
        pq.write_table(pa.Table.from_pylist([{k: r.get(k) for k in columns} for r in rows]), tmp)
        os.replace(tmp, path)
        self._pending = []

    def flush(self) -> None:
        """Write what is pending (parquet) and flush to disk."""
        with self._lock:
            if self._pending:
                self._write_part()
            if self._fd is not None:
                os.fsync(self._fd)

    def close(self) -> None:
        self.flush()
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> DecisionLog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def log_files(path: str | Path) -> list[Path]:
    """A log file, or every log file of a directory, oldest first."""
    p = Path(path)
    if p.is_dir():
        return sorted([*p.glob("decisions-*.jsonl"), *p.glob("decisions-*.parquet")])
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such decision log")
    return [p]


def read_log(path: str | Path) -> Iterator[dict]:
    """Every complete record of a log file or directory; an incomplete last line (a killed writer's) is
    skipped, a malformed line elsewhere is an error with its file and line."""
    for f in log_files(path):
        if f.suffix == ".parquet":
            import pyarrow.parquet as pq

            for r in pq.read_table(f).to_pylist():
                yield {**r, "decision": json.loads(r["decision"]), "verifier": json.loads(r["verifier"])}
            continue
        with f.open("rb") as fh:
            lines = fh.read().split(b"\n")
        for i, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            try:
                yield json.loads(raw)
            except json.JSONDecodeError as e:
                if i == len(lines):  # the last line, with no newline: a write cut short
                    continue
                raise ValueError(f"{f}:{i}: not a decision record ({e.msg})") from e
