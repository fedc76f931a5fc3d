"""The machinery that runs the pages' examples (tests/docs_examples.py) fails a page that is wrong: a doctest
whose output differs, a shell block that exits non-zero, a console block or a command's JSON that prints
something else. The pages themselves are collected by the root conftest.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs_examples import ROOT, docs_sybil, setup, teardown

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)
RUN = {"python", "bash", "sh", "console"}  # the languages the docs tests run (json: under `output-of`)
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _evaluate(tmp_path: Path, page: str) -> list[str]:
    """Run one page's examples as the docs tests do; return the failures' first lines."""
    (tmp_path / "page.md").write_text(page, encoding="utf-8")
    document = docs_sybil(patterns=["page.md"], path=tmp_path).parse(tmp_path / "page.md")
    setup(document.namespace)
    failures = []
    try:
        for example in document.examples():
            try:
                example.evaluate()
            except Exception as exc:  # every failure is collected and reported
                failures.append(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
    finally:
        teardown(document.namespace)
    return failures


def test_a_right_page_passes(tmp_path):
    page = """
```python
>>> from router import Router
>>> Router.load().route("restart the indexing service in us-east", role="admin").intent
'ACTION'
```

```bash
intent-router config check router/config/default.yaml > /dev/null
cd data
```

```console
$ ls train.jsonl
train.jsonl
```
"""
    assert _evaluate(tmp_path, page) == []


@pytest.mark.parametrize(
    "page",
    [
        """```python\n>>> 1 + 1\n3\n```\n""",
        """```bash\nintent-router route "hello" --model no-such-model\n```\n""",
        """```bash\nfalse | cat\n```\n""",
        """```console\n$ echo routed\nnot routed\n```\n""",
        """<!-- output-of: echo '{"intent": "SEARCH", "confidence": 0.9}' -->\n```json\n"""
        """{"intent": "ACTION", "confidence": 0.9}\n```\n""",
        """<!-- output-of: echo '{"intent": "SEARCH", "extra": 1}' -->\n```json\n{"intent": "SEARCH"}\n```\n""",
    ],
    ids=["doctest output", "command fails", "pipeline fails", "console output", "json value", "json keys"],
)
def test_a_wrong_example_fails(tmp_path, page):
    assert len(_evaluate(tmp_path, page)) == 1


def test_json_timings_and_close_numbers_agree(tmp_path):
    page = """<!-- output-of: echo '{"p": 0.9512, "ms": 3.1, "xs": [1, 2, 3]}' -->
```json
{"p": 0.95, "ms": 11.0, "xs": [1, 2]}
```
"""
    assert _evaluate(tmp_path, page) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_block_is_one_the_docs_tests_run(page):
    """A shell or Python block in a language the tests do not run would pass unread."""
    for language, body in FENCE.findall(page.read_text(encoding="utf-8")):
        if language in RUN:
            continue
        assert language not in {"shell", "zsh", "py", "pycon", "python3", "shell-session"}, language
        prompts = [line for line in body.splitlines() if line.startswith(("$ ", ">>> "))]
        assert not prompts, f"{page.name}: a ```{language} block with commands: {prompts[0]}"
