"""The compound corpus (data/compound/{train,dev,test,blind}.jsonl, data/compound/README.md): row checks,
pair-kind and twin-pair checks, and counts. Leakage is checked with the rest of the corpus
(training.corpus.labelled), where compound files are splits of their own.

A compound row is ``{"text", "labels": [primary, secondary], "pair_kind"}`` (``pair`` optional); a twin
is ``{"text", "label", "twin": true, "pair"}`` and its ``pair`` names a compound row of the same split.
Row validity follows eval.readers.loader.load_labeled (a test checks that both agree).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from router.intents import RESERVED, label_problem

COMPOUND_DIR = "compound"
COMPOUND_SPLITS = ("train", "dev", "test", "blind")


@dataclass(frozen=True)
class CompoundRow:
    text: str
    labels: tuple[str, ...]  # (primary, secondary) of a compound row, (label,) of a twin
    line: int
    twin: bool = False
    pair: str | None = None
    pair_kind: str | None = None


def is_compound_file(path: str | Path) -> bool:
    return Path(path).parent.name == COMPOUND_DIR


def file_stem(path: str | Path) -> str:
    """A corpus file's name up to its first dot, lower-cased: train_everyday.jsonl -> train_everyday."""
    return Path(path).name.lower().split(".")[0]


def named_for(path: str | Path, split: str) -> bool:
    """Whether a file's name puts it in ``split``: the split's own name (train.jsonl), or the split's name
    then '_' or '-' (train_everyday_pairs.jsonl is train's)."""
    stem = file_stem(path)
    return stem == split or stem.startswith((split + "_", split + "-"))


def compound_files(data_dir: Path) -> list[Path]:
    """data_dir/compound/'s JSONL files of the splits, in split order: {train,dev,test,blind}.jsonl, then
    the others named for that split (``named_for``)."""
    folder = Path(data_dir) / COMPOUND_DIR
    files = sorted(p for p in folder.glob("*.jsonl") if p.is_file()) if folder.is_dir() else []
    out = []
    for split in COMPOUND_SPLITS:  # the split's own file first
        out += sorted((p for p in files if named_for(p, split)), key=lambda p: file_stem(p) != split)
    return out


def pair_kind_of(labels: Sequence[str]) -> str:
    """A pair kind's name: its two intents joined by '+' ("SEARCH+ACTION"); either order names the pair."""
    return "+".join(labels)


def same_pair(kind: object, labels: Sequence[str]) -> bool:
    """Whether ``kind`` names the unordered pair ``labels``."""
    return isinstance(kind, str) and sorted(kind.split("+")) == sorted(labels)


def pair_kinds(rows_by_file: Iterable[Iterable[CompoundRow]]) -> list[str]:
    """The pair kinds the compound rows name, sorted; a pair written both ways ("SEARCH+ACTION",
    "ACTION+SEARCH") goes by its more frequent spelling (the first in sorted order on a tie)."""
    spellings: dict[frozenset, Counter] = defaultdict(Counter)
    for rows in rows_by_file:
        for r in rows:
            if not r.twin and r.pair_kind is not None:
                spellings[frozenset(r.labels)][r.pair_kind] += 1
    return sorted(min(c, key=lambda k: (-c[k], k)) for c in spellings.values())


def _intent_problem(label: object, intents: Sequence[str] | None) -> str | None:
    if intents is not None:
        return (
            None if label in intents else f"unknown intent {label!r} (expected one of {', '.join(intents)})"
        )
    if label in RESERVED:
        return f"{label} is not an intent: only intents make a compound request or its twin"
    return label_problem(label)


