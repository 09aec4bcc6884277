"""The README and docs/ as a newcomer meets them: short enough to read, every link leading
somewhere, one exit-code table that matches the code, every page and benchmark findable.

A link that points at a moved section or a renamed file is the first thing a reader hits
after a docs change; these checks read the Markdown as GitHub renders it (heading anchors
made the way GitHub makes them) and need no network.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from schemas.exit_codes import EXIT_MEANINGS
from tests.conftest import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_MAX_LINES = 300

FENCED = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.MULTILINE)


def pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def prose(text: str) -> str:
    """The text a reader clicks in: fenced blocks and inline code hold no links."""
    return INLINE_CODE.sub("", FENCED.sub("", text))


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, with GitHub's -1, -2 for repeats."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for match in HEADING.finditer(FENCED.sub("", path.read_text())):
        base = anchor(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in LINK.findall(prose(path.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ... not checked offline
            continue
        file_part, _, fragment = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.exists():
            broken.append(f"{target}: no file {resolved}")
        elif fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
            broken.append(f"{target}: no heading #{fragment} in {resolved.name}")
    return broken


def test_the_readme_is_short_enough_to_read_top_to_bottom() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


@pytest.mark.parametrize("path", pages(), ids=lambda p: p.name if p != README else "README")
def test_every_link_leads_to_a_file_and_heading_that_exist(path: Path) -> None:
    assert broken_links(path) == []


def test_the_link_check_sees_a_missing_heading_and_a_missing_file(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n## Exit codes\n\n[ok](#exit-codes) [here](page.md#title)\n"
        "[gone](#no-such-heading) [lost](missing.md) `[code](not-a-link.md)`\n"
    )
    assert broken_links(page) == [
        "#no-such-heading: no heading #no-such-heading in page.md",
        f"missing.md: no file {tmp_path / 'missing.md'}",
    ]


def test_the_docs_index_lists_every_page() -> None:
    index = prose((DOCS / "README.md").read_text())
    listed = {Path(target.partition("#")[0]).name for target in LINK.findall(index)}
    missing = [p.name for p in sorted(DOCS.glob("*.md")) if p.name not in listed | {"README.md"}]
    assert missing == []


def exit_code_tables(text: str) -> list[list[int]]:
    """The first-column numbers of every table that lists exit codes (0 and 64 among them)."""
    tables: list[list[int]] = [[]]
    for line in FENCED.sub("", text).splitlines():
        if not line.startswith("|"):
            if tables[-1]:
                tables.append([])
            continue
        cell = line.split("|")[1].strip()
        if cell.isdigit():
            tables[-1].append(int(cell))
    return [codes for codes in tables if 0 in codes and 64 in codes]


def test_the_readme_has_one_exit_code_table_and_it_is_the_codes_assay_exits_with() -> None:
    assert exit_code_tables(README.read_text()) == [sorted(EXIT_MEANINGS)]


@pytest.mark.parametrize("path", sorted(DOCS.glob("*.md")), ids=lambda p: p.name)
def test_no_page_keeps_a_second_exit_code_table(path: Path) -> None:
    assert exit_code_tables(path.read_text()) == []


def test_every_benchmark_script_is_described() -> None:
    described = (DOCS / "testing.md").read_text()
    scripts = sorted(
        p.name for p in (ROOT / "bench").glob("*.py") if p.name.startswith(("bench_", "cel_"))
    )
    assert [name for name in scripts if f"bench/{name}" not in described] == []
