"""Property-based tests (hypothesis, bounded so the file runs in seconds) for issue 14.

For any text, route() and route_batch() return one Decision per message, grant only skills the role
allows (with the permissions they need) and mark granted skills that need confirmation; any config the
loader accepts fails closed for unknown roles; no loader or parser raises anything but its own errors.
"""

from __future__ import annotations

import atexit
import json
from collections import Counter

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from router import Router
from router.config import RouterConfig
from router.rbac import grant_skills
from router.strict import StrictLoadError
from router.verifier.parsing import validate_output
from tests.conftest import SHIPPED
from tests.conftest import SHIPPED_INTENTS as INTENTS

FUZZED: Counter = Counter()  # inputs tried per property, printed at exit (figures for the issue)
atexit.register(lambda: FUZZED and print("\nfuzzed inputs:", dict(FUZZED), "total", sum(FUZZED.values())))

FAST = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))

# any code point, lone surrogates included (a JSON client can send "\ud800")
ANY_CHAR = st.one_of(st.characters(), st.characters(categories=["Cs"]), st.sampled_from("\x00\u202e\ufeff"))
TEXT = st.one_of(
    st.text(ANY_CHAR, max_size=60),
    st.sampled_from(
        ["restart the indexing service", "find the travel policy", "a\ud800b", "\ud800", "", "   "]
    ),
    st.text(ANY_CHAR, min_size=1, max_size=3).map(lambda s: s * 4000),  # over max_chars
)
MESSAGE = st.one_of(TEXT, TEXT, TEXT, st.none(), st.integers(), st.binary(max_size=8))
ROLES = st.sampled_from(["admin", "analyst", "viewer", "operator", "nobody", "", "ADMIN", "viewer "])


@pytest.fixture(scope="module")
def router():
    return Router.load(SHIPPED)


def _check(d, role: str, config: RouterConfig) -> None:
    role_cfg = config.roles.get(role)
    granted = d.skills.all
    if role_cfg is None:
        assert granted == [], f"unknown role {role!r} was granted {granted}"
    for skill in granted:
        assert skill in config.skills
        assert role_cfg.allows_skill(skill)
        assert role_cfg.missing_permissions(config.skills[skill].permissions) == []
    needs_confirmation = any(config.skills[s].requires_confirmation for s in granted)
    assert d.requires_confirmation == needs_confirmation
    if d.intent is not None and d.intent == "ACTION" and "action" in granted:
        assert d.requires_confirmation
    if d.reason_code.value == "invalid_input":
        assert not d.servable and granted == [] and d.intent is None
    else:
        assert d.servable == (not any(x.required for x in d.denied))


@FAST
@given(texts=st.lists(MESSAGE, max_size=6), role=ROLES)
def test_route_batch_one_decision_per_message(router, texts, role):
    FUZZED["route_batch messages"] += len(texts)
    ds = router.route_batch(texts, role=role)
    assert len(ds) == len(texts)
    for d in ds:
        _check(d, role, router.config)


@FAST
@given(text=MESSAGE, role=ROLES)
def test_route_any_text(router, text, role):
    FUZZED["route messages"] += 1
    d = router.route(text, role=role)
    _check(d, role, router.config)
    if not isinstance(text, str):
        assert d.reason_code.value == "invalid_input"


NAME = st.sampled_from(["retrieval", "action", "planner", "memory", "synthesis", "x", "*"])
PERM = st.sampled_from(["read", "write", "execute_tools", "*", "admin"])
SKILL = st.fixed_dictionaries(
    {"permissions": st.lists(PERM, max_size=3)},
    optional={"requires_confirmation": st.one_of(st.booleans(), st.sampled_from(["no", "yes", 0, 1]))},
)
ROLE = st.fixed_dictionaries(
    {"skills": st.lists(NAME, max_size=4), "permissions": st.lists(PERM, max_size=3)}
)
CONFIG = st.fixed_dictionaries(
    {
        "threshold": st.one_of(st.floats(0.01, 1.0), st.sampled_from([0, 2, "0.5"])),
        "intents": st.fixed_dictionaries(
            {
                i: st.fixed_dictionaries(
                    {
                        "required": st.lists(NAME, max_size=2),
                        "optional": st.lists(NAME, max_size=2),
                        "context_budget": st.integers(0, 4000),
                    }
                )
                for i in INTENTS
            }
        ),
        "skills": st.dictionaries(NAME, SKILL, max_size=5),
        "roles": st.dictionaries(st.sampled_from(["admin", "viewer", "analyst", "ops"]), ROLE, max_size=3),
    }
)


@FAST
@given(data=CONFIG, unknown=st.sampled_from(["nobody", "Admin", "", "viewer2"]))
def test_any_accepted_config_fails_closed(data, unknown):
    FUZZED["configs"] += 1
    try:
        config = RouterConfig.loads(yaml.safe_dump(data), "fuzz.yaml")
    except StrictLoadError:
        return
    assume_unknown = unknown not in config.roles
    for intent in INTENTS:
        spec = config.intents[intent]
        if assume_unknown:
            g = grant_skills(config, unknown, spec.required, spec.optional)
            assert g.skills.all == [] and not g.requires_confirmation
            assert len(g.denied) == len(set(spec.required + spec.optional))
        for role, role_cfg in config.roles.items():
            g = grant_skills(config, role, spec.required, spec.optional)
            for s in g.skills.all:
                assert role_cfg.allows_skill(s) and not role_cfg.missing_permissions(
                    config.skills[s].permissions
                )
            assert g.requires_confirmation == any(
                config.skills[s].requires_confirmation for s in g.skills.all
            )


@FAST
@given(text=st.text(ANY_CHAR, max_size=200))
def test_config_loader_raises_only_its_own_error(text):
    FUZZED["config texts"] += 1
    try:
        RouterConfig.loads(text, "fuzz.yaml")
    except StrictLoadError as e:
        assert str(e).startswith(("fuzz.yaml", "invalid router config"))


@FAST
@given(
    text=st.one_of(
        st.text(ANY_CHAR, max_size=200),
        st.just('{"intent": "SEARCH", "reason_code": 1}'),
        st.builds(
            '{{"intent": "ACTION", "reason_code": "other", "secondary_intent": {}}}'.format,
            st.text(ANY_CHAR, max_size=20).map(json.dumps),
        ),
    )
)
def test_verifier_output_parser_never_raises(text):
    FUZZED["verifier outputs"] += 1
    v = validate_output(text, INTENTS)
    status, intent = v.status, v.intent
    assert intent is None or intent in (*INTENTS, "OUT_OF_SCOPE")
    assert v.secondary is None or (v.secondary in INTENTS and v.secondary not in (intent, "OUT_OF_SCOPE"))
    assert status in ("accepted", "invalid_json", "invalid_intent")
