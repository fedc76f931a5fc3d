"""What the compared data can hide: a file a model was trained or calibrated on, and rows the review queue
picked. Both favour one side, and the figures alone do not show it, so compare says so in its notes.

- A file with the sha256 of one in a model's manifest (``training.data.files``) is one that model read
  while it was built. Its dev split fitted the temperature and the thresholds; its train split is what
  it learned. Either makes that model look better than on text it never saw.
- Rows that carry the review queue's fields (``why``, ``review_id``, ``suggested``) were picked from the
  incumbent's unsure, disputed or borderline answers (eval.review.queue): its weakest messages, on which
  any candidate tends to win.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

REVIEW_FIELDS = ("why", "review_id", "suggested")


def data_notes(files: Sequence[Mapping], models: Mapping[str, Path]) -> list[str]:
    """Notes on the data ``files`` ({source, sha256} each) against the manifests of ``models``
    (incumbent and candidate, by role)."""
    from router.manifest import load_manifest

    built_on = {}
    for role, model_dir in models.items():
        for path, sha in (load_manifest(model_dir).training.get("data") or {}).get("files", {}).items():
            built_on.setdefault(sha, []).append((role, path))
    out = []
    for f in files:
        for role, path in built_on.get(f["sha256"], []):
            use = _use_of(path)
            if use is not None:
                out.append(
                    f"{f['source']} is the {role}'s {use} ({path} in its manifest): it favours the {role}; "
                    "compare on text neither model was built on"
                )
        picked = _review_rows(Path(str(f["source"])))
        if picked:
            out.append(
                f"{f['source']}: {picked} row(s) carry the review queue's fields: picked from the incumbent's "
                "least sure answers, which favours any candidate; add rows drawn at random from traffic"
            )
    return out


def _use_of(path: str) -> str | None:
    """What a model did with a file of its manifest, by its split's name (test files are held out)."""
    stem = Path(path).stem
    if stem.startswith("dev"):
        return "calibration split (its temperature and thresholds were fitted on it)"
    if stem.startswith("train"):
        return "training data"
    return None


def _review_rows(path: Path) -> int:
    """How many rows of a JSONL, CSV or TSV file carry a review-queue field (0 for other sources)."""
    suffix = path.suffix.lower()
    if not path.is_file():
        return 0
    with path.open(encoding="utf-8", newline="") as fh:
        if suffix in (".jsonl", ".ndjson"):
            rows = (json.loads(line) for line in fh if line.strip())
            return sum(1 for r in rows if isinstance(r, dict) and any(k in r for k in REVIEW_FIELDS))
        if suffix in (".csv", ".tsv"):
            reader = csv.DictReader(fh, delimiter="\t" if suffix == ".tsv" else ",")
            if not any(k in (reader.fieldnames or []) for k in REVIEW_FIELDS):
                return 0
            return sum(1 for r in reader if any(r.get(k) for k in REVIEW_FIELDS))
    return 0
