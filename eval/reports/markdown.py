"""The Markdown report for people, rendered from the report dict."""

from __future__ import annotations

from eval.metrics.conversation_turns import markdown_lines as conversation_lines
from eval.metrics.intent_thresholds import markdown_lines as threshold_lines
from eval.metrics.tool_selection import markdown_lines as tool_lines
from eval.reports.plots import PLOT_FILES
from eval.reports.routing_sections import compound_lines, scope_lines
from eval.reports.text_tables import cell as _cell
from eval.reports.text_tables import f as _f
from eval.reports.text_tables import pct as _pct
from eval.reports.text_tables import table as _table

MAX_ROWS = 50


def render_markdown(report: dict, plots: bool = True) -> str:
    """report.md: the report's sections in order, each rendered from its part of the report dict."""
    lines = _header(report) + _summary(report) + _per_class(report) + _confusion(report, plots)
    lines += _calibration(report, plots) + _sweep(report, plots) + _oos(report)
    lines += scope_lines(report.get("scope")) + compound_lines(report.get("compound"))
    lines += conversation_lines(report.get("conversation")) + tool_lines(report.get("tools"))
    if report.get("intent_thresholds"):
        lines += ["## Thresholds per intent", "", *threshold_lines(report["intent_thresholds"]), ""]
    lines += _verifier(report) + _latency(report) + _misclassified(report)
    return "\n".join(lines).rstrip() + "\n"


def _header(report: dict) -> list[str]:
    m, d, tau = report["model"], report["data"], report["threshold"]
    return [
        f"# Evaluation: {m.get('name') or m['model_id']}",
        "",
        f"- model: `{m['model_id']}` ({m['backend']}{', ' + m['variant'] if m.get('variant') else ''}), path `{m.get('path')}`",
        f"- data: `{d['source']}` ({d['format']}{', split ' + d['split'] if d.get('split') else ''}), {d['n']} messages"
        + (f", {len(d['skipped'])} invalid row(s) skipped" if d.get("skipped") else ""),
        f"- threshold tau: {tau:g}",
        f"- created: {report['created_at']}, schema version {report['schema_version']}",
        "",
        "## Summary",
        "",
    ]


def _summary(report: dict) -> list[str]:
    """The headline figures: accuracy, calibration, the share accepted at tau, out of scope, latency."""
    c, cal, tau = report["classification"], report["calibration"], report["threshold"]
    at = report["thresholds"]["at_tau"]
    summary = [
        ["accuracy", _f(c["accuracy"])],
        ["macro-F1", _f(c["macro_f1"])],
        ["ECE", _f(cal["ece"])],
        ["NLL", _f(cal["nll"])],
        ["Brier", _f(cal["brier"])],
        [f"accepted at tau {tau:g}", _pct(at["accepted_share"])],
        [f"accuracy of accepted at tau {tau:g}", _f(at["accepted_accuracy"])],
        [f"sent to verifier at tau {tau:g}", _pct(at["to_verifier_share"])],
    ]
    if report.get("oos"):
        summary.append(
            [f"out-of-scope recall (below tau, n={report['oos']['n']})", _pct(report["oos"]["recall"])]
        )
    lat = report.get("latency")
    if lat:
        s = lat["single"]
        summary.append(
            [
                "latency p50 / p95 / p99 (ms, one message)",
                f"{_f(s['p50_ms'], 2)} / {_f(s['p95_ms'], 2)} / {_f(s['p99_ms'], 2)}",
            ]
        )
        summary.append(
            [
                f"throughput (batch {lat['batch']['batch_size']})",
                f"{_f(lat['batch']['messages_per_second'], 1)} msg/s",
            ]
        )
    return _table(["metric", "value"], summary)


def _per_class(report: dict) -> list[str]:
    c = report["classification"]
    lines = ["## Per class", ""]
    lines += _table(
        ["label", "precision", "recall", "F1", "support"],
        [
            [l, _f(v["precision"]), _f(v["recall"]), _f(v["f1"]), v["support"]]
            for l, v in c["per_class"].items()
        ],
    )
    return lines


def _confusion(report: dict, plots: bool) -> list[str]:
    cm = report["classification"]["confusion_matrix"]
    lines = ["## Confusion matrix", "", "Rows: true label; columns: predicted.", ""]
    lines += _table(
        ["true \\ predicted", *cm["labels"]],
        [[l, *row] for l, row in zip(cm["labels"], cm["matrix"], strict=True)],
    )
    if plots:
        lines += [f"![confusion matrix]({PLOT_FILES['confusion_matrix']})", ""]
    return lines


