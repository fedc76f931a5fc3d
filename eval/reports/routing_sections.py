"""report.md's sections on what the router does: in scope and out of scope, and compound requests."""

from __future__ import annotations

from eval.reports.text_tables import f as _f
from eval.reports.text_tables import pct as _pct
from eval.reports.text_tables import table as _table


def scope_lines(sc: dict | None) -> list[str]:
    """The router's out-of-scope behaviour (eval/metrics/out_of_scope.py): in-scope rows and out-of-scope rows."""
    if not sc:
        return []
    ins = sc["in_scope"]
    dist = f", distance threshold {_f(sc['distance_threshold'], 1)}" if sc["distance_threshold"] else ""
    lines = [
        "## In scope and out of scope (router rule, no verifier)",
        "",
        f"Out of scope: the OUT_OF_SCOPE class at confidence >= tau {sc['tau']:g}, or the in-scope distance "
        f"above its threshold{dist}. Not routed: out of scope or below tau.",
        "",
    ]
    rows = [
        [f"in scope (n={ins['n']}): accuracy", _f(ins["accuracy"])],
        [
            "in scope: called out of scope (classifier / distance)",
            f"{_pct(ins['called_out_of_scope'])} ({_pct(ins['called_by_classifier'])} / {_pct(ins['called_by_distance'])})",
        ],
        [
            "in scope: accepted / accuracy of accepted",
            f"{_pct(ins['accepted_share'])} / {_f(ins['accepted_accuracy'])}",
        ],
    ]
    for key, name in (("out_of_scope", "labelled out-of-scope rows"), ("oos_file", "--oos file")):
        o = sc.get(key)
        if not o:
            continue
        rows.append(
            [
                f"{name} (n={o['n']}): called out of scope / not routed",
                f"{_pct(o['recall'])} / {_pct(o['not_routed'])}",
            ]
        )
        rows.append(
            [
                f"{name}: by classifier / by distance / only by distance",
                f"{_pct(o['by_classifier'])} / {_pct(o['by_distance'])} / {_pct(o['only_by_distance'])}",
            ]
        )
        if o.get("not_routed_with_guardrail") is not None:
            rows.append([f"{name}: not routed, with the guardrail", _pct(o["not_routed_with_guardrail"])])
    rows.append(["precision of out-of-scope calls (labelled rows)", _f(sc["precision"])])
    lines += _table(["", "value"], rows)
    lines += _table(
        [
            "tau",
            "in scope accepted",
            "accuracy of accepted",
            "in scope called out of scope",
            "out of scope not routed",
        ],
        [
            [
                f"{r['tau']:g}",
                _pct(r["in_scope_accepted_share"]),
                _f(r["in_scope_accepted_accuracy"]),
                _pct(r["in_scope_called_out_of_scope"]),
                _pct(r["out_of_scope_not_routed"]),
            ]
            for r in sc["sweep"]
        ],
    )
    return lines


def compound_lines(cp: dict | None) -> list[str]:
    """Compound requests (eval/metrics/two_intent.py): the compound file's two-intent rows and single twins."""
    if not cp:
        return []
    c, s, d, k = cp["compound"], cp["single"], cp["data_single"], cp["skills"]
    head = f"threshold {cp['compound_threshold']:g}" if cp["compound_head"] else "none: every message single"
    lines = ["## Compound requests", "", f"`{cp['source']}`: {cp['n']} messages; compound head {head}.", ""]
    rows = [
        [
            f"compound (n={c['n']}): both intents found / in order",
            f"{_pct(c['both_found'])} / {_pct(c['exact_order'])}",
        ],
        [
            "compound: primary right / skills of both loaded",
            f"{_pct(c['primary_correct'])} / {_pct(c['skills_of_both_loaded'])}",
        ],
        [
            "compound: accepted / fallback / out of scope",
            " / ".join(_pct(c[x]) for x in ("accepted", "fallback", "out_of_scope")),
        ],
        [
            f"single twins (n={s['n']}): accuracy / called compound",
            f"{_pct(s['accuracy'])} / {_pct(s['called_compound'])}",
        ],
        [f"main data single (n={d['n']}): called compound", _pct(d["called_compound"])],
        ["per-intent macro-F1 (multi-label)", _f(cp["macro_f1"])],
        [
            "skills / budget per message (gold routing)",
            f"{_f(k['skills_per_message'], 2)} / {_f(k['budget_per_message'], 0)} ({_f(k['gold_skills_per_message'], 2)} / {_f(k['gold_budget_per_message'], 0)})",
        ],
        [f"token savings vs every skill ({k['every_skill']['budget']} tokens)", _pct(k["token_savings"])],
    ]
    return lines + _table(["", "value"], rows)
