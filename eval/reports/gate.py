"""The CI gate: compare an evaluation report with a committed baseline.

A baseline (eval/baseline.json) is made from a report by ``make_baseline`` and holds the reference
metrics plus the limits the gate applies:

- accuracy and macro-F1 may fall by at most their tolerance below the baseline value;
- each class's F1 must stay at or above its floor (baseline F1 minus ``class_f1_margin``);
- ECE must stay at or below its ceiling (baseline ECE plus ``ece_margin``);
- the accuracy of the accepted messages at the baseline's tau may fall by at most its tolerance;
- out of scope (when the baseline has ``scope``): in-scope accuracy and the share of out-of-scope
  messages not routed to an intent (labelled rows and the --oos file) have floors, the share of
  in-scope messages called out of scope a ceiling;
- compound requests (when the baseline has ``compound``, from ``eval --compound FILE``): the share of
  compound messages with both intents found and with the skills of both loaded have floors; the share
  of single-intent messages called compound (the compound file's twins, the main data) and the mean
  skills loaded per message have ceilings;
- conversations (when the baseline has ``conversation``, from ``eval --conversations FILE``): the share of
  social messages after a request not routed, of continuations given the conversation's intent and of
  messages that switch intent keeping their own have floors;
- tools (when the baseline has ``tools``, from ``eval --tools REGISTRY --tool-data FILE``): tool recall@k,
  the share of requests with every needed tool picked, the precision of "none applies" and the share of
  the registry's definition tokens not loaded have floors.

The limits are plain numbers in the baseline file: edit them there to tighten or loosen a check.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

BASELINE_KIND = "intent-router-eval-baseline"
BASELINE_VERSION = 1

#: Defaults used by ``make_baseline``; all are absolute differences in metric units (0.02 = 2 points).
DEFAULT_POLICY = {
    "accuracy_tolerance": 0.02,
    "macro_f1_tolerance": 0.02,
    "accepted_accuracy_tolerance": 0.02,
    "class_f1_margin": 0.05,
    "ece_margin": 0.02,
    "out_of_scope_tolerance": 0.02,
    "in_scope_lost_margin": 0.01,
    "compound_tolerance": 0.03,
    "single_compound_margin": 0.04,
    "data_compound_margin": 0.01,
    "skills_margin": 0.25,
    "conversation_tolerance": 0.03,
    "tools_tolerance": 0.03,
}

#: baseline key -> (path in the report section, ">=" floor or "<=" ceiling, policy key of the margin)
SCOPE_CHECKS = {
    "in_scope_accuracy": (("in_scope", "accuracy"), ">=", "out_of_scope_tolerance"),
    "in_scope_called_out_of_scope": (("in_scope", "called_out_of_scope"), "<=", "in_scope_lost_margin"),
    "out_of_scope_not_routed": (("out_of_scope", "not_routed"), ">=", "out_of_scope_tolerance"),
    "oos_file_not_routed": (("oos_file", "not_routed"), ">=", "out_of_scope_tolerance"),
}
COMPOUND_CHECKS = {
    "both_found": (("compound", "both_found"), ">=", "compound_tolerance"),
    "skills_of_both_loaded": (("compound", "skills_of_both_loaded"), ">=", "compound_tolerance"),
    "single_called_compound": (("single", "called_compound"), "<=", "single_compound_margin"),
    "data_called_compound": (("data_single", "called_compound"), "<=", "data_compound_margin"),
    "skills_per_message": (("skills", "skills_per_message"), "<=", "skills_margin"),
    "data_skills_per_message": (("data_single", "skills", "skills_per_message"), "<=", "skills_margin"),
}
CONVERSATION_CHECKS = {
    "social_not_routed": (("social", "not_routed"), ">=", "conversation_tolerance"),
    "continuations_resolved": (("continuation", "resolved"), ">=", "conversation_tolerance"),
    "switches_kept": (("switch", "kept"), ">=", "conversation_tolerance"),
}
TOOLS_CHECKS = {
    "recall_at_k": (("routed", "recall_at_k"), ">=", "tools_tolerance"),
    "all_needed": (("routed", "all_needed"), ">=", "tools_tolerance"),
    "none_applies_precision": (("routed", "none_applies", "precision"), ">=", "tools_tolerance"),
    "tokens_saved_of_registry": (("routed", "tokens", "saved_of_registry"), ">=", "tools_tolerance"),
}
#: report section (and baseline key) -> its checks
SECTION_CHECKS = {
    "scope": SCOPE_CHECKS,
    "compound": COMPOUND_CHECKS,
    "conversation": CONVERSATION_CHECKS,
    "tools": TOOLS_CHECKS,
}
MISSING_HINT = {
    "scope": "evaluate with the out-of-scope rows / --oos file",
    "compound": "evaluate with --compound FILE",
    "conversation": "evaluate with --conversations FILE",
    "tools": "evaluate with --tools REGISTRY --tool-data FILE",
}


def _section_value(report: dict, section: str, path: tuple[str, ...]) -> float | None:
    part = report.get(section) or {}
    for key in path:
        part = part.get(key) if isinstance(part, dict) else None
    return part


def _section_limits(report: dict, section: str, p: dict) -> dict | None:
    """Floors and ceilings of a section's checks, from a report that has the section (else None)."""
    if not report.get(section):
        return None
    out = {}
    for key, (path, op, margin_key) in SECTION_CHECKS[section].items():
        v = _section_value(report, section, path)
        if v is None:
            continue
        margin = p[margin_key]
        out[key] = {"baseline": v, "op": op, "limit": _r(max(0.0, v - margin) if op == ">=" else v + margin)}
    return out