def _calibration(report: dict, plots: bool) -> list[str]:
    cal = report["calibration"]
    lines = [
        "## Calibration",
        "",
        f"ECE {_f(cal['ece'])} over {cal['n_bins']} equal-width bins, NLL {_f(cal['nll'])}, Brier {_f(cal['brier'])}.",
        "",
    ]
    lines += _table(
        ["confidence bin", "messages", "mean confidence", "accuracy"],
        [
            [f"{b['lower']:.2f}-{b['upper']:.2f}", b["count"], _f(b["confidence"]), _f(b["accuracy"])]
            for b in cal["bins"]
            if b["count"]
        ],
    )
    if plots:
        lines += [f"![reliability diagram]({PLOT_FILES['reliability']})", ""]
    return lines


def _sweep(report: dict, plots: bool) -> list[str]:
    th, tau = report["thresholds"], report["threshold"]
    lines = [
        "## Threshold sweep",
        "",
        "Accepted: confidence >= tau; the rest go to the verifier (or the fallback).",
        "",
    ]
    has_oos = any(r.get("oos_recall") is not None for r in th["sweep"])
    header = ["tau", "accepted", "accuracy of accepted", "to verifier"] + (
        ["out-of-scope recall"] if has_oos else []
    )
    rows = []
    for r in th["sweep"]:
        tau_cell = f"**{r['tau']:g}**" if abs(r["tau"] - tau) < 1e-9 else f"{r['tau']:g}"
        row = [tau_cell, _pct(r["accepted_share"]), _f(r["accepted_accuracy"]), _pct(r["to_verifier_share"])]
        rows.append(row + ([_pct(r["oos_recall"])] if has_oos else []))
    lines += _table(header, rows)
    if plots:
        lines += [f"![threshold curve]({PLOT_FILES['thresholds']})", ""]
    return lines


def _oos(report: dict) -> list[str]:
    tau = report["threshold"]
    o = report.get("oos")
    if not o:
        return []
    lines = [
        "## Out of scope",
        "",
        f"`{o['source']}`: {o['n']} messages. Below tau {tau:g}: {_pct(o['recall'])} "
        f"(mean confidence {_f(o['mean_confidence'])}). With the router's guardrail "
        f"({_pct(o.get('guardrail_share'))} stopped before the classifier): {_pct(o.get('router_recall'))} not accepted.",
        "",
    ]
    if o["accepted_examples"]:
        lines += ["Accepted as an intent (most confident first):", ""]
        lines += _table(
            ["row", "text", "predicted", "confidence"],
            [
                [e["row"], _cell(e["text"]), e["predicted"], _f(e["confidence"])]
                for e in o["accepted_examples"]
            ],
        )
    return lines


def _verifier(report: dict) -> list[str]:
    v = report.get("verifier")
    if not v:
        return []
    lines = [
        "## Verifier lift",
        "",
        f"Verifier `{v['verifier']}` on the {v['n_verified']} of {v['n_below']} messages below tau {v['tau']:g}.",
        "",
    ]
    lines += _table(
        ["", "value"],
        [
            ["classifier alone: accuracy", _f(v["classifier_accuracy"])],
            ["with verifier: accuracy (failures count wrong)", _f(v["verifier_accuracy"])],
            ["lift", _f(v["lift"])],
            ["verifier answered / failed", f"{v['answered']} / {v['failed']}"],
            ["accuracy of verifier answers", _f(v["verifier_accuracy_answered"])],
            ["end-to-end accuracy (accepted + verified)", _f(v["end_to_end_accuracy"])],
            [
                "verifier latency p50 / p95 (ms)",
                f"{_f(v['latency']['p50_ms'], 1)} / {_f(v['latency']['p95_ms'], 1)}",
            ],
        ],
    )
    return lines


def _latency(report: dict) -> list[str]:
    lat = report.get("latency")
    if not lat:
        return []
    s, b = lat["single"], lat["batch"]
    lines = [
        "## Latency",
        "",
        f"One message at a time, {s['n']} messages: p50 {_f(s['p50_ms'], 3)} ms, p95 {_f(s['p95_ms'], 3)} ms, "
        f"p99 {_f(s['p99_ms'], 3)} ms, max {_f(s['max_ms'], 3)} ms. Batches of {b['batch_size']}: "
        f"{_f(b['messages_per_second'], 1)} messages/s. ({report['environment']['cpus']} CPUs, {report['environment']['platform']})",
        "",
    ]
    return lines


