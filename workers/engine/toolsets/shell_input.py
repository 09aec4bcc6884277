"""Turn the model's command text into argv, or say why not.

Screening happens on the raw text, before ``shlex.split`` and before any policy
matching, so no quoting can smuggle shell syntax through: a ``;`` is refused
even inside quotes. The rule is a character allow-list rather than a list of
known-bad characters, because a deny-list of metacharacters always misses one:

* only printable ASCII letters, digits, space and ``_ - . , : / = @ % + ' "``;
* every other character is refused, which covers the shell metacharacters
  (``; & | ` $ < > ( ) \\ ! # ^``), the glob characters (``* ? [ ] { } ~``,
  assay never expands them and a program that does would widen what matched),
  newlines, NUL and every other control character, and all non-ASCII text:
  fullwidth semicolons, U+037E GREEK QUESTION MARK, homoglyphs in program
  names, zero-width and bidirectional characters. Refusing all non-ASCII
  outright is the safe choice: a command line for ``openssl`` or ``helm``
  never needs it, and no table of confusables is ever complete.

Quotes (``'`` and ``"``) stay allowed so an argument may contain spaces
(``date -u '+%Y-%m-%d %H:%M'``); ``shlex`` removes them and matching sees the
resulting argv, exactly what will run.
"""

from __future__ import annotations

import shlex
import string
import unicodedata
from dataclasses import dataclass

ALLOWED_CHARACTERS = frozenset(string.ascii_letters + string.digits + " _-.,:/=@%+'\"")
SHELL_METACHARACTERS = frozenset(";&|`$<>()\\!#^")
GLOB_CHARACTERS = frozenset("*?[]{}~")


@dataclass(frozen=True)
class ScreenedCommand:
    """Either ``argv`` (safe to match) or ``refusal`` (why not), never both."""

    argv: list[str] | None = None
    refusal: str | None = None


def _describe(character: str) -> str:
    codepoint = f"U+{ord(character):04X}"
    if character in SHELL_METACHARACTERS:
        return f"the shell metacharacter {character!r}"
    if character in GLOB_CHARACTERS:
        return f"the glob character {character!r} (assay never expands wildcards)"
    if not character.isascii():
        name = unicodedata.name(character, "unnamed")
        return f"the non-ASCII character {codepoint} {name} (only plain ASCII is accepted)"
    if not character.isprintable() or character.isspace():
        return f"the control or whitespace character {codepoint} (only plain spaces separate words)"
    return f"the character {character!r}, which is not allowed in a command"


def screen_command(text: str, max_chars: int) -> ScreenedCommand:
    """Length, then characters, then ``shlex.split``; the first failure is the refusal."""
    if len(text) > max_chars:
        return ScreenedCommand(
            refusal=f"the command is {len(text)} characters long, over the limit of {max_chars}"
        )
    for position, character in enumerate(text):
        if character not in ALLOWED_CHARACTERS:
            return ScreenedCommand(
                refusal=f"the command contains {_describe(character)} at position {position}"
            )
    try:
        argv = shlex.split(text, posix=True)
    except ValueError as exc:
        return ScreenedCommand(refusal=f"the command cannot be split into words ({exc})")
    if not argv:
        return ScreenedCommand(refusal="the command is empty")
    return ScreenedCommand(argv=argv)
