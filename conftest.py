"""Collects the examples of README.md and docs/*.md as tests (tests/docs_examples.py says how they run).

A page's examples share one namespace and one working folder, in order, so under pytest-xdist each file
runs in one worker (`--dist loadfile`, pyproject.toml)."""

import pytest

from tests.docs_examples import docs_sybil, slow_reason

pytest_collect_file = docs_sybil().pytest()


def pytest_collection_modifyitems(items):
    for item in items:
        if slow_reason(item):
            item.add_marker(pytest.mark.slow)
