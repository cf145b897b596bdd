"""The README is a guide for the first hour and the rest lives in docs/: the README stays under
20,000 characters and links every doc, no page points at a contract outside the repository,
and every relative link (file and #anchor) and image resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    ROOT / "README.md",
    ROOT / "clients" / "python" / "README.md",
    *(ROOT / "docs").glob("*.md"),
]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
DOCS = ("api.md", "formation.md", "console.md", "operations.md", "benchmarks.md", "ARCHITECTURE.md")


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    headings = re.findall(r"^#{1,6} (.+)$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_the_readme_is_a_first_hour_guide_that_links_every_doc():
    readme = (ROOT / "README.md").read_text()
    assert len(readme) <= 20_000
    assert "make run" in readme and "make test" in readme
    for doc in DOCS:
        assert f"(docs/{doc})" in readme, doc
    assert "(clients/python/README.md)" in readme


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_points_at_a_contract_outside_the_repository(page):
    text = page.read_text()
    assert not re.search(r"\bspec\.md\b", text, re.I) and "shared/STYLE" not in text


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_cites_a_section_of_that_contract(page):
    """A rule is said in words or linked to its page, never cited as a section (`§`) of a
    document the repository does not have."""
    assert not re.search(r"\bspec\s*§", page.read_text(), re.I)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_image_resolves(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked here
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        assert resolved.exists(), f"{page.name}: {target}"
        if anchor:
            assert anchor in anchors(resolved), f"{page.name}: {target}"


def test_each_package_readme_its_pyproject_names_exists():
    for pyproject in (ROOT / "pyproject.toml", ROOT / "clients" / "python" / "pyproject.toml"):
        (readme,) = re.findall(r'^readme = "([^"]+)"', pyproject.read_text(), re.M)
        assert (pyproject.parent / readme).is_file(), pyproject
