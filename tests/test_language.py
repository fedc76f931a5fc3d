"""A message in a language the model does not read (router.language): never out of scope on the model's
reading; the verifier's answer, else the fallback with reason unsupported_language."""

from __future__ import annotations

import pytest

from router import Router
from router.config import RouterConfig
from router.decision import ReasonCode
from router.intents import OUT_OF_SCOPE
from router.language import LanguageCheck, other_script_share
from router.verifier import VerifierResult
from tests.shipped_models import committed

ENGLISH = LanguageCheck.for_model(["en"])


@pytest.fixture(scope="module")
def router():
    return Router.load(committed("models/intent-minilm"))


def test_script_share_counts_letters_only():
    assert other_script_share("重启索引服务") == 1.0
    assert other_script_share("restart 42 services!") == 0.0
    assert other_script_share("🙏 ...") == 0.0
    assert 0.4 < other_script_share("stagingにデプロイ") < 0.5


def test_the_script_test_holds_for_two_characters_and_the_identifier_for_sentences():
    assert ENGLISH.unsupported("草")["by"] == "script"
    assert ENGLISH.unsupported("¯\\_(ツ)_/¯") is None  # one katakana letter in an emoticon
    found = ENGLISH.unsupported("reinicia el servicio de indexación por favor")
    assert found["by"] == "identifier" and found["language"] == "es" and found["score"] >= 0.8
    assert ENGLISH.unsupported("could you restart the indexing service?") is None


def test_the_script_decides_whatever_the_identifier_guesses():
    """The compressed identifier reads many short Han messages as English at about 0.2; their script
    still tells them, while an emoticon's few letters of another script do not."""
    from router.language import _identify

    for text in ("关灯", "关闭卧室空调"):
        assert _identify(text)[0] == "en"
        assert ENGLISH.unsupported(text)["by"] == "script"
    assert ENGLISH.unsupported("(づ｡◕‿‿◕｡)づ") is None


def test_short_messages_are_left_to_the_model_and_unsure_ones_get_the_lower_bar():
    assert ENGLISH.unsupported("merci beaucoup") is None  # English small talk as often as not
    assert ENGLISH.unsupported("merci beaucoup", sure=False) is None  # two words: below either bar
    text = "apaga las luces"
    assert ENGLISH.unsupported(text) is None and ENGLISH.unsupported(text, sure=False)["language"] == "es"


def test_the_identifier_is_read_when_the_router_loads_not_on_the_first_message(monkeypatch):
    """Importing and reading the identifier takes about 0.1 s: a service pays it at start-up."""
    from router import language

    monkeypatch.setattr(language, "_identifier", None)
    assert LanguageCheck.for_model(None) is None and language._identifier is None
    loaded = Router.load(committed("models/intent-minilm"))
    assert loaded.language is not None and language._identifier is not None


def test_a_model_that_reads_the_language_or_records_none_is_not_checked():
    assert LanguageCheck.for_model(["en", "zh"]).unsupported("帮我重启一下索引服务") is None
    assert (
        LanguageCheck.for_model(["en", "es"]).unsupported("reinicia el servicio de indexación por favor")
        is None
    )
    assert LanguageCheck.for_model(None) is None and LanguageCheck.for_model([]) is None


def test_another_language_is_never_out_of_scope_and_goes_to_the_fallback(router):
    assert router.language is not None and router.classifier.languages == ["en"]
    for text in ("重启索引服务", "starte bitte den Indexdienst neu", "¿me recuerdas qué te dije ayer?"):
        d = router.route(text, role="admin")
        assert d.reason_code == ReasonCode.UNSUPPORTED_LANGUAGE and d.intent is None, (text, d.reason_code)
        assert d.source == "fallback" and d.skills.required  # the shipped config's fallback skills
        assert [s.stage for s in d.trace].count("language") == 1
    english = router.route("could you restart the indexing service?", role="admin")
    assert english.reason_code == ReasonCode.CONFIDENT and "language" not in [s.stage for s in english.trace]


def test_without_fallback_intents_nothing_is_loaded_and_the_reason_stays(router):
    cfg = RouterConfig.load().model_copy(update={"fallback_intents": []})
    d = Router(router.classifier, cfg).route("重启索引服务", role="admin")
    assert (
        d.reason_code == ReasonCode.UNSUPPORTED_LANGUAGE and not d.skills.required and not d.skills.optional
    )


class _Reader:
    """A verifier that reads any language: the intent for known texts, out of scope for the rest."""

    intents = None  # takes whatever intents it is asked about

    def __init__(self, truth):
        self.truth, self.calls = truth, []

    def verify(self, text, classification, previous=None, context=None):
        self.calls.append(text)
        if text in self.truth:
            return VerifierResult(intent=self.truth[text])
        return VerifierResult(intent=OUT_OF_SCOPE)


def test_the_verifier_reads_what_the_model_cannot(router):
    reader = _Reader({"重启索引服务": "ACTION"})
    r = Router(router.classifier, router.config, verifier=reader)
    d = r.route("重启索引服务", role="admin")
    assert (d.intent, d.source, d.reason_code) == ("ACTION", "verifier", ReasonCode.VERIFIED)
    hello = r.route("你好，今天过得怎么样？", role="admin")
    assert hello.reason_code == ReasonCode.OUT_OF_SCOPE and hello.scope.signals == ["verifier"]
    assert reader.calls == ["重启索引服务", "你好，今天过得怎么样？"]


def test_the_config_can_turn_the_check_off(router):
    cfg = RouterConfig.load().model_copy(update={"language_check": False})
    r = Router(router.classifier, cfg)
    assert r.language is None
    assert r.route("重启索引服务", role="admin").reason_code != ReasonCode.UNSUPPORTED_LANGUAGE


def test_bench_languages_counts_each_outcome_per_language(tmp_path):
    import json

    from typer.testing import CliRunner

    from cli import app

    rows = [
        {"text": "重启索引服务", "label": "ACTION", "lang": "zh"},
        {"text": "starte bitte den Indexdienst neu", "label": "ACTION", "lang": "de"},
        {"text": "hola, ¿qué tal?", "label": "OUT_OF_SCOPE", "lang": "es"},
    ]
    path = tmp_path / "langs.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "bench" / "langs.json"  # its folder is made
    args = ["bench", "languages", "--path", str(path), "--model", str(committed("models/intent-minilm"))]
    res = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["requests"] == 2 and result["outcomes"]["unsupported_language"] == 2
    assert (
        result["per_language"]["zh"]["unsupported_language"] == 1 and sum(result["small_talk"].values()) == 1
    )
    assert result["right_or_unsupported"] == 1.0 and result["misses"] == []
    path.write_text('{"text": "hola"}\n', encoding="utf-8")
    bad = CliRunner().invoke(app, args)
    assert bad.exit_code == 2 and "needs string field(s) label, lang" in bad.output


def test_the_identifier_reads_a_long_message_past_its_80th_character_in_whole_words():
    """The package cuts its input at 80 characters, mid-word if need be; the check gives it whole words up
    to MAX_CHARS, so what follows a long English opening still counts."""
    from router.language import MAX_CHARS, clip

    opening = "ok so here is the thing, and sorry for the long message before i get to it: "
    request = (
        "reinicia el servicio de indexación en el clúster de producción y avísame cuando termine, por favor"
    )
    assert len(opening) < 80 < len(opening + request)
    found = ENGLISH.unsupported(opening + request)
    assert found is not None and found["language"] == "es"
    long = "word " * 200
    assert len(clip(long)) <= MAX_CHARS and clip(long).split() == ["word"] * len(clip(long).split())
    assert clip("two\nlines  here") == "two lines here"
