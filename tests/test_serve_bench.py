"""The load generator of `intent-router bench serve` (eval/bench/serve_load.py) against a real server: every
answer is counted by status, a failed connection by its exception's type, and a keep-alive connection the
server closed while idle is not reused."""

from __future__ import annotations

import asyncio

import pytest

from eval.bench.serve_load import Conn, _body, open_loop
from tests.test_serve import Server, free_port

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")


def test_a_connection_that_fails_is_counted_by_its_exception_type():
    async def run():
        return await Conn(free_port()).request(_body("hi"), headers={})

    status, body = asyncio.run(run())
    assert status == "ConnectionRefusedError" and body == b""


@pytest.mark.slow
def test_statuses_are_counted_and_idle_connections_the_server_closed_are_not_reused(tmp_path):
    s = Server("--keep-alive-timeout", "1", tmp=tmp_path)  # the server closes idle connections after 1 s
    try:

        async def run():
            c = Conn(s.port)
            first = await c.request(_body("where is the travel policy"), headers={})
            await asyncio.sleep(2)
            closed_by_server = c.r.at_eof()
            second = await c.request(_body("where is the travel policy"), headers={})
            c.close()
            return first[0], closed_by_server, second[0]

        first, closed_by_server, second = asyncio.run(run())
        assert (first, closed_by_server, second) == (200, True, 200)
        r = asyncio.run(
            open_loop(s.port, ["where is the travel policy", "restart the indexing service"], 20, 1)
        )
        assert r["statuses"] == {"200": 20} and r["errors"] == 0 and r["sent"] == 20
    finally:
        s.stop()


@pytest.mark.slow
def test_a_reload_during_the_open_loop_is_answered_and_no_request_fails(tmp_path):
    from eval.bench.serve_load import KEY
    from router.serve.auth import hash_key
    from tests.conftest import FAST
    from tests.test_serve_ops import model_id

    keys = tmp_path / "keys.yaml"
    keys.write_text(f"keys:\n  - {{id: bench, sha256: {hash_key(KEY)}, roles: [viewer], admin: true}}\n")
    s = Server("--key-file", str(keys), tmp=tmp_path)
    try:
        msgs = ["where is the travel policy", "restart the indexing service"]
        r = asyncio.run(open_loop(s.port, msgs, 20, 2, reloads=[str(FAST)]))
        assert r["statuses"] == {"200": 40}
        (answer,) = r["reloads"]
        assert answer["status"] == 200 and answer["model_id"] == model_id(FAST)
    finally:
        s.stop()
