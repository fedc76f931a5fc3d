"""Tool search: a request's few tools out of a registry (router.tools.registry), found two ways and fused.

- *Lexical*: BM25 (k1 1.5, b 0.75) over each tool's words: its name split at ``_``, ``-``, ``.`` and case
  changes, its description, its arguments' names and descriptions, and its skill's description (the
  router config's ``purpose`` and ``use_when``, or an MCP server's summary). A tool's ``examples`` (requests
  it serves) are documents of their own, scored by a second BM25; the tool adds the sum of its three best
  examples' scores. Written in users' words, examples match requests that share no word with the
  description, and a task of several steps, an example of each tool it needs, finds the steps it does not
  name; summing the best few rather than one long field keeps a tool with many examples from being
  diluted or favoured by their number.
- *Dense*: the cosine similarity of the request's sentence embedding and each tool's, the better of two: the
  tool's embedding (its words' plus the mean of its examples') and its nearest example's. The embedder is
  an exported sentence encoder or the router's own graph (``Classifier.embed``). Embeddings are computed
  once, when the index is built, and kept in ``cache_dir`` under the registry's digest and the model id.
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
BEST_EXAMPLES = 3  # a tool's lexical score adds its best few examples' scores
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
    postings, and memory grows with the words of the documents, not with documents times vocabulary."""

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


@dataclass(frozen=True)
class Owners:
    """Which tool each example belongs to, sorted so that a tool's examples are one block, and the first
    ``m`` places of each block: after a sort by tool and then by score, the places of its ``m`` best."""

    n: int
    owner: np.ndarray
    top: np.ndarray
    top_owner: np.ndarray

    @classmethod
    def of(cls, owner: np.ndarray, n: int, m: int = BEST_EXAMPLES) -> Owners:
        owner = np.asarray(owner, dtype=np.int64)
        top = np.flatnonzero(np.arange(len(owner)) - np.searchsorted(owner, owner) < m)
        return cls(n=n, owner=owner, top=top, top_owner=owner[top])

    def best(self, scores: np.ndarray) -> np.ndarray:
        """Each tool's sum of its examples' ``m`` best scores (non-negative, as BM25's are; 0 for a tool
        with none): one sort, whose key keeps every block in its place and orders it best first."""
        if not len(self.owner):
            return np.zeros(self.n)
        key = self.owner - scores / (float(scores.max()) + 1.0)  # block j's keys lie in (j - 1, j]
        ranked = scores[np.argsort(key)]
        return np.bincount(self.top_owner, weights=ranked[self.top], minlength=self.n)


@dataclass(frozen=True)
class Subset:
    """Tools of an index by position, their examples' positions, and their examples' ``Owners`` (each
    example's tool by its place in ``places``)."""

    places: np.ndarray
    examples: np.ndarray
    owners: Owners


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
        examples = [e for t in self.tools for e in t.examples]
        # the tool each example belongs to, by position in self.tools
        self.example_of = np.array([i for i, t in enumerate(self.tools) for _ in t.examples], dtype=np.int64)
        self.example_counts = np.array([len(t.examples) for t in self.tools], dtype=np.int64)
        self.example_bm25 = BM25([words(e) for e in examples]) if examples else None
        self.owners = Owners.of(self.example_of, len(self.tools))
        self.embed = embed
        self.embeddings = self.example_embeddings = None
        if embed is not None:
            both = self._embeddings(texts, examples, cache_dir, f"{model_id}-{_digest(skill_texts)}")
            self.embeddings, self.example_embeddings = both[: len(texts)], both[len(texts) :]

    def lexical(self, query: str, among: Subset | None = None) -> np.ndarray:
        """Every tool's BM25 score for ``query`` (or, with ``among``, those of its tools, in its order): its
        words and its skill's description, plus the sum of its ``BEST_EXAMPLES`` best examples' scores."""
        q = words(query)
        scores = self.bm25.scores(q)
        if among is not None:
            scores = scores[among.places]
        if self.example_bm25 is None:
            return scores
        examples, owners = self.example_bm25.scores(q), self.owners
        if among is not None:
            examples, owners = examples[among.examples], among.owners
        return scores + owners.best(examples)

    def subset(self, places: np.ndarray) -> Subset:
        """Some of the tools (positions in ``self.tools``), with their examples, for ``lexical``: a caller
        that scores the same few tools often (a role's candidates) builds it once."""
        places = np.asarray(places, dtype=np.int64)
        counts = self.example_counts
        starts = np.cumsum(counts) - counts
        examples = [np.arange(starts[p], starts[p] + counts[p]) for p in places]
        return Subset(
            places=places,
            examples=np.concatenate(examples) if examples else np.zeros(0, dtype=np.int64),
            owners=Owners.of(np.repeat(np.arange(len(places)), counts[places]), len(places)),
        )

    def dense(self, query_embedding) -> np.ndarray:
        """Every tool's cosine similarity to the query: the better of the tool's embedding and its nearest
        example."""
        q = normalised(np.asarray(query_embedding, dtype=np.float32)[None])[0]
        scores = self.embeddings @ q
        if len(self.example_of):
            np.maximum.at(scores, self.example_of, self.example_embeddings @ q)
        return scores

    def _embeddings(self, texts: list[str], examples: list[str], cache_dir, model_id: str) -> np.ndarray:
        """The tools' embeddings and then their examples', one row each, read from or kept in the cache."""
        path = None
        if cache_dir is not None:
            key = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{self.registry.digest}-{model_id}")
            path = Path(cache_dir) / f"tool-embeddings-{key}.npy"
            if path.is_file():
                cached = np.load(path)
                if cached.shape[0] == len(texts) + len(examples):
                    return cached
        emb = self._embed_tools(texts, examples) if texts else np.zeros((0, 1), dtype=np.float32)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            np.save(path, emb)
        return emb

    def _embed_tools(self, texts: list[str], examples: list[str]) -> np.ndarray:
        """Each tool's words embedded plus the mean of its examples' embeddings, normalised; then each
        example's embedding."""
        tools = normalised(self.embed(texts))
        if not examples:
            return tools
        ex = normalised(self.embed(examples))
        sums = np.zeros_like(tools)
        np.add.at(sums, self.example_of, ex)
        counts = np.maximum(self.example_counts, 1)[:, None]
        return np.concatenate([normalised(tools + sums / counts), ex])

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
            dense = self.dense(q)[keep]
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
