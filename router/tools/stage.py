"""The tools stage of ``route()``: the few tools of the granted skills a message needs, out of a registry.

After RBAC has granted the skills of the decided intents (both of a compound request, the conversation's
for a continuation), the candidates are the registry's tools of those skills whose permissions the role
holds. They are ranked by BM25 against the message (router.tools.search; the routing model's embedding
is left out, since it lowers tool recall, and so is the config's ``tool_search.encoder``, which would be a
second model run per message: docs/tools.md), and the Decision gets at most the config's
``tool_search.k`` of them that score above ``min_score`` and fit ``token_budget``. When none scores
above it, ``none_applies`` says so and no tool is loaded. A Decision with no skill gets an empty
selection.

``ToolStage.search``, tool search with no intent gating, fuses BM25 with that encoder when the config
names one.

Token counts are estimates, a quarter of the characters of each definition as JSON (name, description,
input schema): what the agent would put in its context.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from router.config import RouterConfig
from router.decision import Decision, ToolPick, ToolSelection, TraceStep
from router.tools.registry import CACHE_DIR, Tool, ToolRegistry
from router.tools.search import Hit, Subset, ToolIndex, skill_texts

CHARS_PER_TOKEN = 4
MAX_CACHED_SETS = 4096  # (role, granted skills) pairs whose candidates are kept


def definition_tokens(tool: Tool) -> int:
    """Estimated context tokens of a tool's definition."""
    return max(1, len(json.dumps(tool.definition(), ensure_ascii=False)) // CHARS_PER_TOKEN)


def search_index(
    registry: ToolRegistry, config: RouterConfig, cache_dir: str | Path | None = None
) -> ToolIndex:
    """The registry's index with the config's skill descriptions and, when ``tool_search.encoder`` names
    one, the encoder's embeddings of the tools (kept in ``cache_dir`` by the registry's digest)."""
    embed, model_id = None, ""
    if config.tool_search.encoder is not None:
        from router.tools.encoder import SentenceEncoder

        encoder = SentenceEncoder(config.tool_search.encoder)
        embed, model_id = encoder.embed, encoder.model_id
    return ToolIndex(registry, embed, cache_dir=cache_dir, model_id=model_id, skill_texts=skill_texts(config))


class ToolStage:
    """A registry ready for ``route()``: indexed once, checked against the router config's skills."""

    def __init__(
        self,
        registry: ToolRegistry,
        config: RouterConfig,
        source: str = "the tool registry",
        cache_dir: str | Path | None = None,
    ) -> None:
        registry.check_skills(config.skills, source)
        self.registry, self.config = registry, config
        self.index = search_index(registry, config, cache_dir)
        self.named = registry.by_name()
        self.place = {t.name: i for i, t in enumerate(registry.tools)}
        self._candidates: dict[tuple[str, tuple[str, ...]], tuple[list[Tool], np.ndarray, int]] = {}
        self._usable: dict[str, set[str]] = {}  # per role, for search (a config reload builds a new stage)
        self.tokens = {t.name: definition_tokens(t) for t in registry.tools}
        self.by_skill: dict[str, list[Tool]] = {}
        for t in registry.tools:
            self.by_skill.setdefault(t.skill, []).append(t)

    @classmethod
    def of(cls, tools, config: RouterConfig) -> ToolStage | None:
        """The stage for ``tools``: a ToolRegistry, its YAML file, or None (no stage)."""
        if tools is None or isinstance(tools, ToolRegistry):
            return None if tools is None else cls(tools, config)
        path = Path(tools)
        return cls(ToolRegistry.load(path, cache=True), config, str(path), path.parent / CACHE_DIR)

    def candidates(self, role: str, skills: list[str]) -> list[Tool]:
        """The tools of ``skills`` whose own permissions ``role`` holds."""
        r = self.config.roles.get(role)
        if r is None:
            return []
        return [
            t for s in skills for t in self.by_skill.get(s, []) if not r.missing_permissions(t.permissions)
        ]

    def usable(self, role: str) -> set[str]:
        """The names of the tools ``role`` may use: of a skill RBAC grants it (router.rbac), with the
        tool's own permissions held."""
        from router.rbac import skill_denial_reason

        skills = [s for s in self.by_skill if skill_denial_reason(self.config, role, s) is None]
        return {t.name for t in self.candidates(role, skills)}

    def search(self, query: str, k: int, role: str | None = None) -> list[Hit]:
        """Tool search with no intent gating: the ``k`` best tools for ``query`` among those ``role`` may
        use (all with no role): BM25 fused with the config's encoder (``search_index``) when it names one,
        else BM25 alone with the tools that share no word with it left out. What the service's
        /v1/tools/search, the MCP server and eval's search figures answer."""
        allowed = None
        if role is not None:
            allowed = self._usable.get(role)
            if allowed is None:
                allowed = self._usable[role] = self.usable(role)
        return self.index.search(query, k, allowed=allowed)

    def _candidate_set(self, role: str, skills: list[str]) -> tuple[list[Tool], Subset, int]:
        """The candidates of ``role`` and ``skills``, their places (with their examples') in the index and
        their definitions' tokens, computed once per pair (a config reload builds a new stage)."""
        key = (role, tuple(skills))
        found = self._candidates.get(key)
        if found is None:
            tools = self.candidates(role, skills)
            subset = self.index.subset(np.array([self.place[t.name] for t in tools], dtype=np.int64))
            found = (tools, subset, sum(self.tokens[t.name] for t in tools))
            if len(self._candidates) < MAX_CACHED_SETS:
                self._candidates[key] = found
        return found

    def select(self, decision: Decision, message: str) -> ToolSelection:
        """The tools for ``message``, among the candidates of the Decision's granted skills: a BM25 score
        for every tool, then the best candidates in order until k are picked or the floor is reached."""
        spec = self.config.tool_search
        tools, subset, every = self._candidate_set(decision.role, decision.skills.all)
        if not tools:
            return ToolSelection(none_applies=True, candidates=0, tokens_loaded=0, tokens_saved=0)
        scores = self.index.lexical(message, among=subset)
        picks, loaded = [], 0
        for j in np.argsort(-scores, kind="stable"):
            score = round(float(scores[j]), 4)
            if len(picks) == spec.k or score <= spec.min_score:
                break
            tool = tools[j]
            cost = self.tokens[tool.name]
            if loaded + cost > spec.token_budget:
                continue
            picks.append(  # built from checked values: no validation on the hot path
                ToolPick.model_construct(
                    name=tool.name,
                    skill=tool.skill,
                    score=score,
                    requires_confirmation=tool.requires_confirmation,
                    tokens=cost,
                )
            )
            loaded += cost
        return ToolSelection.model_construct(
            tools=picks,
            none_applies=not picks,
            candidates=len(tools),
            tokens_loaded=loaded,
            tokens_saved=every - loaded,
        )

    def apply(self, decisions: list[Decision], texts) -> None:
        """Give each Decision its tools, with a trace step and its time."""
        for d, text in zip(decisions, texts, strict=True):
            t0 = time.perf_counter()
            d.tools = self.select(d, text if isinstance(text, str) else "")
            ms = (time.perf_counter() - t0) * 1000
            detail = {"picked": [p.name for p in d.tools.tools], "candidates": d.tools.candidates}
            d.trace.append(
                TraceStep.model_construct(
                    stage="tools",
                    status="none_applies" if d.tools.none_applies else "ok",
                    ms=round(ms, 4),
                    detail=detail,
                )
            )
            d.latency.total_ms += ms
