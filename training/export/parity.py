"""Parity of an exported graph with the PyTorch model: the held-out text, the gates, the manifest record.

Every variant is run one message at a time and in length-sorted batches of PARITY_BATCH (the route_batch
path) and compared with PyTorch: top-1 agreement and in-scope flag agreement (PARITY_MIN), the largest
probability difference (MAX_PROB_DIFF), and, when the text comes from several files, top-1 agreement on
each file (split) on its own. Labelled splits also get the variant's accuracy and ECE next to PyTorch's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from router.manifest import Manifest, ModelError, Parity

PARITY_MIN = {"fp32": 1.0, "fp16": 1.0, "int8": 0.995}
# A split of compound requests (two intents each) is gated on the routed intents at this floor: their
# decisions combine several graph runs and two thresholds, and a 128-message split moves in steps of 0.8%.
PARITY_MIN_COMPOUND = {"fp32": 1.0, "fp16": 1.0, "int8": 0.97}
MAX_PROB_DIFF = 0.15
PARITY_BATCH = 32
# Export prefers a recipe that clears the gates with this margin (fastest first); a recipe that only
# passes the gates is kept when none does.
MARGIN = {"agreement": 0.997, "max_abs_prob_diff": 0.12}


class ParityError(ModelError):
    """An exported graph disagrees with the PyTorch model more than allowed."""


@dataclass
class ParityText:
    texts: list[str]
    splits: dict[str, slice] = field(default_factory=dict)  # file stem -> its rows in ``texts``
    labels: dict[str, np.ndarray] = field(default_factory=dict)  # labelled splits: label index per row
    compound: set[str] = field(default_factory=set)  # splits of compound requests (rows with two intents)


def load_parity_text(files: Sequence[str | Path], label_names: Sequence[str]) -> ParityText:
    """The texts of ``files`` in order; a file whose rows all carry a known label is labelled."""
    from eval.readers.loader import load_labeled, load_unlabeled
    from eval.readers.sources import DataError

    out = ParityText(texts=[])
    for f in files:
        name = Path(f).stem
        if name in out.splits:  # data/test.jsonl and data/compound/test.jsonl
            name = f"{Path(f).parent.name}/{name}"
        while name in out.splits:
            name += "'"
        try:
            data = load_labeled(f, labels=label_names)
            texts = data.texts
            out.labels[name] = np.array([list(label_names).index(y) for y in data.labels])
            if data.compound:
                out.compound.add(name)
        except DataError:
            texts = load_unlabeled(f).texts
        out.splits[name] = slice(len(out.texts), len(out.texts) + len(texts))
        out.texts += texts
    return out


def reference(
    model, texts: Sequence[str]
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None, list[list[str]] | None]:
    """PyTorch's (probabilities, distances or None, intent scores or None, intents or None)."""
    if not texts:
        raise ValueError("parity needs at least one text")
    if getattr(model, "compound_spec", None) is not None:
        return model.predict_compound(list(texts))[:4]
    return (*model.predict_with_distance(list(texts)), None, None)


def margin_shortfalls(parity: Parity) -> list[str]:
    """Where a passing variant comes closer to the gates than MARGIN (top-1 and in-scope flag agreement,
    max |dp|, single and batched)."""
    values = {
        "top-1 agreement": (parity.top1_agreement, parity.batched_top1_agreement),
        "in-scope flag agreement": (parity.in_scope_agreement, parity.batched_in_scope_agreement),
        "intents agreement": (parity.intents_agreement, parity.batched_intents_agreement),
        "max |dp|": (parity.max_abs_prob_diff, parity.batched_max_abs_prob_diff),
    }
    out = []
    for what, pair in values.items():
        for mode, v in zip(("single", "batched"), pair, strict=True):
            if v is None:
                continue
            if what == "max |dp|" and v > MARGIN["max_abs_prob_diff"]:
                out.append(f"{mode} {what} {v:.4f} (margin <= {MARGIN['max_abs_prob_diff']})")
            elif what != "max |dp|" and v < MARGIN["agreement"]:
                out.append(f"{mode} {what} {v:.4f} (margin >= {MARGIN['agreement']})")
    return out


