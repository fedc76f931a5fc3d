"""The LLM verifier's client against a real OpenAI-compatible server on 127.0.0.1: answers, invalid
output and the strict retry, transport failures, response_format dialects."""

import time

import pytest

from router.verifier import (
    Verifier,
    VerifierError,
    VerifierUnavailable,
    extract_json_object,
)
from tests.openai_server import VALID, OpenAIServer, Reply
from tests.verifier_support import CLS, KEY, statuses, system_prompt, user_prompt


# ---------------------------------------------------------------------------------- accepted
def test_accepted_and_request_shape(openai_server, make_verifier):
    v = make_verifier(openai_server, max_tokens=48)
    assert isinstance(v, Verifier)
    openai_server.push('{"intent": "PLANNING", "reason_code": "fresh_request"}')
    res = v.verify("roadmap for the search team", CLS)
    assert (res.intent, res.reason_code, res.breaker) == ("PLANNING", "fresh_request", "closed")
    assert statuses(res.attempts) == ["accepted"]
    a = res.attempts[0]
    assert a["dialect"] == "json_schema" and a["http_status"] == 200 and a["finish_reason"] == "stop"
    assert a["raw"] == '{"intent": "PLANNING", "reason_code": "fresh_request"}' and not a["strict"]

    (req,) = openai_server.chat_requests()
    assert req.path == "/v1/chat/completions"
    assert req.headers["authorization"] == f"Bearer {KEY}"
    b = req.body
    assert (b["model"], b["temperature"], b["max_tokens"], b["stream"]) == ("test-model", 0, 48, False)
    assert [m["role"] for m in b["messages"]] == ["system", "user"]
    rf = b["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["strict"] is True
    schema = rf["json_schema"]["schema"]
    assert schema["properties"]["intent"]["enum"] == [
        "SEARCH",
        "REASONING",
        "PLANNING",
        "MEMORY",
        "ACTION",
        "OUT_OF_SCOPE",
    ]
    assert schema["properties"]["reason_code"]["enum"] == [
        "fresh_request",
        "same_domain_follow_up",
        "ambiguous",
        "other",
    ]
    user = user_prompt(req)
    assert '"roadmap for the search team"' in user
    assert "SEARCH: 0.410" in user and "REASONING: 0.330" in user and "PLANNING: 0.120" in user
    assert "MEMORY: 0.080" not in user  # top candidates only
    assert "Previous turn: none." in user


@pytest.mark.parametrize(
    "content",
    [
        '```json\n{"intent": "MEMORY", "reason_code": "fresh_request"}\n```',
        '```\n{"intent": "MEMORY", "reason_code": "fresh_request"}\n```',
        'Sure! The answer is {"intent": "MEMORY", "reason_code": "fresh_request"} - hope that helps.',
        '<think>maybe {"intent": "SEARCH"}? no, the user asks about our chat</think>\n{"intent": "MEMORY", "reason_code": "fresh_request"}',
        '{"reason": "x"} then {"intent": " memory ", "reason_code": "Fresh-Request"}',
    ],
)
def test_wrapped_json_is_parsed(openai_server, make_verifier, content):
    openai_server.push(content)
    res = make_verifier(openai_server).verify("what did we say about budgets", CLS)
    assert (res.intent, res.reason_code) == ("MEMORY", "fresh_request")
    assert statuses(res.attempts) == ["accepted"]


def test_extract_json_object_edge_cases():
    assert extract_json_object("no json here") is None
    assert extract_json_object("{" * 5000) is None
    assert extract_json_object('[1, 2] {"intent": "ACTION"}') == {"intent": "ACTION"}
    assert extract_json_object('<think>unfinished reasoning {"intent": "SEARCH"') is None


# ---------------------------------------------------------------------- invalid output, strict retry
def test_invalid_json_then_strict_retry_accepted(openai_server, make_verifier):
    openai_server.push(
        "I think this is a search request.", '{"intent": "SEARCH", "reason_code": "ambiguous"}'
    )
    res = make_verifier(openai_server).verify("the vpn thing", CLS)
    assert (res.intent, res.reason_code) == ("SEARCH", "ambiguous")
    assert statuses(res.attempts) == ["invalid_json", "accepted"]
    assert res.attempts[0]["raw"] == "I think this is a search request."
    assert [a["strict"] for a in res.attempts] == [False, True]
    first, second = openai_server.chat_requests()
    assert "previous answer to this request was invalid" not in user_prompt(first)
    assert user_prompt(second).startswith(user_prompt(first))
    assert "previous answer to this request was invalid: no JSON object in the output" in user_prompt(second)
    assert '"enum":["SEARCH","REASONING","PLANNING","MEMORY","ACTION","OUT_OF_SCOPE"]' in user_prompt(second)
    assert system_prompt(first) == system_prompt(second)


def test_empty_response_twice_fails(openai_server, make_verifier):
    openai_server.push(Reply(content=None), Reply(content="  \n"))
    with pytest.raises(VerifierError) as ei:
        make_verifier(openai_server).verify("hmm", CLS)
    e = ei.value
    assert e.status == "empty_response" and statuses(e.attempts) == ["empty_response", "empty_response"]
    assert not isinstance(e, VerifierUnavailable) and e.breaker == "closed"
    assert len(openai_server.chat_requests()) == 2


def test_invalid_intent_twice_fails(openai_server, make_verifier):
    openai_server.push(
        '{"intent": "ADMIN", "reason_code": "other"}', '{"intent": "NONE", "reason_code": "other"}'
    )
    with pytest.raises(VerifierError) as ei:
        make_verifier(openai_server).verify("thanks!", CLS)
    assert ei.value.status == "invalid_intent"
    assert statuses(ei.value.attempts) == ["invalid_intent", "invalid_intent"]
    assert "ADMIN" in ei.value.attempts[0]["error"]


@pytest.mark.parametrize(
    "content",
    [
        '{"intent": "SEARCH"}',  # reason_code missing
        '{"intent": "SEARCH", "reason_code": "because i said so"}',  # not in the fixed set
        '{"reason_code": "other"}',  # intent missing
    ],
)
def test_schema_violations_are_invalid_json(openai_server, make_verifier, content):
    openai_server.push(content, content)
    with pytest.raises(VerifierError) as ei:
        make_verifier(openai_server).verify("x y z", CLS)
    assert statuses(ei.value.attempts) == ["invalid_json", "invalid_json"]


def test_finish_reason_length_is_invalid_and_retried_with_more_tokens(openai_server, make_verifier):
    openai_server.push(Reply(content='{"intent": "SEA', finish_reason="length"), VALID)
    res = make_verifier(openai_server, max_tokens=16).verify("find the board deck", CLS)
    assert statuses(res.attempts) == ["invalid_json", "accepted"]
    assert res.attempts[0]["finish_reason"] == "length" and "length" in res.attempts[0]["error"]
    assert [r.body["max_tokens"] for r in openai_server.chat_requests()] == [16, 48]


def test_finish_reason_length_twice_fails_even_if_it_parses(openai_server, make_verifier):
    openai_server.push(
        Reply(content=VALID, finish_reason="length"), Reply(content=VALID, finish_reason="length")
    )
    with pytest.raises(VerifierError) as ei:
        make_verifier(openai_server).verify("find the board deck", CLS)
    assert ei.value.status == "invalid_json"


# ----------------------------------------------------------------------------- transport failures
def test_http_error_is_not_retried(openai_server, make_verifier):
    openai_server.push(Reply(status=503))
    with pytest.raises(VerifierError) as ei:
        make_verifier(openai_server).verify("find x", CLS)
    e = ei.value
    assert e.status == "http_error" and statuses(e.attempts) == ["http_error"]
    assert e.attempts[0]["http_status"] == 503 and "scripted 503" in e.attempts[0]["raw"]
    assert len(openai_server.chat_requests()) == 1


def test_non_completion_body_is_http_error(openai_server, make_verifier):
    openai_server.push(Reply(body="<html>gateway says hi</html>"))
    with pytest.raises(VerifierError) as ei:
        make_verifier(openai_server).verify("find x", CLS)
    assert ei.value.status == "http_error" and "<html>" in ei.value.attempts[0]["raw"]


def test_timeout(openai_server, make_verifier):
    openai_server.push(Reply(delay=2.0))
    v = make_verifier(openai_server, timeout=0.2)
    t0 = time.monotonic()
    with pytest.raises(VerifierError) as ei:
        v.verify("find x", CLS)
    assert time.monotonic() - t0 < 0.8
    assert ei.value.status == "timeout" and statuses(ei.value.attempts) == ["timeout"]


def test_refused_connection(closed_port, make_verifier):
    v = make_verifier(f"http://127.0.0.1:{closed_port}/v1")
    t0 = time.monotonic()
    with pytest.raises(VerifierError) as ei:
        v.verify("find x", CLS)
    assert time.monotonic() - t0 < 0.8
    e = ei.value
    assert e.status == "http_error" and statuses(e.attempts) == ["http_error"]
    assert "ConnectError" in e.attempts[0]["error"] and e.attempts[0]["http_status"] is None


def test_deadline_bounds_a_hanging_endpoint(openai_server, make_verifier):
    openai_server.default = Reply(hang=True)
    v = make_verifier(openai_server, timeout=5.0, deadline=0.4)
    t0 = time.monotonic()
    with pytest.raises(VerifierError) as ei:
        v.verify("find x", CLS)
    assert 0.35 < time.monotonic() - t0 < 0.8
    assert ei.value.status == "timeout"


def test_deadline_covers_the_strict_retry(openai_server, make_verifier):
    openai_server.push(Reply(content="not json", delay=0.3), Reply(hang=True))
    v = make_verifier(openai_server, timeout=1.0, deadline=0.6)
    t0 = time.monotonic()
    with pytest.raises(VerifierError) as ei:
        v.verify("find x", CLS)
    assert time.monotonic() - t0 < 0.95
    assert statuses(ei.value.attempts) == ["invalid_json", "timeout"] and ei.value.status == "timeout"


# --------------------------------------------------------------------- response_format dialects
def test_json_schema_rejected_falls_back_to_json_object_and_is_remembered(
    llama_cpp_server, openai_server, make_verifier
):
    v = make_verifier(llama_cpp_server, breaker_failures=1)
    res = v.verify("find x", CLS)
    assert res.intent == "SEARCH"
    assert statuses(res.attempts) == ["http_error", "accepted"]
    assert [a["dialect"] for a in res.attempts] == ["json_schema", "json_object"]
    assert res.attempts[0]["http_status"] == 500 and res.attempts[0]["dialect_rejected"]
    assert "json_object" in res.attempts[0]["raw"]
    assert v.breaker.state == "closed"  # a dialect rejection is not an endpoint failure
    first, second = llama_cpp_server.chat_requests()
    assert second.body["response_format"] == {
        "type": "json_object",
        "schema": first.body["response_format"]["json_schema"]["schema"],
    }

    res2 = v.verify("find y", CLS)  # remembered: straight to json_object
    assert [a["dialect"] for a in res2.attempts] == ["json_object"] and v.dialect == "json_object"
    assert len(llama_cpp_server.chat_requests()) == 3

    other = make_verifier(openai_server)  # another endpoint starts from json_schema
    assert [a["dialect"] for a in other.verify("find z", CLS).attempts] == ["json_schema"]


def test_both_dialects_rejected_falls_back_to_plain_json_instructions(make_verifier):
    server = OpenAIServer(reject=("json_schema", "json_object")).start()
    try:
        v = make_verifier(server)
        res = v.verify("find x", CLS)
        assert statuses(res.attempts) == ["http_error", "http_error", "accepted"]
        assert [a["dialect"] for a in res.attempts] == ["json_schema", "json_object", "plain"]
        reqs = server.chat_requests()
        assert "response_format" not in reqs[2].body
        assert (
            len({system_prompt(r) for r in reqs}) == 1
        )  # the JSON instructions live in the static system part
        assert v.dialect == "plain"
    finally:
        server.stop()


def test_http_400_not_about_response_format_is_an_error(openai_server, make_verifier):
    openai_server.push(Reply(status=400, body='{"error": {"message": "model \'nope\' not found"}}'))
    with pytest.raises(VerifierError) as ei:
        make_verifier(openai_server).verify("find x", CLS)
    assert ei.value.status == "http_error" and len(ei.value.attempts) == 1
