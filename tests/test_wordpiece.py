"""router.wordpiece: the ASCII fast path must give the tokenizer's own ids, offsets and truncation, or decline."""

import json
import random
import string

import numpy as np
import pytest
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from router import wordpiece
from router.classifier import Classifier
from router.wordpiece import PUNCTUATION, AsciiWordPiece
from tests.conftest import FAST, ROOT

TOKENIZER = FAST / "tokenizer.json"


def _tokenizer(max_length: int | None = 128) -> Tokenizer:
    tok = Tokenizer.from_file(str(TOKENIZER))
    tok.no_padding()
    if max_length is None:
        tok.no_truncation()
    else:
        tok.enable_truncation(max_length=max_length)
    return tok


def _check(fast: AsciiWordPiece, tok: Tokenizer, text: str) -> bool:
    """True when the fast path took ``text``; fails when it took it and differs from the tokenizer."""
    mine = fast.encode(text)
    if mine is None:
        return False
    theirs = tok.encode(text)
    assert mine.ids == theirs.ids, text
    assert mine.offsets == theirs.offsets, text
    assert len(mine) == len(theirs), text
    assert mine.overflowing == bool(theirs.overflowing), text
    return True


def _takeable(text: str) -> bool:
    """ASCII and the typographic punctuation, no control character, no special token spelled out."""
    if not all(ch.isascii() or ch in PUNCTUATION for ch in text):
        return False
    if any((ord(ch) < 32 and ch not in "\t\n\r") or ch == "\x7f" for ch in text):
        return False
    return not any(s in text.upper() for s in ("[CLS]", "[SEP]", "[MASK]", "[UNK]", "[PAD]"))