def _quality(probs: np.ndarray, y: np.ndarray) -> dict[str, float]:
    from eval.metrics.calibration import ece

    return {"accuracy": float((probs.argmax(1) == y).mean()), "ece": float(ece(probs, y))}


@dataclass
class _Measured:
    """One variant against the reference, one message at a time (batch 1) and in batches: per batch size,
    (top-1 agreement, max |dp|, in-scope flag agreement, max relative distance diff, intents agreement,
    max |score diff|), the top-1 (or intents) agreement per split, and accuracy and ECE per labelled
    split (batch 1)."""

    runs: dict = field(default_factory=dict)
    per_split: dict = field(default_factory=dict)
    split_sets: dict = field(default_factory=dict)
    quality: dict = field(default_factory=dict)


def check_parity(
    model,
    model_dir: Path,
    manifest: Manifest,
    text: ParityText | Sequence[str],
    report: Callable[[str], None] = print,
    variants: Sequence[str] | None = None,
    ref: tuple | None = None,
) -> list[str]:
    """Compare exported variants with the PyTorch model; record the result in the manifest and return
    the failures."""
    if not isinstance(text, ParityText):
        text = ParityText(texts=list(text))
    ref = ref if ref is not None else reference(model, text.texts)
    failures = []
    for name in variants or list(manifest.export.variants):
        variant = manifest.export.variants[name]
        m = _measure(model_dir, manifest, name, text, ref)
        problems = _problems(m, name, text)
        variant.parity = _record(m, name, text, passed=not problems)
        _report(m, name, text, report)
        if problems:
            failures.append(f"{name} ({variant.recipe or 'fp32'}) parity failed: {', '.join(problems)}")
    return failures


def _measure(model_dir: Path, manifest: Manifest, name: str, text: ParityText, ref: tuple) -> _Measured:
    from router.classifier import Classifier

    torch_probs, torch_dist, torch_scores, torch_sets = ref
    compound = torch_sets is not None and manifest.compound is not None
    limit = manifest.in_scope.threshold if manifest.in_scope is not None else None
    splits = text.splits if len(text.splits) > 1 else {}
    m = _Measured()
    for batch in (1, PARITY_BATCH):
        clf = Classifier(model_dir, variant=name, manifest=manifest, require_parity=False, max_batch=batch)
        probs, dist, scores, intents, _ = clf.predict_compound(text.texts)
        same = probs.argmax(1) == torch_probs.argmax(1)
        scope = diff = sets = sdiff = agree_sets = None
        if torch_dist is not None and dist is not None and limit is not None:
            scope = float(((dist > limit) == (torch_dist > limit)).mean())
            diff = float((np.abs(dist - torch_dist) / np.maximum(torch_dist, 1e-9)).max())
        if compound and scores.shape[1]:
            agree_sets = np.array([a == b for a, b in zip(intents, torch_sets, strict=True)])
            sets = float(agree_sets.mean())
            sdiff = float(np.abs(scores - torch_scores).max())
        dp = float(np.abs(probs - torch_probs).max())
        m.runs[batch] = (float(same.mean()), dp, scope, diff, sets, sdiff)
        m.per_split[batch] = {s: float(same[rows].mean()) for s, rows in splits.items()}
        if agree_sets is not None:
            m.split_sets[batch] = {s: float(agree_sets[rows].mean()) for s, rows in splits.items()}
        if batch == 1:
            for s, y in text.labels.items():
                rows = text.splits[s]
                ours, theirs = _quality(probs[rows], y), _quality(torch_probs[rows], y)
                m.quality[s] = {**ours, **{f"reference_{k}": v for k, v in theirs.items()}}
    return m


