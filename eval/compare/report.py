"""The comparison report: both models routed over the same labelled messages, then compare.json and compare.md.

``compare_models`` loads the two exported models as routers (``router.Router.load``, no verifier) and
the data through the one loader (``eval.readers.loader.load_labeled``), routes every message one at a time with
``route()`` through both (the order alternates per message, so both see the same machine load) and
returns the figures and verdict of eval.compare.figures. ``write_compare`` writes compare.json (schema
``COMPARE_KIND`` version ``COMPARE_VERSION``) and compare.md.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from eval.compare.data_notes import data_notes
from eval.compare.figures import (
    NO_INTENT,
    CompareError,
    Routed,
    Rule,
    confident_pairs,
    latency_checks,
    paired,
    per_class,
    verdict,
)
from router.intents import RESERVED
from router.serve.promotion import COMPARE_KIND, COMPARE_VERSION  # the format a reload reads

ROLE = "viewer"  # RBAC changes skills, never the intent
WARMUP = 5  # messages routed by each model before timing starts


# ---------------------------------------------------------------------------------- routing
def route_both(incumbent, candidate, texts: Sequence[str], report: Callable[[str], None]) -> dict:
    """Decisions and route() milliseconds of two routers, interleaved: message i is routed by the
    incumbent first when i is even, by the candidate first when odd."""
    for text in texts[:WARMUP]:
        incumbent.route(text, ROLE)
        candidate.route(text, ROLE)
    out: dict[str, tuple[list, list[float]]] = {"incumbent": ([], []), "candidate": ([], [])}
    routers, step = {"incumbent": incumbent, "candidate": candidate}, max(1, len(texts) // 10)
    for i, text in enumerate(texts):
        for key in ("incumbent", "candidate") if i % 2 == 0 else ("candidate", "incumbent"):
            t0 = time.perf_counter()
            d = routers[key].route(text, ROLE)
            out[key][1].append((time.perf_counter() - t0) * 1000)
            out[key][0].append(d)
        if (i + 1) % step == 0 or i + 1 == len(texts):
            report(f"routed {i + 1}/{len(texts)} messages through both models")
    return out


# --------------------------------------------------------------------------------- loading
def open_router(model_dir: str | Path, config: str | Path | None, flag: str):
    """An exported model as a Router (no verifier), or a one-line CompareError naming the option."""
    from router.config import RouterConfig
    from router.manifest import MANIFEST_NAME, ModelError
    from router.routing import Router

    if not (Path(model_dir) / MANIFEST_NAME).is_file():
        raise CompareError(f"{flag} {model_dir}: no {MANIFEST_NAME} (give an exported model directory)")
    try:
        cfg = RouterConfig.load(config)
    except (ValueError, OSError) as e:
        raise CompareError(str(e)) from e  # the message names the file (and line)
    try:
        return Router.load(model_dir, config=cfg)
    except (ModelError, ValueError, OSError) as e:
        raise CompareError(f"{flag} {model_dir}: {e}") from e


def labels_of(router) -> list[str]:
    """A router's labels: the model's (manifest order), then intents defined by examples in its config."""
    return list(dict.fromkeys([*router.classifier.labels, *router.intents]))


def shared_labels(incumbent, candidate, allow_label_change: bool) -> dict:
    li, lc = labels_of(incumbent), labels_of(candidate)
    only_i, only_c = [l for l in li if l not in lc], [l for l in lc if l not in li]
    if (only_i or only_c) and not allow_label_change:
        raise CompareError(
            f"the models' labels differ (only the incumbent: {', '.join(only_i) or 'none'}; only the "
            f"candidate: {', '.join(only_c) or 'none'}): pass --allow-label-change to compare on the shared labels"
        )
    shared = [l for l in li if l in lc]
    if not [l for l in shared if l not in RESERVED]:
        raise CompareError("the models share no intent: there is nothing to compare")
    return {
        "compared": shared,
        "only_incumbent": only_i,
        "only_candidate": only_c,
        "changed": bool(only_i or only_c),
    }


def _conversation_file(source) -> bool:
    """Whether a JSONL file's first row is a conversation (``turns``, data/conversations/)."""
    from eval.readers.sources import JSONL_SUFFIXES, DataError, iter_jsonl, read_text

    if Path(str(source)).suffix.lower() not in JSONL_SUFFIXES or not Path(str(source)).is_file():
        return False
    try:
        text = read_text(source)
    except DataError:
        return False
    for _, obj, _ in iter_jsonl(text):
        return obj is not None and "turns" in obj
    return False


