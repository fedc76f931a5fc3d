"""What an export does, as one typed object: the CLI's `export`, the build (from the training config) and
code all pass an ExportOptions to training.export.exporter.export_model.

Each option has one name everywhere: the field here, the training config's key where the config holds
it (``export_recipes``, ``portable_int8``, ``int8_kept_fp32``, ``int8_half_weights``,
``int8_prefer_margin``), and the same
name with dashes on the command line (``--export-recipes``, ``--int8-half-weights``...).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from training.export.recipes import DEFAULT_RECIPES, check_recipes

VARIANTS = ("fp32", "fp16", "int8")


@dataclass(frozen=True)
class ExportOptions:
    """``variants``: the graphs to write (fp32, fp16: fp32 compute with half-precision storage, int8).
    ``export_recipes``: the int8 recipes to try, fastest first (training.export.recipes.RECIPES).
    ``require_int8``: fail when no int8 recipe passes parity, instead of making the fp16 (else the fp32)
    graph the default. ``portable_int8``: the rowscaled recipes' weights keep 7 bits, so CPUs without
    VNNI compute the same graph. ``int8_kept_fp32``: the MatMuls a -keepK recipe keeps out of int8 stay
    fp32, not MatMulNBits. ``int8_half_weights``: the weights an int8 graph keeps in fp32 (its embedding
    table) are stored as float16. ``int8_prefer_margin``: a recipe that passes parity with margin wins
    over a faster one that passes without (false: the first recipe that passes is kept). ``keep_fp32``:
    keep the fp32 graph after an int8 or fp16 default."""

    variants: tuple[str, ...] = ("fp32", "int8")
    export_recipes: tuple[str, ...] = DEFAULT_RECIPES
    require_int8: bool = False
    portable_int8: bool = False
    int8_kept_fp32: bool = False
    int8_half_weights: bool = False
    int8_prefer_margin: bool = True
    keep_fp32: bool = True
    CONFIG_KEYS: ClassVar[tuple[str, ...]] = (
        "export_recipes",
        "portable_int8",
        "int8_kept_fp32",
        "int8_half_weights",
        "int8_prefer_margin",
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "variants", tuple(self.variants))
        object.__setattr__(self, "export_recipes", tuple(self.export_recipes))
        unknown = sorted(set(self.variants) - set(VARIANTS))
        if unknown:
            raise ValueError(f"unknown variants {unknown}; choose from {sorted(VARIANTS)}")
        check_recipes(self.export_recipes)
        if "int8" in self.variants and not self.export_recipes:
            raise ValueError("the int8 variant needs at least one recipe")

    @classmethod
    def from_config(cls, config: Any, **overrides: Any) -> ExportOptions:
        """The options a training config (training.train_config.TrainConfig) names; ``overrides`` win.
        A config without recipes (None) takes the default ones."""
        values = {k: getattr(config, k) for k in cls.CONFIG_KEYS}
        if values["export_recipes"] is None:
            del values["export_recipes"]
        return cls(**{**values, **overrides})


def split_names(value: str | None) -> Sequence[str] | None:
    """A comma-separated command-line list, or None when it names nothing."""
    names = [v.strip() for v in (value or "").split(",") if v.strip()]
    return names or None
