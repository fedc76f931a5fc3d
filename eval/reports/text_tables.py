"""Text cells and Markdown tables for the reports people read (eval.reports.markdown, eval.metrics.conversation_turns)."""

from __future__ import annotations


def f(x, nd: int = 4) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


def pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def cell(text: str, limit: int = 120) -> str:
    t = " ".join(str(text).split())
    t = t if len(t) <= limit else t[: limit - 1] + "…"
    return (t or "(blank)").replace("|", "\\|")


def _numeric(cell) -> bool:
    t = (
        str(cell)
        .strip("*%")
        .replace(" / ", "")
        .replace(" msg/s", "")
        .replace("-", "")
        .replace(".", "")
        .replace(" ", "")
    )
    return t == "" or t.isdigit()


def table(header: list[str], rows: list[list]) -> list[str]:
    """A Markdown table; columns whose cells are all numbers are right-aligned."""
    right = [bool(rows) and all(_numeric(r[i]) for r in rows) for i in range(len(header))]
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if r else "---" for r in right) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return [*out, ""]
