"""A teacher's targets, stored: its normalised embedding of each text a student learns on, so a student of
another encoder (training.distil.encoder) can be distilled without loading, or even having, the teacher.

The teacher is what makes a distilled recipe slow: all-mpnet-base-v2 trains for about 36 minutes on 2
cores and is about 420 MB, too large for a repository. Its embeddings of the 19,801 training texts and
clauses are 28 MB in float16, and reading them takes a second. A build that reads them reproduces the
student without the teacher, as soft labels stored with a dataset do.

The file is an ``.npz``: ``keys`` (the BLAKE2b digest of each text's UTF-8 bytes, 16 uint8), ``embeddings``
(float16, one normalised row per key) and ``meta`` (JSON: the teacher it came from, the count and width).
A text whose digest the file lacks has no target: the corpus changed since the file was written, and the
build says so rather than distil on part of it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

FORMAT = "intent-router.teacher-targets/1"


class TeacherTargetsError(ValueError):
    """A targets file that cannot serve the texts asked of it."""


def text_key(text: str) -> bytes:
    """The 16-byte digest a text is stored under."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


def write_targets(path: str | Path, texts: Sequence[str], embeddings: np.ndarray, teacher: dict) -> Path:
    """Store the teacher's ``embeddings`` of ``texts`` (rows normalised here, then kept as float16) at
    ``path``; ``teacher`` describes the teacher (its path, model id, graph digest) for the file's meta."""
    emb = np.asarray(embeddings, dtype=np.float32)
    if emb.ndim != 2 or len(emb) != len(texts):
        raise TeacherTargetsError(f"{len(texts)} texts but embeddings of shape {emb.shape}")
    emb = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    # uint8 rows, not numpy bytes strings, which drop a digest's trailing zero bytes
    keys = np.frombuffer(b"".join(text_key(t) for t in texts), dtype=np.uint8).reshape(len(texts), 16)
    if len({k.tobytes() for k in keys}) != len(keys):
        raise TeacherTargetsError("the texts repeat: each text is stored once")
    meta = {"format": FORMAT, "teacher": teacher, "texts": len(texts), "dimensions": int(emb.shape[1])}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:  # np.savez would append .npz to a name without it
        np.savez_compressed(f, keys=keys, embeddings=emb.astype(np.float16), meta=np.array(json.dumps(meta)))
    return path


class TeacherTargets:
    """A targets file, read: ``lookup(texts)`` gives their embeddings as float32."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise TeacherTargetsError(f"teacher targets {self.path}: no such file")
        try:
            with np.load(self.path, allow_pickle=False) as z:
                keys, self.embeddings, meta = z["keys"], z["embeddings"], str(z["meta"])
            self.meta = json.loads(meta)
        except (OSError, ValueError, KeyError) as e:
            raise TeacherTargetsError(f"teacher targets {self.path}: not a targets file ({e})") from e
        if self.meta.get("format") != FORMAT:
            raise TeacherTargetsError(
                f"teacher targets {self.path}: format {self.meta.get('format')!r}, expected {FORMAT!r}"
            )
        if keys.dtype != np.uint8 or keys.shape != (len(self.embeddings), 16):
            raise TeacherTargetsError(
                f"teacher targets {self.path}: keys of shape {keys.shape}, not 16-byte digests"
            )
        self.index = {k.tobytes(): i for i, k in enumerate(keys)}

    @property
    def teacher(self) -> dict:
        return self.meta.get("teacher", {})

    def missing(self, texts: Sequence[str]) -> list[str]:
        """The texts the file has no target for."""
        return [t for t in texts if text_key(t) not in self.index]

    def lookup(self, texts: Sequence[str]) -> np.ndarray:
        """The stored embeddings of ``texts``, float32, one row each. Raises TeacherTargetsError naming how
        many (and a few) of them the file lacks."""
        lost = self.missing(texts)
        if lost:
            shown = "; ".join(repr(t[:60]) for t in lost[:3])
            raise TeacherTargetsError(
                f"teacher targets {self.path}: {len(lost)} of {len(texts)} texts have no target ({shown}"
                f"{'; ...' if len(lost) > 3 else ''}). The training texts changed since the file was "
                "written: rebuild it with the teacher (a build whose config sets both teacher and "
                "teacher_targets writes it)."
            )
        rows = [self.index[text_key(t)] for t in texts]
        return self.embeddings[rows].astype(np.float32)
