"""Tool search: a request's few tools out of a registry (router.tools.registry), found two ways and fused.

- *Lexical*: BM25 (k1 1.5, b 0.75) over each tool's words: its name split at ``_``, ``-``, ``.`` and case
  changes, its description, its arguments' names and descriptions, and its skill's description (the
  router config's ``purpose`` and ``use_when``, or an MCP server's summary). A tool's ``examples`` (requests
  it serves) are a second field, scored by BM25 of their own and added: written in users' words, they
  match requests that share no word with the description.
- *Dense*: the cosine similarity of the request's sentence embedding and each tool's, from the router's
  own graph (``Classifier.embed``), so a request costs no second model. A tool's embedding is that of its
  words plus the mean of its examples'. They are computed once, when the index is built, and kept in
  ``cache_dir`` under the registry's digest and the model id.
- The two rankings are fused by reciprocal rank (each tool scores ``1 / (60 + rank)`` in each), which needs
  no scale shared by the two scores.

``allowed`` limits a search to some tools (those a role may use, or an intent's skills).
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from router.tools.registry import Tool, ToolRegistry

RRF_K = 60
WORD = re.compile(r"[a-z0-9]+")
CASE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def words(text: str) -> list[str]:
    """Lower-case word tokens; ``getWeatherForecast`` and ``get_weather_forecast`` give the same."""
    return WORD.findall(CASE.sub(" ", text).lower())


def tool_text(tool: Tool, skill_text: str = "") -> str:
    """What a tool is searched by: its name, description and arguments, and its skill's description."""
    parts = [tool.name.replace("_", " ").replace("-", " ").replace(".", " "), tool.description]
    for name, prop in (tool.input_schema.get("properties") or {}).items():
        parts.append(name.replace("_", " "))
        if isinstance(prop.get("description"), str):
            parts.append(prop["description"])
    if skill_text:
        parts.append(skill_text)
    return ". ".join(parts)


class BM25:
    """Okapi BM25 over tokenised documents, kept as postings: for each word, the documents holding it and
    the word's weight in each, computed once. A query costs one weighted count over its known words'
    postings, and memory grows with the words of the documents, not with documents times vocabulary.
    ``summed`` joins fields of the same documents (a tool's words and its examples) into one index whose
    scores are the fields' sum."""

    def __init__(self, docs: Sequence[list[str]], k1: float = 1.5, b: float = 0.75) -> None:
        index: dict[str, int] = {}
        rows, cols, counts = [], [], []
        for row, d in enumerate(docs):
            for w, c in Counter(d).items():
                cols.append(index.setdefault(w, len(index)))
                rows.append(row)
                counts.append(c)
        row_ids, col_ids = np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64)
        tf = np.array(counts, dtype=np.float64)
        n = len(docs)
        lengths = np.array([len(d) for d in docs], dtype=np.float64)
        avg = float(lengths.mean()) if n else 0.0
        df = np.bincount(col_ids, minlength=len(index))
        idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
        norm = k1 * (1 - b + b * lengths / max(avg, 1e-9))
        self._keep(n, index, col_ids, row_ids, idf[col_ids] * tf * (k1 + 1) / (tf + norm[row_ids]))

    def _keep(self, n: int, index: dict[str, int], words_, docs, weights) -> None:
        order = np.lexsort((docs, words_))
        self.n, self.index = n, index
        self.docs, self.weights = docs[order], weights[order]
        self.starts = np.searchsorted(words_[order], np.arange(len(index) + 1))
        # each word's postings as views, so a query looks them up instead of slicing
        self.postings = {
            w: (
                self.docs[self.starts[i] : self.starts[i + 1]],
                self.weights[self.starts[i] : self.starts[i + 1]],
            )
            for w, i in index.items()
        }

    @classmethod
    def summed(cls, parts: Sequence[BM25]) -> BM25:
        """One index of the same documents whose scores are the sum of ``parts``' scores."""
        index: dict[str, int] = {}
        words_, docs, weights = [], [], []
        for part in parts:
            ids = np.array(
                [index.setdefault(w, len(index)) for w in part.index], dtype=np.int64
            )  # in id order
            words_.append(np.repeat(ids, np.diff(part.starts)))
            docs.append(part.docs)
            weights.append(part.weights)
        w, d, x = np.concatenate(words_), np.concatenate(docs), np.concatenate(weights)
        key = w * max(parts[0].n, 1) + d
        unique, first = np.unique(key, return_index=True)
        order = np.argsort(key, kind="stable")
        sums = np.add.reduceat(x[order], np.searchsorted(key[order], unique)) if len(key) else x
        out = cls.__new__(cls)
        out._keep(parts[0].n, index, w[first], d[first], sums)
        return out

    def scores(self, query: list[str]) -> np.ndarray:
        spans = [
            (self.starts[i], self.starts[i + 1]) for i in {self.index[w] for w in query if w in self.index}
        ]
        if not spans:
            return np.zeros(self.n)
        docs = np.concatenate([self.docs[lo:hi] for lo, hi in spans])
        weights = np.concatenate([self.weights[lo:hi] for lo, hi in spans])
        return np.bincount(docs, weights=weights, minlength=self.n)


