"""The compound corpus (data/compound/{train,dev,test,blind}.jsonl, data/compound/README.md): row checks,
pair-kind and twin-pair checks, and counts. Leakage is checked with the rest of the corpus
(training.corpus), where compound files are splits of their own.

A compound row is ``{"text", "labels": [primary, secondary], "pair_kind"}`` (``pair`` optional); a twin
is ``{"text", "label", "twin": true, "pair"}`` and its ``pair`` names a compound row of the same split.
Row validity follows eval.data.load_labeled (a test checks that both agree).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from router.intents import INTENTS

COMPOUND_DIR = "compound"
COMPOUND_SPLITS = ("train", "dev", "test", "blind")
# the unordered pairs of data/compound/README.md, as written there
PAIR_KINDS = (
    "SEARCH+ACTION",
    "MEMORY+ACTION",
    "REASONING+ACTION",
    "SEARCH+REASONING",
    "SEARCH+PLANNING",
    "MEMORY+SEARCH",
    "MEMORY+PLANNING",
    "REASONING+PLANNING",
    "PLANNING+ACTION",
)
_KIND_OF = {frozenset(k.split("+")): k for k in PAIR_KINDS}


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


def compound_files(data_dir: Path) -> list[Path]:
    """data_dir/compound/{train,dev,test,blind}.jsonl, those present."""
    return [p for s in COMPOUND_SPLITS if (p := Path(data_dir) / COMPOUND_DIR / f"{s}.jsonl").is_file()]


def pair_kind_of(labels: Iterable[str]) -> str | None:
    """The README's name of an unordered pair of intents, or None if it is not one of the nine."""
    return _KIND_OF.get(frozenset(labels))


def parse_row(obj: dict, line: int) -> tuple[CompoundRow | None, str | None]:
    """(row, None) or (None, problem) for one JSON object whose text was checked already."""
    text, labels, label = obj["text"], obj.get("labels"), obj.get("label")
    twin, pair = obj.get("twin"), obj.get("pair")
    if pair is not None and not (isinstance(pair, str) and pair.strip()):
        return None, f"'pair' must be a non-empty string, got {pair!r}"[:200]
    if labels is not None:
        if twin is not None:
            return None, "a compound row ('labels') cannot be a twin"
        if not (isinstance(labels, list) and len(labels) == 2 and all(isinstance(x, str) for x in labels)):
            return None, f"'labels' must be a list of two intents, primary first, got {labels!r}"[:200]
        unknown = [x for x in labels if x not in INTENTS]
        if unknown:
            return None, f"unknown intent {unknown[0]!r} in 'labels' (expected {', '.join(INTENTS)})"
        if labels[0] == labels[1]:
            return None, f"'labels' repeats {labels[0]!r}: a compound row has two different intents"
        if label is not None and label != labels[0]:
            return None, f"'label' {label!r} differs from the first of 'labels' {labels}"
        kind, expected = obj.get("pair_kind"), pair_kind_of(labels)
        if expected is None:
            return None, f"'labels' {labels} is not one of the pair kinds ({', '.join(PAIR_KINDS)})"
        if kind != expected:
            return None, f"'pair_kind' {kind!r} does not match 'labels' {labels} (expected {expected!r})"
        return CompoundRow(text, tuple(labels), line, pair=pair, pair_kind=kind), None
    if twin is not True:
        return None, "a row needs 'labels' (compound) or 'label' with 'twin': true and 'pair' (twin)"
    if "pair_kind" in obj:
        return None, "a twin row carries no 'pair_kind'"
    if label not in INTENTS:
        return None, f"a twin's 'label' must be one of {', '.join(INTENTS)}, got {label!r}"[:200]
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
    """split -> {rows, compound, twins, one count per pair kind}."""
    out = {}
    for split, rows in rows_by_split.items():
        kinds = Counter(r.pair_kind for r in rows if not r.twin)
        twins = sum(r.twin for r in rows)
        out[split] = {"rows": len(rows), "compound": len(rows) - twins, "twins": twins}
        out[split].update({k: kinds.get(k, 0) for k in PAIR_KINDS})
    return out
