"""The router config's verifier and request limits: read at load, read again at every reload, and
overridden by serve's flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT, SHIPPED

pytest.importorskip("fastapi")

PACKAGED = (ROOT / "router" / "config" / "default.yaml").read_text(encoding="utf-8")


def write_config(path: Path, extra: str = "") -> Path:
    path.write_text(PACKAGED + "\n" + extra, encoding="utf-8")
    return path


def test_the_config_sections_are_checked():
    from router.config import RouterConfig

    with pytest.raises(ValueError, match="max_messages"):
        RouterConfig.model_validate({**RouterConfig.load(None).model_dump(), "limits": {"max_messages": 0}})
    with pytest.raises(ValueError, match="timeout"):
        RouterConfig.model_validate(
            {**RouterConfig.load(None).model_dump(), "verifier": {"url": "http://x/v1", "timeout": -1.0}}
        )


def test_limits_and_verifier_reload_with_the_config_and_flags_win(tmp_path):
    from fastapi.testclient import TestClient

    from router.serve.app import create_app
    from router.serve.settings import ServeSettings

    config = write_config(
        tmp_path / "router.yaml",
        "limits: {max_messages: 2, max_message_chars: 40}\n"
        "verifier: {url: 'http://127.0.0.1:9/v1', model: judge, timeout: 0.5}\n",
    )
    settings = ServeSettings(model_dir=SHIPPED, config=config, load_before_serving=True)
    app = create_app(settings)
    state = app.state.router_state
    three = {"role": "admin", "messages": ["find the travel policy", "plan the offsite", "hi"]}
    with TestClient(app, client=("127.0.0.1", 50000)) as client:
        r = client.post("/v1/route", json=three)
        assert r.status_code == 422 and r.json()["error"]["limit"] == 2
        r = client.post("/v1/route", json={"role": "admin", "message": "x" * 41})
        assert r.status_code == 422 and r.json()["error"]["code"] == "message_too_long"
        verifier = state.router.verifier
        assert (
            verifier is not None and verifier.settings.model == "judge" and verifier.settings.timeout == 0.5
        )
        threads = state.engine.pool._max_workers
        assert threads == settings.verifier_threads

        write_config(config, "limits: {max_messages: 4}\n")  # no verifier, another limit
        state.reload()
        assert client.post("/v1/route", json=three).status_code == 200
        assert state.router.verifier is None and state.limit("max_chars") == 10_000
        assert state.engine.pool._max_workers == settings.inference_threads  # no verifier calls to wait on

    flagged = ServeSettings(
        model_dir=SHIPPED,
        config=config,
        max_messages=1,
        verifier_url="http://127.0.0.1:9/v1",
        load_before_serving=True,
    )
    app = create_app(flagged)
    with TestClient(app, client=("127.0.0.1", 50000)):
        state = app.state.router_state
        assert state.limit("max_messages") == 1  # the flag, not the config's 4
        assert state.router.verifier is not None
