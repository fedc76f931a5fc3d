"""Write and read evaluation reports: eval.json (schema eval/reports/schema/eval_report.schema.json), report.md
and the PNG plots. The report itself comes from eval.metrics.evaluator.run_evaluation.

    report = run_evaluation("models/intent-minilm", "data/test.jsonl", oos="data/oos.jsonl")
    write_report(report, "reports/eval")
"""

from __future__ import annotations

import json
from pathlib import Path

from eval.metrics.evaluator import REPORT_KIND, SCHEMA_VERSION

SCHEMA_PATH = Path(__file__).resolve().parent / "schema" / "eval_report.schema.json"
REPORT_FILES = {"json": "eval.json", "markdown": "report.md"}


# ------------------------------------------------------------------------------------- writing
def write_report(report: dict, out_dir: str | Path, plots: bool = True) -> dict[str, Path]:
    """Write eval.json, report.md and (with ``plots``) the three PNGs; return their paths by kind."""
    from eval.reports.markdown import render_markdown
    from eval.reports.plots import write_plots

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    paths["json"] = out_dir / REPORT_FILES["json"]
    paths["json"].write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if plots:
        paths.update(write_plots(report, out_dir))
    paths["markdown"] = out_dir / REPORT_FILES["markdown"]
    paths["markdown"].write_text(render_markdown(report, plots=plots), encoding="utf-8")
    return paths


def write_json(result: dict, path: str | Path, ensure_ascii: bool = True) -> Path:
    """``result`` as indented JSON in UTF-8 at ``path``, its folder made if missing; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, ensure_ascii=ensure_ascii) + "\n", encoding="utf-8")
    return path


class ReportError(ValueError):
    """A report file cannot be read or has an unsupported schema version."""


def load_report(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ReportError(f"report not found: {path}")
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ReportError(f"{path} is not valid JSON: {e}") from e
    if not isinstance(report, dict) or report.get("kind") != REPORT_KIND:
        raise ReportError(
            f"{path} is not an intent-router evaluation report (kind {report.get('kind') if isinstance(report, dict) else None!r})"
        )
    if report.get("schema_version") != SCHEMA_VERSION:
        raise ReportError(
            f"{path}: report schema_version {report.get('schema_version')!r} is not supported (expected {SCHEMA_VERSION})"
        )
    return report


def load_schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
