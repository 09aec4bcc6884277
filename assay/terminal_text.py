"""Text someone else wrote, printed so that it shows as text and nothing more.

A policy author writes names, keys, expressions and messages; a cluster writes object
names, annotations and log lines; a model writes explanations. Printed as is, an escape
sequence among them sets the terminal's title, moves the cursor or erases what was shown,
and a bidirectional override shows text in another order. The CLI's plain output is also
read line by line (grep, awk, people's scripts), so a newline inside one field forges a
line of its own (a fake ``imported ...``). Every plain print of such text goes through
:func:`print_line` (one line: line breaks spelled out too) or :func:`print_block` (text
meant to span lines, an exported document or a diff: its newlines kept). Rich output has
``assay.render.safe_markup`` on top of :func:`visible`.
"""

from __future__ import annotations

import re
import sys
from typing import TextIO

# C0 and C1 controls but tab and newline, and the bidirectional embeddings, overrides and
# isolates. Rich drops a few controls (BEL, CR) but passes ESC through.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# What ends a line for a line-oriented reader (and for Python's splitlines) besides the
# controls above: newline and the Unicode line and paragraph separators.
_LINE_BREAK = re.compile("[\n\u2028\u2029]")


def visible(text: str) -> str:
    """``text`` with terminal control characters spelled out (ESC as ``\\x1b``).

    Tabs and newlines stay: this is the form for text meant to span lines."""
    return _CONTROL.sub(_spelled, text)


def visible_line(text: str) -> str:
    """``text`` as one line: :func:`visible`, and its line breaks spelled out (``\\n``)."""
    return _LINE_BREAK.sub(_spelled, visible(text))


def hides(text: str) -> bool:
    """Whether ``text`` holds a character :func:`visible` would spell out."""
    return _CONTROL.search(text) is not None


def print_line(text: str, file: TextIO | None = None) -> None:
    """``text`` on a line of its own (stdout by default), whatever it holds."""
    print(visible_line(text), file=file if file is not None else sys.stdout)


def print_block(text: str, file: TextIO | None = None) -> None:
    """Text meant to span lines: its newlines kept, its controls spelled out, ended by a
    newline (added when it has none)."""
    shown = visible(text)
    out = file if file is not None else sys.stdout
    out.write(shown if shown.endswith("\n") else shown + "\n")


def _spelled(match: re.Match[str]) -> str:
    character = match.group()
    if character == "\n":
        return "\\n"
    code = ord(character)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
