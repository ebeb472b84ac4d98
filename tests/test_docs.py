"""The README is a front door (under 250 lines) and docs/ holds the rest: every link in both
resolves, every page of docs/ is reachable from the README, and the two commands are the ones CI runs."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def links(page: Path) -> list[str]:
    """The targets of a page's Markdown links and images, code blocks left out."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return LINK.findall(text)


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces as dashes."""
    out = set()
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def broken(page: Path) -> list[str]:
    bad = []
    for target in links(page):
        if re.match(r"[a-z]+:", target):  # http(s):, mailto:: not followed here
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(target)
    return bad


def test_the_link_reader_finds_links_and_misses():
    sample = ROOT / "tests" / "fixtures" / "docs-sample.md"
    assert links(sample) == ["../../README.md", "../../docs/nowhere.md", "../../README.md#the-two-commands",
                             "../../README.md#no-such-heading", "https://example.com"]
    assert broken(sample) == ["../../docs/nowhere.md", "../../README.md#no-such-heading"]


def test_the_readme_is_a_front_door():
    assert len(README.read_text(encoding="utf-8").splitlines()) < 250


def test_every_link_in_the_readme_and_the_docs_resolves():
    assert DOCS, "docs/ holds the documentation the README links to"
    assert {p.name: broken(p) for p in [README, *DOCS] if broken(p)} == {}


def test_every_page_of_the_docs_is_linked_from_the_readme():
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in links(README)}
    assert [p.name for p in DOCS if p.resolve() not in linked] == []


def test_the_two_commands_are_the_ones_ci_runs():
    text = README.read_text(encoding="utf-8")
    assert "./scripts/run.sh" in text and "./scripts/test.sh" in text
    assert "scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