def _problems(m: _Measured, name: str, text: ParityText) -> list[str]:
    need, max_dp = PARITY_MIN[name], (MAX_PROB_DIFF if name != "fp32" else None)
    return [
        f"{mode} {what} {value:.4f} (need {sign} {bound})"
        for mode, batch in (("single", 1), ("batched", PARITY_BATCH))
        for what, value, sign, bound in (
            ("top-1 agreement", m.runs[batch][0], ">=", need),
            ("in-scope flag agreement", m.runs[batch][2], ">=", need),
            ("intents agreement", m.runs[batch][4], ">=", need),
            ("max |dp|", m.runs[batch][1], "<=", max_dp),
            *_split_gates(m.per_split[batch], m.split_sets.get(batch), need, text.compound, name),
        )
        if value is not None and bound is not None and (value < bound if sign == ">=" else value > bound)
    ]


def _record(m: _Measured, name: str, text: ParityText, passed: bool) -> Parity:
    from eval.bench.cpu import cpu_name

    (agree, dp, scope, ddiff, sets, sdiff) = m.runs[1]
    (b_agree, b_dp, b_scope, _, b_sets, _) = m.runs[PARITY_BATCH]
    return Parity(
        n=len(text.texts),
        top1_agreement=agree,
        max_abs_prob_diff=dp,
        in_scope_agreement=scope,
        max_rel_distance_diff=ddiff,
        min_required=PARITY_MIN[name],
        passed=passed,
        batched_top1_agreement=b_agree,
        batched_max_abs_prob_diff=b_dp,
        batched_in_scope_agreement=b_scope,
        intents_agreement=sets,
        batched_intents_agreement=b_sets,
        max_abs_score_diff=sdiff,
        max_abs_prob_diff_allowed=MAX_PROB_DIFF if name != "fp32" else None,
        split_top1_agreement=m.per_split[1] or None,
        batched_split_top1_agreement=m.per_split[PARITY_BATCH] or None,
        split_intents_agreement=m.split_sets.get(1) or None,
        batched_split_intents_agreement=m.split_sets.get(PARITY_BATCH) or None,
        quality=m.quality or None,
        cpu=cpu_name(),
    )


def _report(m: _Measured, name: str, text: ParityText, report: Callable[[str], None]) -> None:
    (agree, dp, scope, _, sets, _) = m.runs[1]
    (b_agree, b_dp, b_scope, _, b_sets, _) = m.runs[PARITY_BATCH]
    scope_note = "" if scope is None else f", in-scope flag agreement {scope:.4f}/{b_scope:.4f}"
    if sets is not None:
        scope_note += f", intents agreement {sets:.4f}/{b_sets:.4f}"
    shown = m.split_sets if m.split_sets else m.per_split
    split_note = "".join(f", {s} {a:.4f}/{shown[PARITY_BATCH][s]:.4f}" for s, a in shown[1].items())
    report(
        f"parity {name}: top-1 agreement {agree:.4f}/{b_agree:.4f} single/batched (need >= {PARITY_MIN[name]}), "
        f"max |dp| {dp:.2e}/{b_dp:.2e}{scope_note}{split_note} on {len(text.texts)} texts"
    )
    for s, q in m.quality.items():
        report(
            f"  {s}: accuracy {q['accuracy']:.4f} (PyTorch {q['reference_accuracy']:.4f}), "
            f"ECE {q['ece']:.4f} (PyTorch {q['reference_ece']:.4f})"
        )


def _split_gates(top1: dict[str, float], intents: dict[str, float] | None, need: float, compound, variant):
    """Per split, the routed intents' agreement when the model finds compound requests (a top-1 flip
    between the two intents of a compound request routes the same pair), else top-1 agreement; a split
    of compound requests at PARITY_MIN_COMPOUND."""
    if intents is not None:
        return [
            (f"{s} intents agreement", a, ">=", PARITY_MIN_COMPOUND[variant] if s in compound else need)
            for s, a in intents.items()
        ]
    return [(f"{s} top-1 agreement", a, ">=", need) for s, a in top1.items()]