def _corpus() -> list[str]:
    texts = []
    for path in sorted((ROOT / "data").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                texts.append(json.loads(line)["text"])
    return texts


def test_the_fast_path_tokenizes_every_corpus_message_it_takes_as_the_tokenizer_does():
    tok = _tokenizer()
    fast = AsciiWordPiece.for_tokenizer(tok)
    assert fast is not None
    texts = _corpus()
    assert len(texts) > 5000
    taken = sum(_check(fast, tok, t) for t in texts)
    # it takes every message of ASCII and typographic punctuation (none holds a control character or a
    # special token), and no other
    assert taken == sum(_takeable(t) for t in texts)
    assert sum(not t.isascii() for t in texts if _takeable(t)) > 100  # the dashes and quotes are taken
    assert taken > 0.95 * len(texts)


def _random_text(rng: random.Random, vocab: list[str]) -> str:
    pieces = [
        lambda: rng.choice(vocab).replace("##", ""),
        lambda: rng.choice(vocab).upper(),
        lambda: "".join(rng.choices(string.ascii_letters + string.digits, k=rng.randint(1, 14))),
        lambda: rng.choice(string.punctuation) * rng.randint(1, 3),
        lambda: rng.choice([" ", "  ", "\t", "\n", "\r\n", " \t "]),
        lambda: "x" * rng.choice([99, 100, 101, 150]),  # around WordPiece's longest word
        lambda: rng.choice(["[CLS]", "[SEP]", "[MASK]", "[UNK]", "[PAD]", "[mask]", "[ CLS ]"]),
        lambda: rng.choice(["\x00", "\x07", "\x0b", "\x0c", "\x1f", "\x7f"]),  # control characters
        lambda: rng.choice(["é", "ü", "中", "🙂", "\u00a0", "ﬁ", "€", "→"]),  # other non-ASCII
        lambda: "it's",
        lambda: rng.choice(PUNCTUATION),  # typographic dashes and quotes, taken
    ]
    weights = [30, 6, 12, 10, 25, 1, 1, 1, 1, 3, 3]
    if rng.random() < 0.5:  # half of the texts only of what the fast path takes
        weights[6:9] = [0, 0, 0]
    n = rng.choice([1, 3, 8, 20, 60, 250])  # the longest run past the 128-token truncation
    return "".join(rng.choices(pieces, weights)[0]() for _ in range(n))


@pytest.mark.parametrize("max_length", [128, 16, None])
def test_on_random_strings_the_fast_path_matches_the_tokenizer_or_declines(max_length):
    tok = _tokenizer(max_length)
    fast = AsciiWordPiece.for_tokenizer(tok)
    assert fast is not None
    vocab = sorted(w for w in tok.get_vocab() if w.isascii())  # the non-ASCII piece brings the rest
    rng = random.Random(12)
    declined = {"non-ascii": 0, "control": 0, "special": 0}
    truncated = 0
    for _ in range(2000):
        text = _random_text(rng, vocab)
        took = _check(fast, tok, text)
        if not all(ch.isascii() or ch in PUNCTUATION for ch in text):
            declined["non-ascii"] += 1
        elif any((ord(ch) < 32 and ch not in "\t\n\r") or ch == "\x7f" for ch in text):
            declined["control"] += 1
        elif not _takeable(text):
            declined["special"] += 1
        # it declines exactly the text it cannot take, and takes the rest
        assert took == _takeable(text), repr(text)
        truncated += took and bool(tok.encode(text).overflowing)
    assert min(declined.values()) > 20  # each kind of declined text was tried
    if max_length is not None:
        assert truncated > 50  # and long texts were cut


def _bert(lowercase: bool = True, normalizer=None, post=None) -> Tokenizer:
    vocab = _tokenizer().get_vocab()
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizer or normalizers.BertNormalizer(lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = post or processors.BertProcessing(
        ("[SEP]", vocab["[SEP]"]), ("[CLS]", vocab["[CLS]"])
    )
    tok.decoder = decoders.WordPiece()
    tok.enable_truncation(max_length=64)
    return tok


def test_a_cased_pipeline_keeps_its_case_and_other_pipelines_get_no_fast_path():
    cased = _bert(lowercase=False)
    fast = AsciiWordPiece.for_tokenizer(cased)
    assert fast is not None and not fast.lowercase
    for text in ["Email Dana the Q3 deck", "NASA's JWST: what's new?", "plan A vs. plan B"]:
        assert _check(fast, cased, text)
    assert fast.encode("Dana").ids != AsciiWordPiece.for_tokenizer(_bert()).encode("Dana").ids

    nfd = normalizers.Sequence([normalizers.NFD(), normalizers.Lowercase()])
    assert AsciiWordPiece.for_tokenizer(_bert(normalizer=nfd)) is None
    three = processors.TemplateProcessing(
        single="[CLS] [CLS] $A [SEP]", special_tokens=[("[CLS]", 101), ("[SEP]", 102)]
    )
    assert AsciiWordPiece.for_tokenizer(_bert(post=three)) is None
    bpe = Tokenizer(models.BPE())
    assert AsciiWordPiece.for_tokenizer(bpe) is None
    padded = _bert()
    padded.enable_padding()
    assert AsciiWordPiece.for_tokenizer(padded) is None


def test_the_word_cache_stays_bounded_and_answers_the_same_when_full(monkeypatch):
    monkeypatch.setattr(wordpiece, "MAX_CACHED_WORDS", 50)
    tok = _tokenizer()
    fast = AsciiWordPiece.for_tokenizer(tok)
    rng = random.Random(3)
    for _ in range(300):
        text = " ".join("".join(rng.choices(string.ascii_lowercase, k=7)) for _ in range(5))
        assert _check(fast, tok, text)
    assert len(fast._cache) == 50


def test_the_classifier_reads_the_same_with_and_without_the_fast_path():
    texts = [json.loads(line)["text"] for line in (ROOT / "data" / "test.jsonl").open(encoding="utf-8")]
    texts += [
        "schedule\ta sync w/ Dana!!",
        "café at 9?",
        "it\u2019s done \u2014 email Dana",
        "[CLS] find the deck",
        " ".join(["plan it"] * 100),
    ]
    on, off = Classifier(FAST), Classifier(FAST, fast_tokenizer=False)
    assert on.wordpiece is not None and off.wordpiece is None
    for batch in (texts, texts[:5], texts[-4:]):
        a, b = on.classify_batch(batch), off.classify_batch(batch)
        for x, y in zip(a, b, strict=True):
            assert (x.label, x.intents, x.num_tokens, x.truncated) == (
                y.label,
                y.intents,
                y.num_tokens,
                y.truncated,
            )
            assert np.allclose([p for _, p in x.ranking], [p for _, p in y.ranking], atol=1e-6)
            assert x.clauses == y.clauses
    assert on.classify(texts[-1]).truncated