class GateError(ValueError):
    """The report or baseline cannot be used for gating."""


@dataclass
class Check:
    name: str
    value: float | None
    op: str  # ">=" or "<="
    limit: float | None
    baseline: float | None
    passed: bool
    detail: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def _r(x: float | None) -> float | None:
    return None if x is None else round(float(x), 6)


def make_baseline(report: dict, **policy: float) -> dict:
    """Baseline from a report, with the limits computed from ``DEFAULT_POLICY`` (override by keyword)."""
    unknown = set(policy) - set(DEFAULT_POLICY)
    if unknown:
        raise ValueError(f"unknown policy keys {sorted(unknown)}; known: {sorted(DEFAULT_POLICY)}")
    p = {**DEFAULT_POLICY, **policy}
    c, cal, at = report["classification"], report["calibration"], report["thresholds"]["at_tau"]
    class_f1 = {l: v["f1"] for l, v in c["per_class"].items() if v["support"] > 0}
    return {
        "schema_version": BASELINE_VERSION,
        "kind": BASELINE_KIND,
        "created_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "source": {
            "model_id": report["model"]["model_id"],
            "backend": report["model"]["backend"],
            "data": report["data"]["source"],
            "data_sha256": report["data"].get("sha256"),
            "n": report["data"]["n"],
            "report_created_at": report["created_at"],
        },
        "threshold": report["threshold"],
        "metrics": {
            "accuracy": c["accuracy"],
            "macro_f1": c["macro_f1"],
            "ece": cal["ece"],
            "accepted_accuracy": at["accepted_accuracy"],
            "class_f1": class_f1,
        },
        "tolerances": {
            "accuracy": p["accuracy_tolerance"],
            "macro_f1": p["macro_f1_tolerance"],
            "accepted_accuracy": p["accepted_accuracy_tolerance"],
        },
        "class_f1_floors": {l: _r(max(0.0, f - p["class_f1_margin"])) for l, f in class_f1.items()},
        "ece_ceiling": _r(cal["ece"] + p["ece_margin"]),
        "scope": _section_limits(report, "scope", p),
        "compound": _section_limits(report, "compound", p),
        "conversation": _section_limits(report, "conversation", p),
        "tools": _section_limits(report, "tools", p),
        "policy": p,
    }


def write_baseline(report: dict, path: str | Path, **policy: float) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(make_baseline(report, **policy), indent=2) + "\n", encoding="utf-8")
    return path