def load_rows(data: Sequence[str | Path], labels: dict) -> dict:
    """Rows of every file (eval.readers.loader.load_labeled), those with a label both models know."""
    from eval.readers.loader import load_labeled
    from eval.readers.sources import DataError

    known = [*labels["compared"], *labels["only_incumbent"], *labels["only_candidate"]]
    texts, gold, where, files, seen = [], [], [], [], set()
    for src in data:
        key = str(Path(src).resolve()) if Path(str(src)).exists() else str(src)
        if key in seen:
            raise CompareError(f"{src}: given twice with --data (each message must count once)")
        seen.add(key)
        try:
            d = load_labeled(src, labels=known)
        except DataError as e:
            if _conversation_file(src):
                raise CompareError(
                    f"{src}: conversation rows ('turns'): compare routes single messages of one 'label' each "
                    "(route conversations with 'intent-router eval --conversations')"
                ) from e
            raise CompareError(str(e)) from e
        if d.compound:
            i = next(k for k, s in enumerate(d.secondary) if s)
            raise CompareError(
                f"{src}: {d.where(i)} is a compound request ('labels' with two intents): compare takes rows of "
                "one 'label' each (score compound requests with 'intent-router eval --compound')"
            )
        used = 0
        for i, (t, l) in enumerate(zip(d.texts, d.labels, strict=True)):
            if l in labels["compared"]:
                texts.append(t)
                gold.append(l)
                where.append(f"{src}:{d.lines[i]}" if d.lines else f"{src}: row {d.rows[i]}")
                used += 1
        files.append({"source": str(src), "sha256": d.sha256, "rows": len(d), "compared": used})
    if not texts:
        raise CompareError("no row has a label both models know")
    sha = digest_of([f["sha256"] for f in files])
    data_part = {"files": files, "sha256": sha, "left_out": sum(f["rows"] - f["compared"] for f in files)}
    return {"texts": texts, "labels": gold, "where": where, "data": data_part}


def digest_of(digests: Sequence[str | None]) -> str | None:
    """One file's sha256, or for several the sha256 of their digests joined by newlines (None if one is unknown)."""
    if any(d is None for d in digests):
        return None
    if len(digests) == 1:
        return digests[0]
    return hashlib.sha256("\n".join(digests).encode()).hexdigest()


