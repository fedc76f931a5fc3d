"""Compound requests through the LLM verifier, against a real OpenAI-compatible server on 127.0.0.1:
the schema's nullable secondary_intent, a two-intent answer, and tolerant parsing of the second intent."""

import json

import pytest

from router.config import RouterConfig
from router.verifier import VerifierResult, validate_output
from router.verifier.prompt import build_system_prompt, load_intent_definitions, output_schema
from tests.conftest import SHIPPED_INTENTS
from tests.verifier_support import CLS, statuses, system_prompt, user_prompt

FIVE = ["SEARCH", "REASONING", "PLANNING", "MEMORY", "ACTION"]


def answer(intent, secondary, code="fresh_request"):
    return json.dumps({"intent": intent, "secondary_intent": secondary, "reason_code": code})


def test_two_intent_answer_gives_secondary(openai_server, make_verifier):
    openai_server.push(answer("ACTION", "SEARCH"))
    res = make_verifier(openai_server).verify("find the Q3 board deck and email it to Maria", CLS)
    assert (res.intent, res.secondary, res.reason_code) == ("ACTION", "SEARCH", "fresh_request")
    assert statuses(res.attempts) == ["accepted"] and "secondary_dropped" not in res.attempts[0]


def test_request_carries_the_strict_nullable_schema(openai_server, make_verifier):
    openai_server.push(answer("SEARCH", None))
    res = make_verifier(openai_server).verify("where is the release checklist", CLS)
    assert (res.intent, res.secondary) == ("SEARCH", None)
    (req,) = openai_server.chat_requests()
    rf = req.body["response_format"]
    assert rf["type"] == "json_schema" and rf["json_schema"]["strict"] is True
    schema = rf["json_schema"]["schema"]
    # strict mode: every property required, nothing else allowed
    assert (
        set(schema["required"]) == set(schema["properties"]) == {"intent", "secondary_intent", "reason_code"}
    )
    assert schema["additionalProperties"] is False
    # nullable as anyOf [enum string, null]: a type list would lose the enum in llama-cpp-python's grammar
    sec = schema["properties"]["secondary_intent"]
    assert sec == {"anyOf": [{"type": "string", "enum": FIVE}, {"type": "null"}]}
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(schema)
    check = jsonschema.Draft202012Validator(schema)
    for ok in (answer("ACTION", "SEARCH"), answer("SEARCH", None), answer("OUT_OF_SCOPE", None, "other")):
        assert check.is_valid(json.loads(ok)), ok
    for bad in (
        answer("ACTION", "OUT_OF_SCOPE"),
        answer("ACTION", "none"),
        answer("ACTION", "SEARCH")[:-1] + ', "x": 1}',
    ):
        assert not check.is_valid(json.loads(bad)), bad
    assert not check.is_valid({"intent": "ACTION", "reason_code": "other"})  # strict: the field is required
    # the plain-JSON instructions and the strict retry carry the same schema
    assert json.dumps(output_schema(SHIPPED_INTENTS), separators=(",", ":")) in system_prompt(req)
    assert "secondary_intent" not in user_prompt(req)


def test_json_object_dialect_sends_the_same_schema(llama_cpp_server, make_verifier):
    llama_cpp_server.push(answer("REASONING", "SEARCH"))
    res = make_verifier(llama_cpp_server).verify("pull the contracts and compare their clauses", CLS)
    assert (res.intent, res.secondary) == ("REASONING", "SEARCH")
    _, second = llama_cpp_server.chat_requests()
    assert second.body["response_format"] == {"type": "json_object", "schema": output_schema(SHIPPED_INTENTS)}


@pytest.mark.parametrize(
    "content",
    [
        '{"intent": "ACTION", "reason_code": "fresh_request"}',  # field missing
        answer("ACTION", None),
        answer("ACTION", ""),
        answer("ACTION", "none"),
        answer("ACTION", " None "),
        answer("ACTION", "action"),  # the same as intent
        answer("action", " ACTION\n"),
    ],
)
def test_no_second_intent(openai_server, make_verifier, content):
    openai_server.push(content)
    res = make_verifier(openai_server).verify("reset Sven's vpn token", CLS)
    assert (res.intent, res.secondary) == ("ACTION", None)
    assert statuses(res.attempts) == ["accepted"] and "secondary_dropped" not in res.attempts[0]
    assert len(openai_server.chat_requests()) == 1  # no strict retry


