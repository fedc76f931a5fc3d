"""What one role gets for one set of intents: skills merged over the intents (router.compound.merge_skills),
filtered by role (router.rbac.grant_skills), with the Decision's message when a required skill is denied."""

from __future__ import annotations

from dataclasses import dataclass

from router.compound import merge_skills
from router.config import RouterConfig
from router.rbac import grant_skills


@dataclass(frozen=True)
class Grant:
    """What one role gets for one set of intents; ``denied`` holds DeniedSkill dicts, validated with each
    Decision (so no two decisions share a list)."""

    required: tuple[str, ...]
    optional: tuple[str, ...]
    denied: tuple[dict, ...]
    servable: bool
    requires_confirmation: bool
    context_budget: int
    message: str


class SkillGrants:
    """The grants of one config, worked out once per role and intents: they follow from the config
    alone. Roles the config does not know are not kept (a caller could send any number of them)."""

    def __init__(self, config: RouterConfig) -> None:
        self.config = config
        self._cache: dict[tuple[str, tuple[str, ...]], Grant] = {}

    def get(self, role: str, intents: tuple[str, ...]) -> Grant:
        """The skills ``role`` gets for ``intents`` (() for the fallback), merged (router.compound.merge_skills)
        and filtered (router.rbac.grant_skills). They follow from the config alone, so they are worked out
        once per role and intents: a Router reads its config when it is built. Roles the config does not
        know are not kept (a caller could send any number of them)."""
        key = (role, intents)
        g = self._cache.get(key)
        if g is not None:
            return g
        wanted = intents or self.config.fallback_intents
        required, optional, budget = merge_skills([self.config.intents[i] for i in wanted])
        grant = grant_skills(self.config, role, required, optional)
        denied = tuple(d.model_dump() for d in grant.denied)
        message = ""
        if not grant.servable:
            names = ", ".join(d.skill for d in grant.denied if d.required)
            message = f"cannot be served as classified: role {role!r} is denied required skill(s) {names}"
        g = Grant(
            tuple(grant.skills.required),
            tuple(grant.skills.optional),
            denied,
            grant.servable,
            grant.requires_confirmation,
            budget,
            message,
        )
        if role in self.config.roles:
            self._cache[key] = g
        return g

    def __len__(self) -> int:
        """How many grants are kept (one per known role and intents asked for)."""
        return len(self._cache)
