"""The examples in README.md and docs/*.md, run as tests (Sybil; collected through the root conftest.py).

Each page runs in a working folder of its own, laid out like a clone: a copy of data/ (without the
teacher's targets) and of the shipped models as committed, the router package and the virtualenv linked.
The Python blocks of a page share one namespace and run in that folder; a block written as a doctest
(`>>>`) has its output checked, numbers to the precision the page shows (Sybil's NUMBER flag).

- ```bash blocks run with `bash -e -o pipefail`, one block after another; a `cd` carries to the page's
  next block. The virtualenv's bin/ comes first on PATH, so `intent-router` is this checkout's.
- ```console blocks hold `$ command` lines, each followed by the output the page shows; the output is
  checked with `...` standing for any text (doctest's ELLIPSIS, whitespace normalised).
- ```json blocks under `<!-- output-of: COMMAND -->` are what COMMAND prints (OutputOfParser says how
  closely).
- `<!-- skip: next "why" -->` before a block says why it cannot run here (a real LLM, a cluster, the
  public benchmarks, which tests never read). `<!-- slow: why -->` puts the next block under the `slow`
  mark. `<!-- invisible-code-block: python ... -->` sets up what a page leaves to the reader.
"""

from __future__ import annotations

import doctest
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from sybil import Document, Example, Region, Sybil
from sybil.evaluators.doctest import NUMBER
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser

from tests.shipped_models import committed

ROOT = Path(__file__).resolve().parent.parent
SLOW = re.compile(r"<!--\s*slow:\s*(?P<why>.+?)\s*-->\s*$")
OUTPUT_OF = re.compile(r"<!--\s*output-of:\s*(?P<command>.+?)\s*-->\s*$")
FLOAT_TOLERANCE = 0.02
CONSOLE_OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
SHELL_TIMEOUT = 1800  # seconds: the slowest block builds a small project


@dataclass(frozen=True)
class ShellBlock:
    """A shell block as the page shows it; `slow` names why it runs under the slow mark."""

    source: str
    console: bool
    slow: str | None


class ShellParser(CodeBlockParser):
    """```bash and ```console blocks, with the `<!-- slow: ... -->` line that may precede them."""

    def __init__(self, language: str) -> None:
        super().__init__(language=language, evaluator=run_shell)

    def __call__(self, document: Document):
        for region in super().__call__(document):
            before = document.text[: region.start].rstrip("\n").rsplit("\n", 1)[-1]
            slow = SLOW.search(before)
            region.parsed = ShellBlock(
                str(region.parsed), self.language == "console", slow["why"] if slow else None
            )
            yield region


class OutputOfParser(CodeBlockParser):
    """```json blocks under `<!-- output-of: COMMAND -->`: the JSON the command prints, as far as shown.

    Every object shows all of its keys; a list may be cut short (its first entries shown); numbers agree to
    `FLOAT_TOLERANCE` (graphs give slightly different floats on other CPUs); timings are not compared."""

    def __init__(self) -> None:
        super().__init__(language="json", evaluator=check_output_of)

    def __call__(self, document: Document):
        for region in super().__call__(document):
            before = document.text[: region.start].rstrip("\n").rsplit("\n", 1)[-1]
            command = OUTPUT_OF.search(before)
            if command:
                region.parsed = (command["command"], json.loads(str(region.parsed)))
                yield region


def _agrees(shown, actual, where: str = "") -> list[str]:
    if isinstance(shown, dict) and isinstance(actual, dict):
        if sorted(shown) != sorted(actual):
            return [f"{where or 'top level'}: keys {sorted(shown)} shown, {sorted(actual)} printed"]
        timings = [k for k in shown if k == "ms" or k.endswith("_ms")]
        return [e for k in shown if k not in timings for e in _agrees(shown[k], actual[k], f"{where}.{k}")]
    if isinstance(shown, list) and isinstance(actual, list):
        if len(shown) > len(actual):
            return [f"{where}: {len(shown)} entries shown, {len(actual)} printed"]
        return [e for i, s in enumerate(shown) for e in _agrees(s, actual[i], f"{where}[{i}]")]
    if isinstance(shown, float) and isinstance(actual, (int, float)) and not isinstance(actual, bool):
        return [] if abs(shown - actual) <= FLOAT_TOLERANCE else [f"{where}: {shown} shown, {actual} printed"]
    return [] if shown == actual else [f"{where}: {shown!r} shown, {actual!r} printed"]


def check_output_of(example: Example) -> None:
    command, shown = example.parsed
    printed = json.loads(_bash(command, example.namespace))
    errors = _agrees(shown, printed)
    assert not errors, f"$ {command}\nthe page's JSON differs from what the command prints:\n" + "\n".join(
        errors
    )


