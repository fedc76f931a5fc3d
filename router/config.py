"""Router configuration: threshold, intent -> skills, the skill registry and roles (RBAC).

Loaded strictly (``router.strict``): duplicate keys, unknown fields and non-boolean booleans ("no",
"yes" as strings, 0/1) are errors naming file and line. ``check_config`` returns the effective
roles -> skills -> permissions table that ``intent-router config check FILE`` prints.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from router.strict import load_model

WILDCARD = "*"


class IntentSkills(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    description: str = ""  # what the intent means, for the verifier's prompt (router.verifier.prompt)
    # utterances of an intent the model does not predict: served by similarity (router.examples)
    examples: list[str] = Field(default_factory=list)
    required: list[str] = Field(default_factory=list)
    optional: list[str] = Field(default_factory=list)
    context_budget: int = Field(ge=0)


class Skill(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    permissions: list[str] = Field(default_factory=list)
    requires_confirmation: bool = False
    purpose: str = ""
    use_when: str = ""
    avoid_when: str = ""
    examples: list[str] = Field(default_factory=list)


class Role(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    skills: list[str] = Field(default_factory=list)
    permissions: list[str] = Field(default_factory=list)

    def allows_skill(self, skill: str) -> bool:
        return WILDCARD in self.skills or skill in self.skills

    def missing_permissions(self, needed: list[str]) -> list[str]:
        if WILDCARD in self.permissions:
            return []
        return [p for p in needed if p not in self.permissions]


def validate_threshold(v: float) -> float:
    if not (0.0 < float(v) <= 1.0):
        raise ValueError(f"threshold must be in (0, 1], got {v}")
    return float(v)


class VerifierOptions(BaseModel):
    """The LLM verifier asked below the threshold: an OpenAI-compatible server's base URL, the model it
    serves and the seconds per request. The command line's --verifier-url options take precedence."""

    model_config = ConfigDict(extra="forbid", strict=True)
    url: str = Field(min_length=1)
    model: str | None = None
    timeout: float | None = Field(None, gt=0)


class ServiceLimits(BaseModel):
    """What ``intent-router serve`` accepts in one request; its flags take precedence, and a limit set
    nowhere keeps serve's default."""

    model_config = ConfigDict(extra="forbid", strict=True)
    max_messages: int | None = Field(None, ge=1)
    max_message_chars: int | None = Field(None, ge=1)
    max_body_bytes: int | None = Field(None, ge=1)


