"""A fast path for BERT's WordPiece tokenizer on plain ASCII text (and a few typographic dashes and quotes).

HF ``tokenizers`` spends 30-50 µs on a short message, most of it building the Encoding (tokens, offsets, type
ids, masks) around the WordPiece itself. On ASCII text the same ids come from one regular expression and a
cache of words in about 7 µs. :meth:`AsciiWordPiece.for_tokenizer` takes a loaded tokenizer and returns
None unless it is exactly the pipeline re-implemented here (BertNormalizer, BertPreTokenizer, WordPiece, one
special token on either side), and :meth:`AsciiWordPiece.encode` returns None for text it does not take
(a non-ASCII character other than ``PUNCTUATION``, a control character, an added token spelled out): the
caller gives that to the tokenizer. The ids, offsets and truncation are the tokenizer's own
(tests/test_wordpiece.py checks them on the corpus and on random strings), and each instance checks itself
against its tokenizer when it is made. Threads may share an instance: the word cache is a dict, and a race
at worst cuts a word twice.
"""

from __future__ import annotations

import json
import re
from typing import Any

# BERT's pre-tokenizer splits on whitespace and cuts every punctuation character out as a token of its own;
# in ASCII, every printable character that is not a letter, a digit or a space is punctuation.
_WORDS = re.compile(r"[A-Za-z0-9]+|[^A-Za-z0-9\s]")
# Typographic punctuation that phones and word processors put in typed text (dashes, curly quotes, bullet,
# ellipsis): Unicode punctuation, which BERT cuts out as it does ASCII's, and which neither lowercasing nor
# stripping accents changes. Text holding any other non-ASCII character goes to the tokenizer.
PUNCTUATION = "\u2013\u2014\u2018\u2019\u201c\u201d\u2022\u2026"
_FOREIGN = re.compile(rf"[^\x00-\x7f{PUNCTUATION}]")
# ASCII control characters that BertNormalizer deletes (or, with clean_text off, keeps inside a word): both
# move the words, so such text goes to the tokenizer. Tab, newline and carriage return are plain whitespace.
_CONTROL = r"\x00-\x08\x0b\x0c\x0e-\x1f\x7f"
# Words kept in the cache, at most: a service sees arbitrary words, and the cache must not grow with them.
MAX_CACHED_WORDS = 50_000
# Probe texts the fast path must tokenize exactly as the tokenizer does before it is used.
_PROBES = (
    "",
    "find the Q3 deck and email it to Dana",
    "what's 15% of $2,400?? (approx.)",
    "it\u2019s \u201cdone\u201d \u2014 or is it\u2026 \u2013 \u2018no\u2019 \u2022 yes",
    "remember: my flight is AA-1234 on 12/03 @ 7:45am",
    "schedule\ta sync\nnext  Tuesday\r\nw/ the team_leads!!!",
    "supercalifragilisticexpialidocious xqzvbnmwrt " + "a" * 120,
    " ".join(["plan the offsite"] * 60),
)


class FastEncoding:
    """The parts of a ``tokenizers.Encoding`` the classifier reads: ``ids``, ``offsets``, ``overflowing``
    and ``len()``. The offsets are worked out only when read (the clause reader needs them for a few
    messages)."""

    __slots__ = ("_owner", "_text", "_words", "ids", "overflowing")

    def __init__(
        self, owner: AsciiWordPiece, text: str, words: list[str], ids: list[int], overflowing: bool
    ) -> None:
        self._owner, self._text, self._words = owner, text, words
        self.ids, self.overflowing = ids, overflowing

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def offsets(self) -> list[tuple[int, int]]:
        """(start, end) in the text for each token; (0, 0) for the special tokens, as the tokenizer gives."""
        return self._owner.offsets(self._text, self._words, len(self.ids))


