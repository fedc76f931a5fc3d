"""Promotion by compare report: a reload that changes the serving model can be made to need a passed
challenger gate (``intent-router compare``, eval.compare) of the serving model against the new one.

The report names both models by ``model_id``, which carries a digest of each model's manifest
(router.manifest.Manifest.model_id), so a report binds the exact files it compared: the incumbent must be
the model serving now, the candidate the model being loaded, and the verdict must be a pass. A reload that
keeps the model (a new router config or key file only) needs no report.

The report's format is defined here, where it is read, and eval.compare writes it with these names.
"""

from __future__ import annotations

import json
from pathlib import Path

COMPARE_KIND = "intent-router-compare"
COMPARE_VERSION = 1


class PromotionError(ValueError):
    """A compare report that does not allow this reload, with the reason."""


def check_compare_report(path: str | Path, serving_id: str | None, new_id: str) -> dict:
    """The report at ``path`` if it is a passed compare of ``serving_id`` (incumbent) against ``new_id``
    (candidate); otherwise PromotionError says which part fails."""
    where = f"compare report {path}"
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PromotionError(f"{where}: no such file") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise PromotionError(f"{where}: not a compare report ({e})") from None
    if not isinstance(report, dict) or report.get("kind") != COMPARE_KIND:
        raise PromotionError(f"{where}: not a compare report (kind {COMPARE_KIND!r} expected)")
    if report.get("schema_version") != COMPARE_VERSION:
        raise PromotionError(
            f"{where}: schema_version {report.get('schema_version')!r}, expected {COMPARE_VERSION}"
        )
    candidate = (report.get("candidate") or {}).get("model_id")
    incumbent = (report.get("incumbent") or {}).get("model_id")
    if candidate != new_id:
        raise PromotionError(f"{where} compared candidate {candidate}, not the model being loaded, {new_id}")
    if serving_id is not None and incumbent != serving_id:
        raise PromotionError(f"{where} compared incumbent {incumbent}, not the model serving, {serving_id}")
    if report.get("passed") is not True:
        failed = [c.get("name") for c in report.get("checks", []) if not c.get("passed")]
        raise PromotionError(f"{where}: the candidate failed the gate ({', '.join(map(str, failed)) or '?'})")
    return report
