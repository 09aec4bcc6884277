"""The size cap: cut on a line boundary, with a marker saying how much was cut."""

from __future__ import annotations

from workers.engine.toolsets.truncation import cap_text


def test_cap_text_head_says_how_much_was_cut() -> None:
    text = "".join(f"line {i}\n" for i in range(1000))
    capped, truncated = cap_text(text, 600)
    assert truncated
    assert len(capped) <= 600
    assert capped.startswith("line 0\n")
    omitted = int(capped.rsplit("truncated, ", 1)[1].split()[0])
    assert omitted == len(text) - len(capped.rsplit("\n... truncated", 1)[0]) - 1


def test_cap_text_tail_keeps_the_newest_lines() -> None:
    text = "".join(f"line {i}\n" for i in range(1000))
    capped, truncated = cap_text(text, 600, keep="tail")
    assert truncated and len(capped) <= 600
    assert capped.startswith("... truncated, ")
    assert capped.endswith("line 999\n")
    assert cap_text("short", 600) == ("short", False)
