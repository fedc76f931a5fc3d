"""mkdocs hook: the guides link to files beside docs/ (data/INTENTS.md, eval/README.md, router/config/
default.yaml, ...), as they must to read well on a code host. The hook puts every file the pages link to,
directly or through another linked page, into the site under ``repo/`` (README.md becomes the home page)
and rewrites the links to match, so `mkdocs build --strict` checks every link and anchor."""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File, Files

LINK = re.compile(r"(\[[^\]]*\]\()([^)\s]+)(\))")
ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
_site: dict[str, str] = {}  # repository path -> the site's src_uri


def _targets(path: Path):
    """Repository paths of the existing files a Markdown file links to."""
    for _, target, _ in LINK.findall(path.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        resolved = (path.parent / target.split("#", 1)[0]).resolve()
        if resolved.is_file() and resolved.is_relative_to(ROOT):
            yield resolved


def on_files(files: Files, config) -> Files:
    _site.clear()
    for f in files:
        _site[(DOCS / f.src_uri).resolve().relative_to(ROOT).as_posix()] = f.src_uri
    queue = [ROOT / "README.md", *(DOCS / f.src_uri for f in files if f.src_uri.endswith(".md"))]
    while queue:
        page = queue.pop()
        rel = page.resolve().relative_to(ROOT).as_posix()
        if rel not in _site:
            uri = "index.md" if rel == "README.md" else f"repo/{rel}"
            _site[rel] = uri
            files.append(File.generated(config, uri, content=page.read_bytes()))
        if page.suffix == ".md":
            queue.extend(t for t in _targets(page) if t.relative_to(ROOT).as_posix() not in _site)
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    here = next(rel for rel, uri in _site.items() if uri == page.file.src_uri)
    base = posixpath.dirname(page.file.src_uri)

    def rewrite(m: re.Match) -> str:
        target = m.group(2)
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            return m.group(0)
        path, _, anchor = target.partition("#")
        rel = posixpath.normpath(posixpath.join(posixpath.dirname(here), path))
        uri = _site.get(rel)
        if uri is None:
            return m.group(0)  # left for mkdocs to report
        new = posixpath.relpath(uri, base or ".") + (f"#{anchor}" if anchor else "")
        return f"{m.group(1)}{new}{m.group(3)}"

    return LINK.sub(rewrite, markdown)