class ToolSearch(BaseModel):
    """How the router picks tools of the granted skills out of a tool registry (router.tools.stage)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    k: int = Field(5, ge=1, le=100)
    min_score: float = Field(0.0, ge=0.0)  # a tool must score above this; none does: none applies
    token_budget: int = Field(4000, ge=1)  # estimated tokens of the picked definitions, at most
    # an exported sentence encoder (router.tools.encoder) that tool search fuses with BM25; route() never
    # runs it. A relative path is read from the config file's folder.
    encoder: str | None = None


class RouterConfig(BaseModel):
    """A router config names an entry per intent of the model it serves (``check_intents``): its skills
    and context budget. Below the threshold with no verifier answer, the skills of ``fallback_intents``
    are loaded together; with none, nothing is loaded and the caller is asked to clarify."""

    model_config = ConfigDict(extra="forbid", strict=True)
    threshold: float = 0.75
    # an intent's own threshold, where it differs (``intent-router eval --fit-thresholds`` fits them)
    thresholds: dict[str, float] = Field(default_factory=dict)
    fallback_intents: list[str] = Field(default_factory=list)
    max_chars: int = Field(10000, ge=1)
    # a message in a language the model was not trained on goes to the verifier or the fallback
    # (router.language); false routes it on the model's reading, whatever its language
    language_check: bool = True
    # the service's verifier and request limits, which reload with the config (docs/serve.md)
    verifier: VerifierOptions | None = None
    limits: ServiceLimits | None = None
    # with a tool registry (Router.load(tools=...)), the tools of the granted skills a message needs
    tool_search: ToolSearch = Field(default_factory=ToolSearch)
    intents: dict[str, IntentSkills]
    skills: dict[str, Skill]
    roles: dict[str, Role]

    _check_threshold = field_validator("threshold")(classmethod(lambda cls, v: validate_threshold(v)))

    @model_validator(mode="after")
    def _complete(self) -> RouterConfig:
        if not self.intents:
            raise ValueError("intents: name at least one intent and its skills")
        unknown = [i for i in self.fallback_intents if i not in self.intents]
        if unknown:
            raise ValueError(f"fallback_intents must name configured intents, got {self.fallback_intents}")
        unknown = [i for i in self.thresholds if i not in self.intents]
        if unknown:
            raise ValueError(f"thresholds must name configured intents, got {unknown}")
        for value in self.thresholds.values():
            validate_threshold(value)
        unknown_skills = self._unknown_skills()
        if unknown_skills:
            raise ValueError("; ".join(unknown_skills))
        return self

    def _unknown_skills(self) -> list[str]:
        """Each place an intent or a role names a skill the registry (``skills``) lacks, with the closest
        registered name: a typo there would otherwise surface only when a request is denied the skill."""
        from difflib import get_close_matches

        places = [
            (f"intents.{name}.{part}", skill)
            for name, spec in self.intents.items()
            for part in ("required", "optional")
            for skill in getattr(spec, part)
        ]
        places += [
            (f"roles.{name}.skills", skill) for name, role in self.roles.items() for skill in role.skills
        ]
        out = []
        for where, skill in places:
            if (skill == WILDCARD and where.startswith("roles.")) or skill in self.skills:
                continue
            close = get_close_matches(skill, list(self.skills), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            out.append(f"{where} names skill {skill!r}, which is not in the skill registry{hint}")
        return out

    def example_intents(self, model_intents: tuple[str, ...] | list[str]) -> dict[str, list[str]]:
        """The intents the model does not predict that this config defines by examples (router.examples)."""
        return {n: list(s.examples) for n, s in self.intents.items() if n not in model_intents and s.examples}

    def check_intents(self, intents: tuple[str, ...] | list[str], model: str = "the model") -> None:
        """Raise ValueError unless this config has an entry for each of a model's ``intents`` and no other
        but intents defined by enough examples (router.examples.MIN_EXAMPLES)."""
        from router.examples import MIN_EXAMPLES

        missing = [i for i in intents if i not in self.intents]
        extra = [i for i in self.intents if i not in intents and len(self.intents[i].examples) < MIN_EXAMPLES]
        if missing or extra:
            parts = [f"{model} has the intents {', '.join(intents)}"]
            if missing:
                parts.append(f"the router config has no entry for {', '.join(missing)}")
            if extra:
                parts.append(
                    f"the router config names {', '.join(extra)}, which {model} does not predict (an intent "
                    f"served without retraining needs at least {MIN_EXAMPLES} examples)"
                )
            raise ValueError("; ".join(parts))

    @classmethod
    def load(cls, path: str | Path | None = None) -> RouterConfig:
        if path is None:
            text = resources.files("router").joinpath("config/default.yaml").read_text(encoding="utf-8")
            source = "router/config/default.yaml"
        else:
            p = Path(path)
            if not p.is_file():
                raise FileNotFoundError(f"router config not found: {p}")
            text, source = p.read_text(encoding="utf-8"), str(p)
        cfg = cls.loads(text, source)
        encoder = cfg.tool_search.encoder
        if path is not None and encoder is not None and not Path(encoder).is_absolute():
            spec = cfg.tool_search.model_copy(update={"encoder": str(Path(path).parent / encoder)})
            cfg = cfg.model_copy(update={"tool_search": spec})
        return cfg

    @classmethod
    def loads(cls, text: str, source: str = "<config>") -> RouterConfig:
        """Validate YAML text strictly; every error names ``source`` and the line."""
        return load_model(cls, text, source, "router config")

    def save(self, path: str | Path) -> Path:
        """Write the config as YAML (the fields that differ from their defaults), checked to load back."""
        import os

        import yaml

        data = self.model_dump(exclude_defaults=True)
        encoder = self.tool_search.encoder
        if encoder is not None and not Path(encoder).is_absolute():  # relative to the new file's folder
            data["tool_search"]["encoder"] = os.path.relpath(encoder, Path(path).parent)
        text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
        RouterConfig.loads(text, str(path))
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path
