"""An intent defined by examples against the same intent trained as a class, on the same rows.

From a project (``intent-router init`` layout: train.yaml, router.yaml, data/), one intent is held out of
the training data except for ``examples`` of its train rows (a seeded sample). Two models are built:

- *examples*: trained without the intent; the router config defines it by those examples
  (router.examples), served with no retraining;
- *class*: the same training rows plus those examples as rows of the intent (what the next build does
  with that router config: training.fit.train).

Both route the project's test split through the router with no verifier, and are scored on the intent's
test rows (recall: routed to it; precision: of the messages routed to it, how many are it) and on every
test row (the routed intent right: out of scope counts as right for OUT_OF_SCOPE rows).
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import yaml

from eval.readers.loader import load_labeled
from router.config import RouterConfig
from router.routing import Router
from training.train_config import TrainConfig


def routed_scores(router: Router, texts: list[str], labels: list[str], intent: str) -> dict:
    """How the router (no verifier) does on labelled messages, for ``intent`` and overall."""
    decided = [d.intent for d in router.route_batch(texts, role=next(iter(router.config.roles)))]
    right = [(d or "OUT_OF_SCOPE") == y for d, y in zip(decided, labels, strict=True)]
    hits = sum(d == intent and y == intent for d, y in zip(decided, labels, strict=True))
    routed, gold = decided.count(intent), labels.count(intent)
    return {
        "intent_recall": round(hits / gold, 4) if gold else None,
        "intent_precision": round(hits / routed, 4) if routed else None,
        "routed_to_intent": routed,
        "accuracy": round(sum(right) / len(right), 4),
    }


def compare(project: str | Path, intent: str, examples: int = 8, seed: int = 0, report=print) -> dict:
    """Build both models in ``project``/bench-examples/ and score them (see the module docstring)."""
    project = Path(project).resolve()
    cfg = TrainConfig.from_file(project / "train.yaml")
    base = lambda p: p if p is None or Path(p).is_absolute() else project / p  # noqa: E731
    train = load_labeled(base(cfg.train_file))
    rows = [(t, y) for t, y in zip(train.texts, train.labels, strict=True) if y == intent]
    if len(rows) < examples:
        raise ValueError(f"{intent}: {len(rows)} train rows, fewer than the {examples} examples asked for")
    chosen = [t for t, _ in random.Random(seed).sample(rows, examples)]
    work = project / "bench-examples"
    work.mkdir(exist_ok=True)
    held = work / "train.jsonl"
    held.write_text(
        "".join(
            json.dumps({"text": t, "label": y}) + "\n"
            for t, y in zip(train.texts, train.labels, strict=True)
            if y != intent
        )
    )
    router_config = base(cfg.router_config) or project / "router.yaml"
    data = yaml.safe_load(Path(router_config).read_text())
    data["intents"][intent]["examples"] = chosen
    defined = work / "router.yaml"
    defined.write_text(yaml.safe_dump(data, sort_keys=False))
    test = load_labeled(base(cfg.test_file))
    common = dict(
        train_file=held,
        dev_file=base(cfg.dev_file),
        test_file=None,
        compound_train_file=None,
        compound_dev_file=None,
        compound_test_file=None,
        conversation_test_file=None,
    )
    out: dict = {"project": project.name, "intent": intent, "example_texts": chosen, "seed": seed}
    for kind, router_cfg in (("examples", None), ("class", defined)):
        from training.pipeline import build

        # the dev split has rows of the intent: the model without it is calibrated on the others
        dev = _without(base(cfg.dev_file), intent, work / f"dev-{kind}.jsonl") if kind == "examples" else None
        model_cfg = cfg.model_copy(
            update={**common, "router_config": router_cfg, **({"dev_file": dev} if dev else {})}
        )
        t0 = time.perf_counter()
        oos = project / "data" / "oos.jsonl"
        build(
            model_cfg,
            work / f"model-{kind}",
            report_dir=None,
            oos=oos if oos.is_file() else None,
            report=report,
        )
        router = Router.load(work / f"model-{kind}", config=RouterConfig.load(defined))
        out[kind] = {
            "build_seconds": round(time.perf_counter() - t0, 1),
            **routed_scores(router, test.texts, test.labels, intent),
        }
        if kind == "examples":
            out[kind]["fitted"] = router.examples.summary()[intent]
        report(f"{kind}: {out[kind]}")
    return out


def _without(path: Path, label: str, dst: Path) -> Path:
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    dst.write_text("".join(json.dumps(r) + "\n" for r in rows if r.get("label") != label))
    return dst
