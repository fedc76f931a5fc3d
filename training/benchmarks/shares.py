"""Shares as the benchmark commands compute and print them: the share of true flags, rounded to six places
(None for no messages), and its printed form."""

from __future__ import annotations

from collections.abc import Iterable


def share(flags: Iterable[bool]) -> float | None:
    """The share of true ``flags``, rounded to six places; None when there are none."""
    flags = list(flags)
    return round(sum(flags) / len(flags), 6) if flags else None


def percent(v: float | None) -> str:
    """A share as bench scope prints it: one decimal, or n/a for a group with no messages."""
    return "n/a" if v is None else f"{v:.1%}"
