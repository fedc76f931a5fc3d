"""The wheel's model files, derived from the shipped models' manifests at build time.

Everything else about the package is in pyproject.toml. Each folder under models/ that holds a manifest
is installed to <prefix>/share/intent-router/models/<name>/ with the files routing reads
(router/model_files.py, loaded by path: the build runs before the package's dependencies exist).
A file a manifest lists that the checkout lacks stops the build, naming it.
"""

import importlib.util
from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("_model_files", ROOT / "router" / "model_files.py")
model_files = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(model_files)


def shipped_model_files() -> list[tuple[str, list[str]]]:
    data_files = []
    for manifest in sorted((ROOT / "models").glob(f"*/{model_files.MANIFEST_NAME}")):
        model_dir = manifest.parent
        files = model_files.model_runtime_files(model_dir)
        missing = [f for f in files if not (model_dir / f).is_file()]
        if missing:
            raise SystemExit(
                f"models/{model_dir.name}: the manifest lists {', '.join(missing)}, not in the checkout"
            )
        data_files.append(
            (f"share/intent-router/models/{model_dir.name}", [f"models/{model_dir.name}/{f}" for f in files])
        )
    return data_files


setup(data_files=shipped_model_files())
