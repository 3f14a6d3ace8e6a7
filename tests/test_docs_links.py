"""The documentation stays linked and current: README.md is a short first page, every
docs/ page is reachable from it or from the docs index, and no relative link is dead."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README_MAX_LINES = 300
# every page whose relative links must resolve
PAGES = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", *DOCS.glob("*.md"),
                *(ROOT / "bench").glob("*.md")])
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)


def prose(text: str) -> str:
    """The text outside fenced code blocks and code spans (a link inside them is code)."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def links(page: Path) -> list[str]:
    """The relative link targets of a page: no URL with a scheme, no mailto."""
    return [t for t in LINK.findall(prose(page.read_text()))
            if not re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", t)]


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation (backticks too) dropped,
    spaces made hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()  # a link: its text
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of a markdown page (a repeated heading gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text())):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def test_the_readme_is_short():
    """This tests that README.md stays a page read in one sitting."""
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines, more than {README_MAX_LINES}: move reference text "
        "to a page of docs/")


def test_every_docs_page_is_linked_from_the_readme_or_the_docs_index():
    """This tests that each docs/*.md page is reachable: README.md or docs/README.md
    links it."""
    linked = {(page.parent / t.split("#")[0]).resolve()
              for page in (ROOT / "README.md", DOCS / "README.md") for t in links(page)
              if t.split("#")[0]}
    orphans = [p.name for p in sorted(DOCS.glob("*.md"))
               if p.name != "README.md" and p.resolve() not in linked]
    assert not orphans, f"docs pages linked from neither README.md nor docs/README.md: {orphans}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    """This tests that every relative link of a page names a file or folder that exists,
    and that its #anchor, if any, names a heading of the markdown page it points to."""
    dead = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            dead.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            dead.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not dead, f"{page.relative_to(ROOT)}: " + "; ".join(dead)