def _misclassified(report: dict) -> list[str]:
    d, mis = report["data"], report["misclassified"]
    lines = [
        "## Misclassified",
        "",
        f"{len(mis)} of {d['n']} messages; most confident first"
        + (f" (first {MAX_ROWS} shown; all in eval.json)" if len(mis) > MAX_ROWS else "")
        + ".",
        "",
    ]
    if mis:
        lines += _table(
            ["where", "text", "label", "predicted", "confidence", "p(label)", "accepted"],
            [
                [
                    e.get("where") or e["row"],
                    _cell(e["text"]),
                    e["label"],
                    e["predicted"],
                    _f(e["confidence"]),
                    _f(e["label_probability"]),
                    "yes" if e["accepted"] else "no",
                ]
                for e in mis[:MAX_ROWS]
            ],
        )
    return lines


def summary_rows(report: dict) -> list[list[str]]:
    """(metric, value) rows of a report's headline numbers, for a terminal table."""
    c, cal, at = report["classification"], report["calibration"], report["thresholds"]["at_tau"]
    rows = [
        ["accuracy", _f(c["accuracy"])],
        ["macro-F1", _f(c["macro_f1"])],
        ["ECE", _f(cal["ece"])],
        ["NLL", _f(cal["nll"])],
        ["Brier", _f(cal["brier"])],
        [f"accepted at tau {at['tau']:g}", _f(at["accepted_share"])],
        ["accuracy of accepted", _f(at["accepted_accuracy"])],
        ["to verifier", _f(at["to_verifier_share"])],
    ]
    if report.get("oos"):
        rows.append([f"out-of-scope recall (n={report['oos']['n']})", _f(report["oos"]["recall"])])
    sc = report.get("scope")
    if sc:
        rows.append(["in-scope accuracy", _f(sc["in_scope"]["accuracy"])])
        rows.append(["in scope called out of scope", _f(sc["in_scope"]["called_out_of_scope"])])
        for key in ("out_of_scope", "oos_file"):
            if sc.get(key):
                rows.append([f"{key} not routed (n={sc[key]['n']})", _f(sc[key]["not_routed"])])
    cp = report.get("compound")
    if cp:
        rows.append(
            [f"compound: both intents found (n={cp['compound']['n']})", _f(cp["compound"]["both_found"])]
        )
        rows.append(["compound: skills of both loaded", _f(cp["compound"]["skills_of_both_loaded"])])
        rows.append(
            [f"single twins called compound (n={cp['single']['n']})", _f(cp["single"]["called_compound"])]
        )
        rows.append(["skills per message (compound file)", _f(cp["skills"]["skills_per_message"], 2)])
    cv = report.get("conversation")
    if cv:
        rows.append(
            [f"social after a request not routed (n={cv['social']['n']})", _f(cv["social"]["not_routed"])]
        )
        rows.append(
            [f"continuations resolved (n={cv['continuation']['n']})", _f(cv["continuation"]["resolved"])]
        )
        rows.append([f"intent switches kept (n={cv['switch']['n']})", _f(cv["switch"]["kept"])])
    tl = report.get("tools")
    if tl:
        rows.append([f"tools: recall@{tl['k']} routed (n={tl['needing']})", _f(tl["routed"]["recall_at_k"])])
        rows.append(["tools: every needed tool picked", _f(tl["routed"]["all_needed"])])
        rows.append(["tools: none-applies precision", _f(tl["routed"]["none_applies"]["precision"])])
    if report.get("latency"):
        s, b = report["latency"]["single"], report["latency"]["batch"]
        rows.append(
            ["latency p50/p95/p99 ms", " / ".join(_f(s[k], 2) for k in ("p50_ms", "p95_ms", "p99_ms"))]
        )
        rows.append(["batch msg/s", _f(b["messages_per_second"], 1)])
    if report.get("verifier"):
        v = report["verifier"]
        rows.append(
            [
                f"verifier lift on {v['n_verified']} below tau",
                f"{_f(v['classifier_accuracy'])} -> {_f(v['verifier_accuracy'])}",
            ]
        )
    return rows


def per_class_rows(report: dict) -> list[list[str]]:
    return [
        [label, _f(v["precision"]), _f(v["recall"]), _f(v["f1"]), str(v["support"])]
        for label, v in report["classification"]["per_class"].items()
    ]