@dataclass(frozen=True)
class Hit:
    name: str
    skill: str
    score: float  # the fused score
    lexical: float
    dense: float | None
    requires_confirmation: bool

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class ToolIndex:
    """A registry ready to search: BM25 over its tools' words and, with ``embed``, their embeddings."""

    def __init__(
        self,
        registry: ToolRegistry,
        embed: Callable[[Sequence[str]], np.ndarray] | None = None,
        cache_dir: str | Path | None = None,
        model_id: str = "",
        skill_texts: Mapping[str, str] | None = None,
    ) -> None:
        self.registry, self.tools = registry, list(registry.tools)
        skill_texts = dict(skill_texts or {})
        texts = [tool_text(t, skill_texts.get(t.skill, "")) for t in self.tools]
        self.bm25 = BM25([words(t) for t in texts])
        examples = [words(" ".join(t.examples)) for t in self.tools]
        self.lexical_index = BM25.summed([self.bm25, BM25(examples)]) if any(examples) else self.bm25
        self.embed = embed
        self.embeddings = None
        if embed is not None:
            self.embeddings = self._embeddings(texts, cache_dir, f"{model_id}-{_digest(skill_texts)}")

    def lexical(self, query: str) -> np.ndarray:
        """Every tool's BM25 score for ``query``: its words and its skill's description, plus its examples'
        when it has any."""
        return self.lexical_index.scores(words(query))

    def _embeddings(self, texts: list[str], cache_dir, model_id: str) -> np.ndarray:
        path = None
        if cache_dir is not None:
            key = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{self.registry.digest}-{model_id}")
            path = Path(cache_dir) / f"tool-embeddings-{key}.npy"
            if path.is_file():
                cached = np.load(path)
                if cached.shape[0] == len(texts):
                    return cached
        emb = self._embed_tools(texts) if texts else np.zeros((0, 1), dtype=np.float32)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            np.save(path, emb)
        return emb

    def _embed_tools(self, texts: list[str]) -> np.ndarray:
        """Each tool's words embedded, plus the mean of its examples' embeddings, normalised."""
        emb = normalised(self.embed(texts))
        examples = [e for t in self.tools for e in t.examples]
        if examples:
            ex = normalised(self.embed(examples))
            start = 0
            for i, t in enumerate(self.tools):
                if t.examples:
                    emb[i] += ex[start : start + len(t.examples)].mean(axis=0)
                    start += len(t.examples)
        return normalised(emb)

    def search(
        self, query: str, k: int = 5, allowed: Collection[str] | None = None, query_embedding=None
    ) -> list[Hit]:
        """The ``k`` best tools for ``query`` among ``allowed`` (tool names; None: all)."""
        keep = [i for i, t in enumerate(self.tools) if allowed is None or t.name in allowed]
        if not keep or k < 1:
            return []
        lexical = self.lexical(query)[keep]
        fused = rrf(lexical)
        dense = None
        if self.embeddings is not None:
            q = query_embedding if query_embedding is not None else self.embed([query])[0]
            dense = self.embeddings[keep] @ normalised(np.asarray(q, dtype=np.float32)[None])[0]
            fused = fused + rrf(dense)
        order = np.argsort(-fused, kind="stable")[:k]
        if dense is None:  # with BM25 alone, a tool with no word in common with the query is no hit
            order = [j for j in order if lexical[j] > 0]
        return [
            Hit(
                name=self.tools[keep[j]].name,
                skill=self.tools[keep[j]].skill,
                score=round(float(fused[j]), 6),
                lexical=round(float(lexical[j]), 4),
                dense=None if dense is None else round(float(dense[j]), 4),
                requires_confirmation=self.tools[keep[j]].requires_confirmation,
            )
            for j in order
        ]


def rrf(scores: np.ndarray) -> np.ndarray:
    """Reciprocal-rank scores of ``scores`` (the best ranks 1)."""
    ranks = np.empty(len(scores))
    ranks[np.argsort(-scores, kind="stable")] = np.arange(1, len(scores) + 1)
    return 1.0 / (RRF_K + ranks)


def _digest(texts: Mapping[str, str]) -> str:
    if not texts:
        return "no-skills"
    blob = "\n".join(f"{k}\t{v}" for k, v in sorted(texts.items()))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:8]


def skill_texts(config) -> dict[str, str]:
    """Each skill's description in a router config: its purpose and when to use it."""
    return {name: ". ".join(p for p in (s.purpose, s.use_when) if p) for name, s in config.skills.items()}


def normalised(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
