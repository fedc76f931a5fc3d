"""Cheap checks that keep low-signal input away from the classifier's verdict and the verifier.

Low signal: empty or whitespace, no letter or digit at all (punctuation, emoji, symbols), or every
word random characters (keyboard mashing such as "asdfgh", "jjjjj", "xqzvbn"). Identifiers with
digits or separators (k8s, INC0012345, src/app.py) and ordinary short words ("ok", "hi") are not
low signal: they go to the classifier, whose low confidence sends them on to verifier or fallback.
"""

from __future__ import annotations

import re

_VOWELS = set("aeiouy")
_KEYBOARD_ROWS = ("qwertyuiop", "asdfghjkl", "zxcvbnm", "1234567890")
_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)


def _keyboard_run(word: str) -> bool:
    """True when the word is a run along one keyboard row (asdf, lkjh, qwerty, ...)."""
    for row in _KEYBOARD_ROWS:
        for seq in (row, row[::-1]):
            if len(word) >= 4 and word in seq:
                return True
    return False


def _gibberish_word(word: str) -> bool:
    w = word.lower()
    if len(w) < 4 or not w.isascii():
        return False
    if re.search(r"(.)\1{3,}", w):  # jjjjj, aaaa
        return True
    if _keyboard_run(w):
        return True
    letters = [c for c in w if c.isalpha()]
    vowels = sum(c in _VOWELS for c in letters)
    if len(letters) >= 5 and vowels == 0:
        return True
    return len(letters) >= 8 and vowels / len(letters) < 0.1


def low_signal_reason(text: str) -> str | None:
    """Why ``text`` is low signal ('empty', 'no_alphanumerics', 'random_characters'), or None."""
    stripped = text.strip()
    if not stripped:
        return "empty"
    if not any(ch.isalnum() for ch in stripped):
        return "no_alphanumerics"
    tokens = stripped.split()
    if len(tokens) > 4:
        return None  # a real sentence: let the classifier judge
    words = [t.strip(".,!?;:'\"()[]") for t in tokens]
    if not all(_WORD.fullmatch(w) for w in words):
        return None  # identifiers or numbers: let the classifier judge
    gibberish = [_gibberish_word(w) for w in words]
    # a short word without a vowel ("sdf" in "dfgdfg sdf", but also "pdf", "crm") says nothing either way
    if any(gibberish) and all(g or _short_without_vowel(w) for g, w in zip(gibberish, words, strict=True)):
        return "random_characters"
    return None


def _short_without_vowel(word: str) -> bool:
    return len(word) < 4 and not any(c in _VOWELS for c in word.lower())


_SURROGATE = re.compile("[\ud800-\udfff]")


def repair_text(text: str) -> tuple[str, int]:
    """Lone UTF-16 surrogates (a JSON client can send "\\ud800") -> U+FFFD; a valid surrogate pair is
    joined into its character. Returns the text and how many code points were replaced or joined."""
    n = len(_SURROGATE.findall(text))
    if not n:
        return text, 0
    fixed = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return fixed, n