class AsciiWordPiece:
    def __init__(
        self,
        vocab: dict[str, int],
        *,
        unk_id: int,
        prefix: str,
        max_word_chars: int,
        lowercase: bool,
        first_id: int,
        last_id: int,
        max_length: int | None,
        declined: list[str],
    ) -> None:
        self.vocab = vocab
        self.unk_id, self.prefix, self.max_word_chars = unk_id, prefix, max_word_chars
        self.lowercase = lowercase
        self.first_id, self.last_id = first_id, last_id
        # the tokens a message keeps between its two special tokens
        self.body = max(0, max_length - 2) if max_length is not None else None
        # one search tells whether the tokenizer must take the text: a control character, or an added token
        # ([CLS], [MASK], ...) that the tokenizer would match in the raw text before it splits words
        spelled = "".join("|" + re.escape(t) for t in sorted(declined, key=len, reverse=True))
        self._declines = re.compile(f"[{_CONTROL}]{spelled}", re.IGNORECASE)
        self._cache: dict[str, tuple[tuple[int, ...], tuple[tuple[int, int], ...]]] = {}

    @classmethod
    def for_tokenizer(cls, tokenizer: Any) -> AsciiWordPiece | None:
        """The fast path for ``tokenizer`` (a ``tokenizers.Tokenizer``, configured as it will be used), or
        None when its pipeline is not BERT's WordPiece or the fast path disagrees with it on the probe texts."""
        try:
            fast = cls._from_parts(tokenizer)
        except (AttributeError, KeyError, TypeError, ValueError):  # a pipeline part this does not know
            return None
        if fast is None:
            return None
        for text in _PROBES:
            mine, theirs = fast.encode(text), tokenizer.encode(text)
            if mine is None or not _same(mine, theirs):
                return None
        return fast

    @classmethod
    def _from_parts(cls, tokenizer: Any) -> AsciiWordPiece | None:
        norm, pre, model = tokenizer.normalizer, tokenizer.pre_tokenizer, tokenizer.model
        if type(norm).__name__ != "BertNormalizer" or type(pre).__name__ != "BertPreTokenizer":
            return None
        if type(model).__name__ != "WordPiece" or tokenizer.padding is not None:
            return None
        vocab = tokenizer.get_vocab(with_added_tokens=False)
        ends = _special_ends(json.loads(tokenizer.post_processor.__getstate__()))
        if ends is None or model.unk_token not in vocab:
            return None
        cut = tokenizer.truncation  # None, or how a long text is cut: only the end, without overlap
        if cut is not None and (cut["direction"] != "right" or cut["stride"] != 0):
            return None
        added = [t.content for t in tokenizer.get_added_tokens_decoder().values()]
        return cls(
            vocab,
            unk_id=vocab[model.unk_token],
            prefix=model.continuing_subword_prefix,
            max_word_chars=model.max_input_chars_per_word,
            lowercase=bool(norm.lowercase),
            first_id=ends[0],
            last_id=ends[1],
            max_length=cut["max_length"] if cut is not None else None,
            declined=added,
        )

    def encode(self, text: str) -> FastEncoding | None:
        """The tokenizer's encoding of ``text``, or None when the tokenizer must take it."""
        if (not text.isascii() and _FOREIGN.search(text)) or self._declines.search(text):
            return None
        ids = [self.first_id]
        extend, cache = ids.extend, self._cache
        text = text.lower() if self.lowercase else text  # the same length: ASCII and PUNCTUATION only
        words = _WORDS.findall(text)
        for word in words:
            entry = cache.get(word)
            if entry is None:
                entry = self._word(word)
            extend(entry[0])
        overflowing = self.body is not None and len(ids) - 1 > self.body
        if overflowing:
            del ids[self.body + 1 :]
        ids.append(self.last_id)
        return FastEncoding(self, text, words, ids, overflowing)

    def offsets(self, text: str, words: list[str], n: int) -> list[tuple[int, int]]:
        """The offsets of the first ``n`` tokens (``n`` counts both special tokens) of the encoding of
        ``text`` (as ``encode`` normalised it), whose ``words`` are ``_WORDS``'s matches in order. Only
        whitespace lies between two matches, so each word is the first one found after the last."""
        out = [(0, 0)]
        end = 0
        for word in words:
            start = text.find(word, end)
            end = start + len(word)
            spans = self._word(word)[1]
            if len(spans) == 1:  # most words are one token (or one unknown token) over the whole word
                out.append((start, end))
            else:
                out.extend([(start + a, start + b) for a, b in spans])
            if len(out) > n - 1:
                break
        del out[n - 1 :]
        out.append((0, 0))
        return out

    def _word(self, word: str) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]]:
        """WordPiece: the longest piece in the vocabulary first, then the longest continuation, and so on;
        a word that cannot be cut into pieces, or is too long, is one unknown token."""
        entry = self._cache.get(word)
        if entry is not None:
            return entry
        n = len(word)
        ids: list[int] = []
        spans: list[tuple[int, int]] = []
        start = 0
        while start < n and n <= self.max_word_chars:
            end, found = n, None
            while end > start:
                piece = word[start:end] if start == 0 else self.prefix + word[start:end]
                found = self.vocab.get(piece)
                if found is not None:
                    break
                end -= 1
            if found is None:
                break
            ids.append(found)
            spans.append((start, end))
            start = end
        if start < n or n > self.max_word_chars:
            ids, spans = [self.unk_id], [(0, n)]
        entry = (tuple(ids), tuple(spans))
        if len(self._cache) < MAX_CACHED_WORDS:
            self._cache[word] = entry
        return entry


def _special_ends(post: dict) -> tuple[int, int] | None:
    """The ids of the one special token before and the one after a single sequence, from a
    TemplateProcessing or BertProcessing post-processor; None for any other shape."""
    if post.get("type") == "BertProcessing":
        return int(post["cls"][1]), int(post["sep"][1])
    if post.get("type") != "TemplateProcessing":
        return None
    single = post["single"]
    if len(single) != 3 or "Sequence" not in single[1]:
        return None
    ends = []
    for part in (single[0], single[2]):
        if "SpecialToken" not in part:
            return None
        ids = post["special_tokens"][part["SpecialToken"]["id"]]["ids"]
        if len(ids) != 1:
            return None
        ends.append(int(ids[0]))
    return ends[0], ends[1]


def _same(mine: FastEncoding, theirs: Any) -> bool:
    return (
        mine.ids == theirs.ids
        and mine.offsets == theirs.offsets
        and mine.overflowing == bool(theirs.overflowing)
    )