@pytest.mark.parametrize("value", [" search ", "Search", "SEARCH\t"])
def test_secondary_is_normalised_like_intent(openai_server, make_verifier, value):
    openai_server.push(answer(" action ", value, "Fresh-Request"))
    res = make_verifier(openai_server).verify("find the deck and email it", CLS)
    assert (res.intent, res.secondary, res.reason_code) == ("ACTION", "SEARCH", "fresh_request")


@pytest.mark.parametrize(
    "value, why",
    [
        ("OUT_OF_SCOPE", "not one of SEARCH, REASONING, PLANNING, MEMORY, ACTION"),
        ("ADMIN", "not one of"),
        (["SEARCH"], "not one of"),
        (3, "not one of"),
    ],
)
def test_invalid_secondary_is_dropped_not_a_failure(openai_server, make_verifier, value, why):
    openai_server.push(answer("ACTION", value))
    res = make_verifier(openai_server).verify("find the deck and email it", CLS)
    assert (res.intent, res.secondary, res.reason_code) == ("ACTION", None, "fresh_request")
    assert statuses(res.attempts) == ["accepted"]
    assert why in res.attempts[0]["secondary_dropped"] and "error" not in res.attempts[0]
    assert len(openai_server.chat_requests()) == 1  # no strict retry for a dropped secondary


def test_secondary_dropped_for_out_of_scope(openai_server, make_verifier):
    openai_server.push(answer("OUT_OF_SCOPE", "SEARCH", "other"))
    res = make_verifier(openai_server).verify("thanks, you're great", CLS)
    assert (res.intent, res.secondary) == ("OUT_OF_SCOPE", None)
    assert "the intent is OUT_OF_SCOPE" in res.attempts[0]["secondary_dropped"]


def test_secondary_survives_the_strict_retry(openai_server, make_verifier):
    openai_server.push("ACTION and SEARCH I think", answer("PLANNING", "MEMORY"))
    res = make_verifier(openai_server).verify("what did I say about the offsite? plan it", CLS)
    assert statuses(res.attempts) == ["invalid_json", "accepted"]
    assert (res.intent, res.secondary) == ("PLANNING", "MEMORY")
    assert '"secondary_intent"' in user_prompt(openai_server.chat_requests()[1])  # the schema is repeated


def test_validate_output_verdict():
    v = validate_output(answer("REASONING", "search"), SHIPPED_INTENTS)
    assert (v.status, v.intent, v.reason_code, v.error, v.secondary, v.dropped) == (
        "accepted",
        "REASONING",
        "fresh_request",
        None,
        "SEARCH",
        None,
    )
    bad = validate_output(
        '{"intent": "REASONING", "secondary_intent": "SEARCH"}', SHIPPED_INTENTS
    )  # reason_code missing
    assert bad.status == "invalid_json" and bad.secondary is None


def test_verifier_result_keeps_its_invariant():
    assert VerifierResult("ACTION", secondary="SEARCH").secondary == "SEARCH"
    assert VerifierResult("ACTION").secondary is None
    for intent, secondary in [("ACTION", "ACTION"), ("ACTION", "OUT_OF_SCOPE"), ("OUT_OF_SCOPE", "SEARCH")]:
        assert VerifierResult(intent, secondary=secondary).secondary is None


def test_system_prompt_explains_the_second_intent():
    sp = build_system_prompt(RouterConfig.load(), load_intent_definitions())
    assert "# Two requests in one message" in sp
    for phrase in (
        "end goal",
        "prerequisite",
        "asked first",
        "only identifies the object",
        "Two verbs of one intent",
    ):
        assert phrase in sp
    assert '"secondary_intent": <null or one of "SEARCH|REASONING|PLANNING|MEMORY|ACTION">' in sp


def test_custom_intents_file_without_compound_rules():
    doc = load_intent_definitions()
    doc.pop("compound")
    assert "# Two requests" not in build_system_prompt(RouterConfig.load(), doc)
