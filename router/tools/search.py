"""Tool search: a request's few tools out of a registry (router.tools.registry), found two ways and fused.

- *Lexical*: BM25 (k1 1.5, b 0.75) over each tool's words: its name split at ``_``, ``-``, ``.`` and case
  changes, its description, and its arguments' names and descriptions.
- *Dense*: the cosine similarity of the request's sentence embedding and each tool's, from the router's
  own graph (``Classifier.embed``), so a request costs no second model. The tools' embeddings are computed
  once, when the index is built, and kept in ``cache_dir`` under the registry's digest and the model id.
- The two rankings are fused by reciprocal rank (each tool scores ``1 / (60 + rank)`` in each), which needs
  no scale shared by the two scores.

``allowed`` limits a search to some tools (those a role may use, or an intent's skills).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Collection, Sequence
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


def tool_text(tool: Tool) -> str:
    """What a tool is searched by: its name, description and arguments."""
    parts = [tool.name.replace("_", " ").replace("-", " ").replace(".", " "), tool.description]
    for name, prop in (tool.input_schema.get("properties") or {}).items():
        parts.append(name.replace("_", " "))
        if isinstance(prop.get("description"), str):
            parts.append(prop["description"])
    return ". ".join(parts)


class BM25:
    """Okapi BM25 over tokenised documents. Each (document, word) weight is computed once, so a query
    costs a gather and a sum over its known words."""

    def __init__(self, docs: Sequence[list[str]], k1: float = 1.5, b: float = 0.75) -> None:
        vocab = sorted({w for d in docs for w in d})
        self.index = {w: i for i, w in enumerate(vocab)}
        n = len(docs)
        tf = np.zeros((n, len(vocab)), dtype=np.float32)
        for row, d in enumerate(docs):
            for w, c in Counter(d).items():
                tf[row, self.index[w]] = c
        lengths = np.array([len(d) for d in docs], dtype=np.float32)
        avg = float(lengths.mean()) if n else 0.0
        df = (tf > 0).sum(axis=0)
        idf = np.log(1 + (n - df + 0.5) / (df + 0.5)).astype(np.float32)
        norm = (k1 * (1 - b + b * lengths / max(avg, 1e-9)))[:, None]
        self.weights = idf * tf * (k1 + 1) / (tf + norm)

    def scores(self, query: list[str]) -> np.ndarray:
        ids = sorted({self.index[w] for w in query if w in self.index})
        return self.weights[:, ids].sum(axis=1).astype(np.float64)


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
    ) -> None:
        self.registry, self.tools = registry, list(registry.tools)
        texts = [tool_text(t) for t in self.tools]
        self.bm25 = BM25([words(t) for t in texts])
        self.embed = embed
        self.embeddings = self._embeddings(texts, cache_dir, model_id) if embed is not None else None

    def _embeddings(self, texts: list[str], cache_dir, model_id: str) -> np.ndarray:
        path = None
        if cache_dir is not None:
            key = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{self.registry.digest}-{model_id}")
            path = Path(cache_dir) / f"tool-embeddings-{key}.npy"
            if path.is_file():
                cached = np.load(path)
                if cached.shape[0] == len(texts):
                    return cached
        emb = normalised(self.embed(texts)) if texts else np.zeros((0, 1), dtype=np.float32)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            np.save(path, emb)
        return emb

    def search(
        self, query: str, k: int = 5, allowed: Collection[str] | None = None, query_embedding=None
    ) -> list[Hit]:
        """The ``k`` best tools for ``query`` among ``allowed`` (tool names; None: all)."""
        keep = [i for i, t in enumerate(self.tools) if allowed is None or t.name in allowed]
        if not keep or k < 1:
            return []
        lexical = self.bm25.scores(words(query))[keep]
        fused = rrf(lexical)
        dense = None
        if self.embeddings is not None:
            q = query_embedding if query_embedding is not None else self.embed([query])[0]
            dense = self.embeddings[keep] @ normalised(np.asarray(q, dtype=np.float32)[None])[0]
            fused = fused + rrf(dense)
        order = np.argsort(-fused, kind="stable")[:k]
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


def normalised(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
