"""The evaluation summary the build and `eval` print: headline figures and per-class metrics."""

from __future__ import annotations

from router.console import console, table


def print_eval_summary(report: dict) -> None:
    from eval.reports.markdown import per_class_rows, summary_rows

    m, d = report["model"], report["data"]
    title = f"{m['model_id']} ({m['backend']}) on {d['source']} (n={d['n']})"
    table(title, ["metric", "value"], summary_rows(report))
    table("Per class", ["label", "precision", "recall", "F1", "support"], per_class_rows(report))
    console.print(f"{len(report['misclassified'])} misclassified (see report.md)")
