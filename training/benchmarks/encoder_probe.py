"""A linear probe of sentence encoders (``intent-router bench encoders``): how much of a label set an
encoder carries before any fine-tuning, and at what cost per message.

Each encoder embeds the training rows as they are (frozen, normalised) and a logistic head is fitted on
those embeddings; the head's top label is then scored on each evaluation file, and, given CLINC150, on its
side-effect intents (the share whose top label is ACTION) and its small talk (the share whose top label is
OUT_OF_SCOPE), the groups of training.benchmarks.clinc_scope. No threshold, no in-scope distance, no compound
head: the figures compare what the encoders know, not a router.

This is how to judge a teacher before paying for its fine-tuning: a larger encoder that does not beat the
smaller one frozen, on the text the router must hold, is unlikely to teach it much. The encode rate is
measured on the training rows, in batches of ``batch_size``, on this machine: it bounds what fine-tuning
the encoder would cost (a contrastive step runs the body forward and backward on two texts).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from eval.readers.loader import load_labeled
from router.intents import OUT_OF_SCOPE
from training.benchmarks.clinc_scope import scope_groups
from training.libraries import quiet_libraries
from training.train_config import resolve_base_model

Reporter = Callable[[str], None]
DEFAULT_C = 10.0


def probe_encoder(
    encoder: str,
    name: str,
    train: tuple[Sequence[str], Sequence[str]],
    evaluations: Mapping[str, tuple[Sequence[str], Sequence[str]]],
    clinc: Mapping[str, Sequence[str]] | None = None,
    *,
    c: float = DEFAULT_C,
    batch_size: int = 64,
    report: Reporter = print,
) -> dict:
    """One encoder's figures, under ``name``: encode rate, accuracy (and in-scope accuracy) per evaluation
    set, and the CLINC150 shares when ``clinc`` holds its ``side_effect`` and ``small_talk`` texts."""
    from sentence_transformers import SentenceTransformer
    from sklearn.linear_model import LogisticRegression

    quiet_libraries()
    path = resolve_base_model(encoder)
    model = SentenceTransformer(path, device="cpu")

    def embed(texts: Sequence[str]) -> np.ndarray:
        return model.encode(
            list(texts), batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False
        )

    texts, labels = train
    t0 = time.perf_counter()
    x = embed(texts)
    rate = len(texts) / (time.perf_counter() - t0)
    report(f"{name}: {len(texts)} training rows embedded at {rate:.0f} texts/s (dim {x.shape[1]})")
    head = LogisticRegression(C=c, max_iter=3000).fit(x, list(labels))
    out: dict = {
        "encoder": name,
        "dimension": int(x.shape[1]),
        "texts_per_second": round(rate, 1),
        "sets": {},
    }
    for name, (eval_texts, eval_labels) in evaluations.items():
        predicted = head.predict(embed(eval_texts))
        y = np.asarray(eval_labels)
        in_scope = y != OUT_OF_SCOPE
        figures = {
            "n": len(y),
            "accuracy": round(float(np.mean(predicted == y)), 6),
            "in_scope_accuracy": round(float(np.mean(predicted[in_scope] == y[in_scope])), 6)
            if in_scope.any()
            else None,
        }
        out["sets"][name] = figures
        report(f"  {name}: accuracy {figures['accuracy']:.1%} (n={len(y)})")
    if clinc is not None:
        side = head.predict(embed(clinc["side_effect"]))
        small = head.predict(embed(clinc["small_talk"]))
        out["clinc150"] = {
            "side_effect_action": round(float(np.mean(side == "ACTION")), 6),
            "small_talk_out_of_scope": round(float(np.mean(small == OUT_OF_SCOPE)), 6),
            "n": {"side_effect": len(side), "small_talk": len(small)},
        }
        report(
            f"  CLINC150: side-effect intents ACTION {out['clinc150']['side_effect_action']:.1%}, "
            f"small talk out of scope {out['clinc150']['small_talk_out_of_scope']:.1%}"
        )
    return out


def run_probe(
    encoders: Sequence[str],
    train_file: str | Path,
    eval_files: Sequence[str | Path],
    clinc: str | Path | None = None,
    *,
    c: float = DEFAULT_C,
    report: Reporter = print,
) -> dict:
    """Probe each encoder on one training file, the evaluation files (named by their file names) and,
    optionally, CLINC150's scope groups."""
    if not encoders:
        raise ValueError("name at least one encoder (a local folder or a hub name)")
    rows = load_labeled(train_file)
    labels = sorted(set(rows.labels))
    if len(labels) < 2:
        raise ValueError(f"{train_file}: a probe needs at least two labels")
    evaluations = {}
    for f in eval_files:
        data = load_labeled(f, labels=labels)
        evaluations[_set_name(f, evaluations)] = (data.texts, data.labels)
    groups = None
    if clinc is not None:
        g = scope_groups(clinc)
        groups = {k: [t for t, _ in g[k]] for k in ("side_effect", "small_talk")}
    results = [
        probe_encoder(e, name, (rows.texts, rows.labels), evaluations, groups, c=c, report=report)
        for e, name in zip(encoders, _encoder_names(encoders), strict=True)
    ]
    return {
        "benchmark": "encoder-probe",
        "created_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "train": {"file": str(train_file), "rows": len(rows.texts), "labels": labels},
        "head": {"kind": "logistic regression on frozen normalised embeddings", "C": c},
        "encoders": results,
    }


def _set_name(path: str | Path, taken: Mapping[str, object]) -> str:
    """``blind_everyday`` for data/blind_everyday.jsonl; the parent folder is prefixed on a clash."""
    p = Path(path)
    name = p.stem
    return name if name not in taken else f"{p.parent.name}/{name}"


def _encoder_names(encoders: Sequence[str]) -> list[str]:
    """How the results name each encoder: a hub name as given, a local folder by its name only (the
    results name no machine's paths), with its parent's name when two folders share one
    ("intent-minilm/checkpoint")."""
    local = [Path(e).expanduser() for e in encoders]
    names = [p.name if p.is_dir() else e for p, e in zip(local, encoders, strict=True)]
    return [
        f"{p.resolve().parent.name}/{n}" if p.is_dir() and names.count(n) > 1 else n
        for p, n in zip(local, names, strict=True)
    ]