def load_baseline(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise GateError(
            f"baseline not found: {path} (create one with 'intent-router gate --report eval.json "
            f"--baseline {path} --write-baseline')"
        )
    try:
        b = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise GateError(f"{path} is not valid JSON: {e}") from e
    check_baseline(b, str(path))
    return b


def check_baseline(b: dict, where: str = "baseline") -> None:
    if not isinstance(b, dict) or b.get("kind") != BASELINE_KIND:
        raise GateError(f"{where} is not an intent-router baseline (kind must be {BASELINE_KIND!r})")
    if b.get("schema_version") != BASELINE_VERSION:
        raise GateError(
            f"{where}: baseline schema_version {b.get('schema_version')!r} is not supported (expected {BASELINE_VERSION})"
        )
    for key in ("threshold", "metrics", "tolerances", "class_f1_floors", "ece_ceiling"):
        if key not in b:
            raise GateError(f"{where}: missing {key!r}")
    for key in ("accuracy", "macro_f1", "accepted_accuracy"):
        if key not in b["metrics"] or key not in b["tolerances"]:
            raise GateError(f"{where}: metrics and tolerances need {key!r}")


def _accepted_accuracy_at(report: dict, tau: float) -> tuple[float | None, bool]:
    """(accuracy of accepted at tau, whether the report has tau at all)."""
    at = report["thresholds"]["at_tau"]
    if abs(at["tau"] - tau) < 1e-9:
        return at["accepted_accuracy"], True
    for row in report["thresholds"]["sweep"]:
        if abs(row["tau"] - tau) < 1e-9:
            return row["accepted_accuracy"], True
    return None, False


def run_gate(report: dict, baseline: dict) -> list[Check]:
    """Every check of ``report`` against ``baseline``; the gate passes when all checks pass."""
    check_baseline(baseline)
    return [
        *_classification_checks(report, baseline),
        _accepted_check(report, baseline),
        *_section_checks(report, baseline),
    ]


def _at_least(name: str, value, base, tolerance, detail: str = "") -> Check:
    limit = _r(base - tolerance)
    ok = value is not None and value >= limit - 1e-12
    return Check(name, value, ">=", limit, base, ok, detail or f"tol {tolerance:g}")


def _classification_checks(report: dict, baseline: dict) -> list[Check]:
    """Accuracy and macro F1 within their tolerances, each class's F1 above its floor, ECE below its
    ceiling."""
    c, cal = report["classification"], report["calibration"]
    bm, tol = baseline["metrics"], baseline["tolerances"]
    checks = [
        _at_least("accuracy", c["accuracy"], bm["accuracy"], tol["accuracy"]),
        _at_least("macro_f1", c["macro_f1"], bm["macro_f1"], tol["macro_f1"]),
    ]
    for label, floor in baseline["class_f1_floors"].items():
        pc = c["per_class"].get(label)
        value = pc["f1"] if pc else None
        ok = value is not None and value >= floor - 1e-12
        detail = "floor" if pc else "class missing from the report"
        checks.append(
            Check(f"f1[{label}]", value, ">=", floor, bm.get("class_f1", {}).get(label), ok, detail)
        )
    ceiling = baseline["ece_ceiling"]
    ok = cal["ece"] is not None and cal["ece"] <= ceiling + 1e-12
    checks.append(Check("ece", cal["ece"], "<=", ceiling, bm.get("ece"), ok, "ceiling"))
    return checks


def _accepted_check(report: dict, baseline: dict) -> Check:
    """Accuracy of the messages accepted at the baseline's threshold, within its tolerance."""
    bm, tol = baseline["metrics"], baseline["tolerances"]
    tau = baseline["threshold"]
    value, found = _accepted_accuracy_at(report, tau)
    name = f"accepted_accuracy@{tau:g}"
    if not found:
        detail = f"the report has no row for tau {tau:g}"
        return Check(name, None, ">=", None, bm["accepted_accuracy"], False, detail)
    if bm["accepted_accuracy"] is None:
        return Check(
            name, value, ">=", None, None, True, "baseline accepted nothing at this tau: not checked"
        )
    detail = f"tol {tol['accepted_accuracy']:g}" + ("" if value is not None else "; nothing accepted")
    return _at_least(name, value, bm["accepted_accuracy"], tol["accepted_accuracy"], detail)


def _section_checks(report: dict, baseline: dict) -> list[Check]:
    """The floors and ceilings of the baseline's sections (out of scope, compound, conversations, tools)."""
    checks = []
    for section, spec in SECTION_CHECKS.items():
        for key, lim in (baseline.get(section) or {}).items():
            value = _section_value(report, section, spec[key][0]) if key in spec else None
            if lim["op"] == ">=":
                ok = value is not None and value >= lim["limit"] - 1e-12
            else:
                ok = value is not None and value <= lim["limit"] + 1e-12
            detail = "floor" if lim["op"] == ">=" else "ceiling"
            if value is None:
                detail = f"missing from the report ({MISSING_HINT[section]})"
            checks.append(
                Check(f"{section}.{key}", value, lim["op"], lim["limit"], lim["baseline"], ok, detail)
            )
    return checks


def gate_passed(checks: list[Check]) -> bool:
    return all(ch.passed for ch in checks)


GATE_COLUMNS = ["check", "value", "limit", "baseline", "result", "detail"]


def gate_rows(checks: list[Check]) -> list[list[str]]:
    """The checks as table rows (``GATE_COLUMNS``), for people."""
    f = lambda x: "-" if x is None else f"{x:.4f}"  # noqa: E731
    return [
        [c.name, f(c.value), f"{c.op} {f(c.limit)}", f(c.baseline), "pass" if c.passed else "FAIL", c.detail]
        for c in checks
    ]


def gate_notes(report: dict, baseline: dict) -> list[str]:
    """Differences that do not fail the gate but make the comparison less direct."""
    notes = []
    src = baseline.get("source", {})
    if (
        src.get("data_sha256")
        and report["data"].get("sha256")
        and src["data_sha256"] != report["data"]["sha256"]
    ):
        notes.append(
            f"the evaluation data differs from the baseline's ({report['data']['source']} vs {src.get('data')})"
        )
    if src.get("backend") and src["backend"] != report["model"]["backend"]:
        notes.append(f"backend {report['model']['backend']} vs the baseline's {src['backend']}")
    if abs(report["threshold"] - baseline["threshold"]) > 1e-9:
        notes.append(f"the report's tau is {report['threshold']:g}, the baseline's {baseline['threshold']:g}")
    return notes
