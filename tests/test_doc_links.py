"""Every link between the guides lands: a relative link in README.md or a page of docs/ names a
file of the repository, and its ``#anchor`` a heading of that page, as GitHub renders it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def anchors(page: Path) -> set[str]:
    """GitHub's ids for ``page``'s headings: lower case, punctuation dropped, spaces to hyphens,
    ``-1``, ``-2`` after a repeated one."""
    seen: dict[str, int] = {}
    ids = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        if not line.startswith("#"):
            continue
        title = line.lstrip("#").strip()
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        ids.add(slug if count == 0 else f"{slug}-{count}")
    return ids


def links(page: Path) -> list[str]:
    """The relative links of ``page`` outside its code blocks."""
    text = FENCE.sub("", page.read_text())
    return [target for target in LINK.findall(text) if not re.match(r"[a-z]+:", target)]


def test_the_slug_is_githubs() -> None:
    page = ROOT / "docs" / "timing.md"
    assert "the-15-floor-and-why" in anchors(page)  # "## The 15% floor, and why"
    assert "what-the-gate-catches-an-injected-25-slowdown" in anchors(page)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_lands(page: Path) -> None:
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        landing = (page.parent / path).resolve() if path else page
        if not landing.exists():
            broken.append(f"{target}: no {path}")
        elif anchor and landing.suffix == ".md" and anchor not in anchors(landing):
            broken.append(f"{target}: no heading #{anchor} in {landing.name}")
    assert not broken, f"{page.name}: " + "; ".join(broken)


MAX_PAGE_LINES = 340
"""A guide is read whole: one past about 300 lines is split by topic into pages that link each other."""


def test_no_page_runs_past_about_300_lines() -> None:
    long = {page.name: n for page in PAGES if (n := len(page.read_text().splitlines())) > MAX_PAGE_LINES}
    assert not long, f"split these by topic (at most {MAX_PAGE_LINES} lines a page): {long}"
