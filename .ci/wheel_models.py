"""Fail when the wheel lacks a file that a shipped model's manifest lists, or carries it altered.

Usage: python .ci/wheel_models.py WHEEL MODELS_DIR

Read independently of the rule that builds the list (router/model_files.py): every file entry anywhere in
each manifest (an object with "path" and "sha256") counts, except build inputs (under "training") and the
graphs of variants other than the default, which a runtime install does not carry. A new kind of model
file that the build's rule forgets fails here.
"""

import hashlib
import json
import sys
import zipfile
from pathlib import Path

PREFIX = "share/intent-router/models"


def listed(node, where=""):
    """(where in the manifest, path) of every file entry under ``node``."""
    if isinstance(node, dict):
        if isinstance(node.get("path"), str) and isinstance(node.get("sha256"), str):
            yield where, node["path"], node["sha256"]
        for key, value in node.items():
            yield from listed(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from listed(value, f"{where}[{i}]")


def required(manifest: dict):
    default = (manifest.get("export") or {}).get("default_variant", "int8")
    for where, path, digest in listed(manifest):
        if where.startswith(".training."):
            continue
        if where.startswith(".export.variants.") and not where.startswith(f".export.variants.{default}."):
            continue
        yield where, path, digest


def main(wheel: Path, models: Path) -> int:
    with zipfile.ZipFile(wheel) as z:
        names = {n.split(".data/data/", 1)[1]: n for n in z.namelist() if ".data/data/" in n}
        errors, checked = [], 0
        manifests = sorted(models.glob("*/manifest.json"))
        for manifest_path in manifests:
            name = manifest_path.parent.name
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
            wanted = [("manifest", "manifest.json", None), *required(manifest)]
            for where, path, digest in wanted:
                member = names.get(f"{PREFIX}/{name}/{path}")
                if member is None:
                    errors.append(f"{name}: {path} (manifest {where}) is not in the wheel")
                elif digest and hashlib.sha256(z.read(member)).hexdigest() != digest:
                    errors.append(f"{name}: {path} in the wheel does not match the manifest's sha256")
                checked += 1
    for e in errors:
        print(f"error: {e}", file=sys.stderr)
    if not manifests:
        print(f"error: no manifest under {models}", file=sys.stderr)
        return 1
    print(
        f"{wheel.name}: {checked} model files of {len(manifests)} models checked, {len(errors)} missing or altered"
    )
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