# ------------------------------------------------------------------------------------- run
def compare_models(
    candidate: str | Path,
    incumbent: str | Path,
    data: Sequence[str | Path],
    *,
    config: str | Path | None = None,
    candidate_config: str | Path | None = None,
    rule: Rule | None = None,
    allow_label_change: bool = False,
    report: Callable[[str], None] = lambda _: None,
) -> dict:
    """Route ``data`` through both models and return the comparison (the content of compare.json)."""
    rule = rule or Rule()
    rule.check()
    if not data:
        raise CompareError("give at least one --data FILE")
    routers = {
        "incumbent": open_router(incumbent, config, "--incumbent"),
        "candidate": open_router(candidate, candidate_config or config, "--candidate"),
    }
    labels = shared_labels(routers["incumbent"], routers["candidate"], allow_label_change)
    rows = load_rows(data, labels)
    texts, gold, n = rows["texts"], rows["labels"], len(rows["labels"])
    models = {
        key: {
            "model_dir": str(r.classifier.model_dir),
            "model_id": r.classifier.model_id,
            "labels": labels_of(r),
        }
        for key, r in routers.items()
    }
    report(
        f"routing {n} messages: {models['incumbent']['model_id']} (incumbent), {models['candidate']['model_id']} (candidate)"
    )
    runs = route_both(routers["incumbent"], routers["candidate"], texts, report)
    inc, cand = (
        Routed(gold, [d.intent for d in ds], [d.reason_code.value for d in ds], ms)
        for ds, ms in runs.values()
    )
    pairs, conf = paired(inc, cand, rule.alpha), confident_pairs(inc, cand)
    checks = verdict(rule, n, pairs["n01"], pairs["n10"], conf["incumbent"], conf["candidate"])
    checks += latency_checks(rule, inc, cand)
    dirs = {key: Path(m["model_dir"]) for key, m in models.items()}
    discordant = [
        {"where": w, "text": t, "label": l, "incumbent": a, "candidate": b}
        for t, l, w, a, b, ra, rb in zip(
            texts, gold, rows["where"], inc.intents, cand.intents, inc.right, cand.right, strict=True
        )
        if ra != rb
    ]
    return {
        "kind": COMPARE_KIND,
        "schema_version": COMPARE_VERSION,
        "created_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "passed": all(c.passed for c in checks),
        "rule": {
            **asdict(rule),
            "text": rule.text(),
            "allowed_extra_confident": round(rule.allowed_extra(n), 6),
        },
        "checks": [c.to_dict() for c in checks],
        "config": {"incumbent": _str(config), "candidate": _str(candidate_config or config)},
        "labels": labels,
        "data": {**rows["data"], "n": n, "notes": data_notes(rows["data"]["files"], dirs)},
        "incumbent": {**models["incumbent"], **inc.figures()},
        "candidate": {**models["candidate"], **cand.figures()},
        "paired": pairs,
        "confident_mistakes": conf,
        "per_class": per_class(inc, cand),
        "discordant": discordant,
    }


def _str(p) -> str | None:
    return None if p is None else str(p)


# ----------------------------------------------------------------------------------- output
REPORT_FILES = {"json": "compare.json", "markdown": "compare.md"}
SHOWN_DISCORDANT = 50  # in compare.md; compare.json lists every one


def figure_rows(result: dict) -> list[list]:
    """[figure, incumbent, candidate, delta] rows: accuracy, confident mistakes, accepted share, latency."""
    inc, cand = result["incumbent"], result["candidate"]
    rows = [["model", inc["model_id"], cand["model_id"], ""]]
    n = result["data"]["n"]
    for key, count, name, scale in (
        ("accuracy", "right", "accuracy", 1 / n),
        ("confident_mistakes", "confident_mistakes", "confident mistakes", 1),
        ("confident_mistakes_per_1000", "confident_mistakes", "confident mistakes per 1000", 1000 / n),
        ("accepted_share", "accepted", "accepted at the threshold", 1 / n),
    ):  # deltas from the counts, not from the rounded figures
        rows.append([name, inc[key], cand[key], _signed((cand[count] - inc[count]) * scale)])
    for q in ("p50", "p90", "p99"):
        a, b = inc["latency_ms"][q], cand["latency_ms"][q]
        rows.append([f"route() {q} ms", a, b, _signed(b - a) if a is not None and b is not None else ""])
    return rows


def paired_rows(result: dict) -> list[list]:
    p = result["paired"]
    return [
        ["messages (n)", p["n"]],
        ["both right", p["both_right"]],
        ["both wrong", p["both_wrong"]],
        ["n01: incumbent right, candidate wrong", p["n01"]],
        ["n10: incumbent wrong, candidate right", p["n10"]],
        ["McNemar exact p (two-sided)", p["mcnemar_exact_p"]],
        [
            "chi-square, continuity-corrected (reference)",
            f"{p['chi2_corrected']} (p = {p['chi2_corrected_p']})",
        ],
    ]


def check_rows(result: dict) -> list[list]:
    return [[c["name"], "pass" if c["passed"] else "FAIL", c["detail"]] for c in result["checks"]]


