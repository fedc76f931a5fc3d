"""The models this project ships, and where a checkout or an install keeps them.

A source checkout reads them from its ``models/`` folder. A regular (non-editable) install carries each
shipped model's runtime files (router.model_files) under ``<prefix>/share/intent-router/models/``, so a
service that ran ``pip install intent-router`` routes at once, with either model, from any directory.
"""

from __future__ import annotations

import sys
from pathlib import Path

from router import env as envvars
from router.model_files import MANIFEST_NAME

MODEL_ENV = "INTENT_ROUTER_MODEL"
DEFAULT_MODEL = "intent-minilm"
SHIPPED_MODELS = ("intent-minilm", "intent-minilm-fast")  # the default model, then its 3-layer student
CHECKOUT_MODELS = Path(__file__).resolve().parent.parent / "models"
INSTALLED_MODELS = Path(sys.prefix) / "share" / "intent-router" / "models"


def shipped_model_dir(name: str = DEFAULT_MODEL) -> Path:
    """The folder of shipped model ``name``: this checkout's models/<name>, else the installed copy."""
    if name not in SHIPPED_MODELS:
        raise ValueError(f"{name!r} is not a shipped model (shipped: {', '.join(SHIPPED_MODELS)})")
    checkout, installed = CHECKOUT_MODELS / name, INSTALLED_MODELS / name
    if (checkout / MANIFEST_NAME).is_file() or not (installed / MANIFEST_NAME).is_file():
        return checkout
    return installed


def default_model_dir() -> Path:
    """$INTENT_ROUTER_MODEL (a folder or a shipped model's name), else the shipped default model."""
    env = envvars.get_str(MODEL_ENV)
    return resolve_model_dir(env) if env else shipped_model_dir()


def resolve_model_dir(model: str | Path) -> Path:
    """A model folder as given, or, for the bare name of a shipped model that is not a folder here, the
    shipped model's folder: ``--model intent-minilm-fast`` works in a checkout and in an install alike."""
    path = Path(model)
    if str(model) in SHIPPED_MODELS and not path.is_dir():
        return shipped_model_dir(str(model))
    return path