def parse_row(
    obj: dict, line: int, intents: Sequence[str] | None = None
) -> tuple[CompoundRow | None, str | None]:
    """(row, None) or (None, problem) for one JSON object whose text was checked already. ``intents``:
    the intents a row may name (None: any label that is not reserved)."""
    text, labels, label = obj["text"], obj.get("labels"), obj.get("label")
    twin, pair = obj.get("twin"), obj.get("pair")
    if pair is not None and not (isinstance(pair, str) and pair.strip()):
        return None, f"'pair' must be a non-empty string, got {pair!r}"[:200]
    if labels is not None:
        if twin is not None:
            return None, "a compound row ('labels') cannot be a twin"
        if not (isinstance(labels, list) and len(labels) == 2 and all(isinstance(x, str) for x in labels)):
            return None, f"'labels' must be a list of two intents, primary first, got {labels!r}"[:200]
        problem = next(filter(None, (_intent_problem(x, intents) for x in labels)), None)
        if problem:
            return None, f"'labels': {problem}"[:200]
        if labels[0] == labels[1]:
            return None, f"'labels' repeats {labels[0]!r}: a compound row has two different intents"
        if label is not None and label != labels[0]:
            return None, f"'label' {label!r} differs from the first of 'labels' {labels}"
        kind = obj.get("pair_kind")
        if not same_pair(kind, labels):
            return (
                None,
                f"'pair_kind' {kind!r} does not match 'labels' {labels} (expected {pair_kind_of(labels)!r})",
            )
        return CompoundRow(text, tuple(labels), line, pair=pair, pair_kind=kind), None
    if twin is not True:
        return None, "a row needs 'labels' (compound) or 'label' with 'twin': true and 'pair' (twin)"
    if "pair_kind" in obj:
        return None, "a twin row carries no 'pair_kind'"
    problem = _intent_problem(label, intents)
    if problem:
        return None, f"a twin's 'label': {problem}"[:200]
    if pair is None:
        return None, "a twin row needs 'pair', the id of the compound row it resembles"
    return CompoundRow(text, (label,), line, twin=True, pair=pair), None


def check_pairs(rows_by_file: dict[str, list[CompoundRow]]) -> list[tuple[str, int, str]]:
    """(file, line, problem): a twin whose ``pair`` names no compound row of its split, a pair id given
    to two compound rows, or a pair id used in two splits."""
    problems: list[tuple[str, int, str]] = []
    owner: dict[str, tuple[str, int]] = {}  # pair id -> (file, line) of its compound row
    files_of: dict[str, set[str]] = defaultdict(set)
    for src, rows in rows_by_file.items():
        for r in rows:
            if r.pair is None:
                continue
            files_of[r.pair].add(src)
            if not r.twin:
                if r.pair in owner and owner[r.pair][0] == src:
                    problems.append(
                        (
                            src,
                            r.line,
                            f"pair id {r.pair!r} is also the compound row of line {owner[r.pair][1]}",
                        )
                    )
                owner.setdefault(r.pair, (src, r.line))
    for src, rows in rows_by_file.items():
        for r in rows:
            if r.twin and owner.get(r.pair, ("",))[0] != src:
                problems.append(
                    (src, r.line, f"twin of pair {r.pair!r}: no compound row with that pair in this split")
                )
    for pid, files in sorted(files_of.items()):
        if len(files) > 1:
            problems.append(
                (
                    sorted(files)[1],
                    0,
                    f"pair id {pid!r} is used in {len(files)} splits: {', '.join(sorted(files))}",
                )
            )
    return problems


def compound_counts(rows_by_split: dict[str, list[CompoundRow]]) -> dict[str, dict[str, int]]:
    """split -> {rows, compound, twins, one count per pair kind (pair_kinds)}."""
    names = pair_kinds(rows_by_split.values())
    name_of = {frozenset(k.split("+")): k for k in names}
    out = {}
    for split, rows in rows_by_split.items():
        kinds = Counter(name_of[frozenset(r.labels)] for r in rows if not r.twin)
        twins = sum(r.twin for r in rows)
        out[split] = {"rows": len(rows), "compound": len(rows) - twins, "twins": twins}
        out[split].update({k: kinds.get(k, 0) for k in names})
    return out