def class_rows(result: dict) -> list[list]:
    """[label, n, recall incumbent, candidate, delta, F1 incumbent, candidate, delta]."""
    rows = []
    for c in result["per_class"]:
        r, f = c["recall"], c["f1"]
        f1 = [f["incumbent"], f["candidate"], _signed(f["delta"])] if f else ["-", "-", "-"]
        rows.append([c["label"], c["n"], r["incumbent"], r["candidate"], _signed(r["delta"]), *f1])
    return rows


def notes(result: dict) -> list[str]:
    """What the figures cannot tell, in words."""
    p, out = result["paired"], []
    d = p["n01"] + p["n10"]
    if d < p["discordant_needed"]:
        out.append(
            f"only {d} discordant message(s): the exact test cannot reach p < {result['rule']['alpha']} with "
            f"fewer than {p['discordant_needed']}, so the significance check cannot fail on this data"
        )
    if 0 < d < 25:
        out.append(f"{d} discordant message(s): the chi-square approximation is poor; the exact p decides")
    out += result["data"].get("notes", [])
    labels = result["labels"]
    if labels["changed"]:
        out.append(
            f"label sets differ: compared on the shared labels ({', '.join(labels['compared'])}); only the "
            f"incumbent: {', '.join(labels['only_incumbent']) or 'none'}; only the candidate: "
            f"{', '.join(labels['only_candidate']) or 'none'}; {result['data']['left_out']} row(s) left out"
        )
    return out


def _signed(x: float) -> str:
    return f"{round(x, 6):+g}"


def _md_table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + [
        "| " + " | ".join(" ".join(str(c).split()).replace("|", "\\|") for c in r) + " |" for r in rows
    ]


def render_markdown(result: dict) -> str:
    inc, cand = result["incumbent"], result["candidate"]
    failed = [c["name"] for c in result["checks"] if not c["passed"]]
    lines = [
        f"# Compare: {cand['model_id']} (candidate) against {inc['model_id']} (incumbent)",
        "",
        f"**{'PASS' if result['passed'] else 'FAIL'}**" + (f": {', '.join(failed)}" if failed else ""),
        "",
        f"Rule: {result['rule']['text']}.",
        "",
        *_md_table(["check", "result", "detail"], check_rows(result)),
        "",
        "## Models",
        "",
        *_md_table(["", "incumbent", "candidate", "delta"], figure_rows(result)),
        "",
        "## Paired errors",
        "",
        *_md_table(["", "value"], paired_rows(result)),
        "",
        *[f"- {n}" for n in notes(result)],
        "",
        "## Per class",
        "",
        "Recall is the share of a label's rows routed right; OUT_OF_SCOPE and CONTINUATION rows are right "
        f"with no intent, and the F1 of that shared answer is in the `{NO_INTENT}` row.",
        "",
        *_md_table(
            ["label", "n", "recall inc", "recall cand", "delta", "F1 inc", "F1 cand", "delta"],
            class_rows(result),
        ),
        "",
        "## Data",
        "",
        *_md_table(
            ["file", "sha256", "rows", "compared"],
            [[f["source"], f["sha256"] or "-", f["rows"], f["compared"]] for f in result["data"]["files"]],
        ),
        "",
        f"Messages where one model is right and the other wrong: {len(result['discordant'])}"
        + (
            f" (the first {SHOWN_DISCORDANT}; compare.json lists all)"
            if len(result["discordant"]) > SHOWN_DISCORDANT
            else ""
        ),
        "",
        *_md_table(
            ["where", "label", "incumbent", "candidate", "text"],
            [
                [d["where"], d["label"], d["incumbent"] or "-", d["candidate"] or "-", d["text"][:120]]
                for d in result["discordant"][:SHOWN_DISCORDANT]
            ],
        ),
    ]
    return "\n".join(lines) + "\n"


def write_compare(result: dict, out_dir: str | Path) -> dict[str, Path]:
    """Write compare.json and compare.md into ``out_dir``; return their paths by kind."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {kind: out / name for kind, name in REPORT_FILES.items()}
    paths["json"].write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    paths["markdown"].write_text(render_markdown(result), encoding="utf-8")
    return paths
