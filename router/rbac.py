"""Role-based skill filtering. Fails closed: unknown roles and unconfigured skills get nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from router.config import RouterConfig
from router.decision import DeniedSkill, GrantedSkills


@dataclass
class SkillGrant:
    skills: GrantedSkills
    denied: list[DeniedSkill] = field(default_factory=list)
    requires_confirmation: bool = False

    @property
    def servable(self) -> bool:
        return not any(d.required for d in self.denied)


def grant_skills(config: RouterConfig, role: str, required: list[str], optional: list[str]) -> SkillGrant:
    """Split the skills an intent wants into granted and denied (each with its reason) for ``role``."""
    grant = SkillGrant(skills=GrantedSkills())
    role_cfg = config.roles.get(role)
    seen: set[str] = set()
    for is_required, names in ((True, required), (False, optional)):
        for name in names:
            if name in seen:
                continue
            seen.add(name)
            reason = _denial_reason(config, role, role_cfg, name)
            if reason:
                grant.denied.append(DeniedSkill(skill=name, required=is_required, reason=reason))
                continue
            (grant.skills.required if is_required else grant.skills.optional).append(name)
            if config.skills[name].requires_confirmation:
                grant.requires_confirmation = True
    return grant


def skill_denial_reason(config: RouterConfig, role: str, skill: str) -> str | None:
    """Why ``role`` may not use ``skill``, or None when it may."""
    return _denial_reason(config, role, config.roles.get(role), skill)


def _denial_reason(config: RouterConfig, role: str, role_cfg, skill: str) -> str | None:
    if role_cfg is None:
        return f"unknown role {role!r}"
    spec = config.skills.get(skill)
    if spec is None:
        return f"skill {skill!r} is not in the skill registry"
    if not role_cfg.allows_skill(skill):
        return f"role {role!r} does not include skill {skill!r}"
    missing = role_cfg.missing_permissions(spec.permissions)
    if missing:
        return f"role {role!r} lacks permission(s) {', '.join(missing)} needed by {skill!r}"
    return None


# ------------------------------------------------------------------------------- config check
def effective_permissions(config: RouterConfig) -> dict[str, dict[str, dict]]:
    """roles -> skills -> {granted, permissions, requires_confirmation, reason} for every role and every
    skill in the registry, exactly as ``grant_skills`` decides."""
    table: dict[str, dict[str, dict]] = {}
    for role in sorted(config.roles):
        row: dict[str, dict] = {}
        for skill in sorted(config.skills):
            spec = config.skills[skill]
            reason = skill_denial_reason(config, role, skill)
            row[skill] = {
                "granted": reason is None,
                "permissions": list(spec.permissions),
                "requires_confirmation": spec.requires_confirmation,
                "reason": reason,
            }
        table[role] = row
    return table


def check_config(path: str | Path | None = None) -> dict:
    """Load a router config strictly and return what it grants, as data:
    ``{"source", "threshold", "fallback_intents", "roles": effective_permissions(...),
    "intents": {intent: {"required": [...], "optional": [...]}}}``.
    Raises FileNotFoundError or StrictLoadError (a ValueError whose lines start with ``file:line:``)."""
    config = RouterConfig.load(path)
    return {
        "source": str(path) if path is not None else "router/config/default.yaml",
        "threshold": config.threshold,
        "fallback_intents": list(config.fallback_intents),
        "intents": {
            name: {"required": list(spec.required), "optional": list(spec.optional)}
            for name, spec in config.intents.items()
        },
        "roles": effective_permissions(config),
    }


def format_permissions(report: dict) -> str:
    """The roles -> skills -> permissions table of ``check_config`` as plain text, one line per pair."""
    out = [f"{report['source']}: valid; threshold {report['threshold']}"]
    for role, skills in report["roles"].items():
        out.append(f"role {role}:")
        for skill, e in skills.items():
            perms = ", ".join(e["permissions"]) or "no permissions"
            if e["granted"]:
                confirm = "; requires confirmation" if e["requires_confirmation"] else ""
                out.append(f"  + {skill} ({perms}){confirm}")
            else:
                out.append(f"  - {skill}: {e['reason']}")
    return "\n".join(out)