def _workdir(namespace: dict) -> Path:
    return namespace["__workdir__"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["INTENT_ROUTER_MODEL"] = str(committed("models/intent-minilm"))
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env["COLUMNS"] = "200"  # rich wraps at the terminal's width; the pages show unwrapped lines
    return env


def _bash(source: str, namespace: dict) -> str:
    """Run `source` in the page's current folder; return its output (stdout and stderr) and keep its cwd."""
    cwd_file = _workdir(namespace) / ".cwd"
    script = f"set -e -o pipefail\ntrap 'pwd > \"{cwd_file}\"' EXIT\n{source}\n"
    done = subprocess.run(
        ["bash", "-c", script], cwd=namespace["__cwd__"], env=_env(), capture_output=True, text=True,
        timeout=SHELL_TIMEOUT,
    )  # fmt: skip
    if cwd_file.exists():
        namespace["__cwd__"] = Path(cwd_file.read_text().strip())
    output = done.stdout + done.stderr
    if done.returncode != 0:
        raise AssertionError(f"exit {done.returncode}\n$ {source.strip()}\n{output[-4000:]}")
    return done.stdout


def _console_steps(source: str) -> list[tuple[str, str]]:
    """`$ command` lines with the output shown under each."""
    steps: list[tuple[str, list[str]]] = []
    for line in source.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
        elif line.strip():
            raise ValueError(f"a console block starts with a `$ ` line, not {line!r}")
    return [(command, "\n".join(lines).strip() + "\n") for command, lines in steps]


def run_shell(example: Example) -> None:
    block: ShellBlock = example.parsed
    if not block.console:
        _bash(block.source, example.namespace)
        return
    checker = doctest.OutputChecker()
    for command, want in _console_steps(block.source):
        got = _bash(command, example.namespace)
        if not checker.check_output(want, got, CONSOLE_OPTIONS):
            raise AssertionError(f"$ {command}\nthe page shows:\n{want}\nthe command printed:\n{got}")


def make_workdir() -> Path:
    """A folder laid out like a clone, for one page: copies of what its commands may write to."""
    work = Path(tempfile.mkdtemp(prefix="intent-router-docs-"))
    shutil.copytree(ROOT / "data", work / "data", ignore=shutil.ignore_patterns("teacher"))
    for name in ("intent-minilm", "intent-minilm-fast"):
        shutil.copytree(committed(f"models/{name}"), work / "models" / name)
    (work / "router").symlink_to(ROOT / "router", target_is_directory=True)
    (work / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    return work


def _service_starter(namespace: dict):
    """`start_service(*args)` for a page's hidden setup: `intent-router serve ARGS` in the page's folder,
    ready before it returns, stopped when the page is done."""

    def start_service(*args: str, port: int = 8080, wait: float = 120.0) -> None:
        proc = subprocess.Popen(
            ["intent-router", "serve", "--port", str(port), *args], cwd=namespace["__cwd__"], env=_env(),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        namespace["__services__"].append(proc)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        proc.kill()
        raise AssertionError(f"intent-router serve did not get ready: {proc.communicate()[1][-2000:]}")

    return start_service


def setup(namespace: dict) -> None:
    work = make_workdir()
    namespace.update(__workdir__=work, __cwd__=work, __oldcwd__=os.getcwd(), __services__=[])
    namespace["start_service"] = _service_starter(namespace)
    os.environ["INTENT_ROUTER_MODEL"] = str(committed("models/intent-minilm"))
    os.chdir(work)


def teardown(namespace: dict) -> None:
    for proc in namespace["__services__"]:
        proc.terminate()
        proc.wait(timeout=30)
    os.chdir(namespace["__oldcwd__"])
    shutil.rmtree(namespace["__workdir__"], ignore_errors=True)


def docs_sybil(patterns=("README.md", "docs/*.md"), path: Path = ROOT) -> Sybil:
    return Sybil(
        parsers=[
            SkipParser(),
            PythonCodeBlockParser(doctest_optionflags=doctest.ELLIPSIS | NUMBER),
            ShellParser("bash"),
            ShellParser("sh"),
            ShellParser("console"),
            OutputOfParser(),
        ],
        patterns=list(patterns),
        excludes=["*/README.md"],  # a folder's README (data/, models/) is not a page with examples
        path=str(path),
        setup=setup,
        teardown=teardown,
        name="docs",
    )


def slow_reason(item) -> str | None:
    """Why a collected docs example runs under the slow mark, if it does."""
    example = getattr(item, "example", None)
    parsed = getattr(example, "parsed", None)
    return parsed.slow if isinstance(parsed, ShellBlock) else None


__all__ = ["Region", "ShellBlock", "docs_sybil", "slow_reason"]
