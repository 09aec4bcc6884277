"""Where a tool's output repeats the model's own arguments, so that text is never evidence.

A lookup's output is citable because the cluster (or the engine, about what the
cluster returned) wrote it. Some of it the model wrote: a footer that says
``No deployments found in namespace prod matching field_selector
'status.readyReplicas=3'.``, a log header naming the pod asked for, an error
quoting a name. A model that picks its arguments so that such a line holds the
text it means to cite would verify its own words. So every tool builds its
output as :class:`Marked` text: the text, and the spans of it that repeat an
argument (*echo*). The spans travel with the text through every change made to
it on the way to the model (the tool's cap, the registry's scrubbing, the
engine's cut and neutralisation: :func:`edited`, :func:`clipped`), and the
engine checks citations, and builds the structured view, on :func:`masked`
text, where every echo character is :data:`ECHO_MASK`. An excerpt that touches
echo (partly or wholly, whatever its case, spacing or Unicode) is therefore
not found; the same words elsewhere in the output, written by the cluster,
still are.

What counts as echo is decided by where text comes from, never by what it says:
a value the model passed in (a namespace, a name, a selector, a field path, a
command line) is echo wherever it is repeated; a name the engine resolved the
argument to (``Deployment`` for ``deploy``) is the engine's, from the cluster's
own list of kinds. Text whose origin the engine cannot see (the API server's
own error message about the request) is echo as a whole.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Span = tuple[int, int]

ECHO_MASK = "\x00"
"""What every echo character becomes in :func:`masked` text: never whitespace, never cited.

An excerpt holding it is refused (workers/engine/evidence.py), so a citation can only
match text outside every echo span."""


def _merged(spans: Iterable[Span]) -> tuple[Span, ...]:
    """Sorted, non-empty, non-overlapping; touching spans are joined."""
    merged: list[Span] = []
    for start, end in sorted(span for span in spans if span[1] > span[0]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return tuple(merged)


@dataclass(frozen=True)
class Marked:
    """Text, and the spans of it that repeat the model's own arguments."""

    text: str = ""
    echo: tuple[Span, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "echo", _merged(self.echo))

    def __add__(self, other: str | Marked) -> Marked:
        other = marked(other)
        shift = len(self.text)
        return Marked(
            self.text + other.text,
            (*self.echo, *((start + shift, end + shift) for start, end in other.echo)),
        )

    def __radd__(self, other: str) -> Marked:
        return marked(other) + self

    def __len__(self) -> int:
        return len(self.text)

    def rstrip(self) -> Marked:
        return clipped(self, 0, len(self.text.rstrip()))


def marked(value: str | Marked) -> Marked:
    """``value`` as Marked text; a plain string holds no echo."""
    return value if isinstance(value, Marked) else Marked(value)


def echo(value: object) -> Marked:
    """``value`` as the model gave it, repeated: all of it echo."""
    text = str(value)
    return Marked(text, ((0, len(text)),))


def quoted(value: object) -> Marked:
    """``repr(value)`` (``'prod'``), all of it echo: what ``{value!r}`` would print."""
    return echo(repr(value))


_FORMATTER = string.Formatter()


def compose(template: str, *values: str | Marked) -> Marked:
    """``template`` with each ``{}`` replaced by the next value, keeping the values' echo.

    Only bare ``{}`` slots: a format spec or conversion would change a value after
    its spans were known.
    """
    result = Marked()
    remaining = iter(values)
    for literal, field, spec, conversion in _FORMATTER.parse(template):
        result += literal
        if field is None:
            continue
        if field or spec or conversion:
            raise ValueError(f"compose() takes bare {{}} slots only, not {{{field}}}")
        result += next(remaining)
    if next(remaining, None) is not None:
        raise ValueError("compose() got more values than the template has slots")
    return result


def clipped(text: Marked, start: int, end: int) -> Marked:
    """``text.text[start:end]`` with its echo spans."""
    start, end = max(0, start), min(len(text.text), end)
    return Marked(
        text.text[start:end],
        tuple((max(a, start) - start, min(b, end) - start) for a, b in text.echo),
    )


def edited(text: Marked, edits: Iterable[tuple[int, int, str]]) -> Marked:
    """``text`` with ``(start, end, replacement)`` edits applied (non-overlapping), echo kept.

    A replacement that overlaps echo becomes echo as a whole: a secret redacted
    across the edge of an echoed value, or a fence imitation broken up there, is
    no more the cluster's than the value was.
    """
    pieces: list[str] = []
    spans: list[Span] = []
    position = 0  # in the old text
    shift = 0  # new position minus old position, for text after the last edit
    old_echo = text.echo
    moved: list[tuple[int, int, int, int]] = []  # (old start, old end, new start, new end)
    for start, end, replacement in sorted(edits):
        if start < position:
            raise ValueError("edits overlap")
        pieces += [text.text[position:start], replacement]
        new_start = start + shift
        moved.append((start, end, new_start, new_start + len(replacement)))
        shift += len(replacement) - (end - start)
        position = end
    pieces.append(text.text[position:])
    if not moved:
        return text
    for a, b in old_echo:  # a span's ends inside a replaced stretch take all of it
        spans.append((_moved(a, moved, start_of=True), _moved(b, moved, start_of=False)))
    return Marked("".join(pieces), tuple(spans))


def _moved(position: int, moved: Sequence[tuple[int, int, int, int]], *, start_of: bool) -> int:
    """Where an echo span's start (or end) lands once the edits are applied."""
    shift = 0
    for old_start, old_end, new_start, new_end in moved:
        if start_of and old_start <= position < old_end:
            return new_start  # starts inside a replaced stretch: from its beginning
        if not start_of and old_start < position <= old_end:
            return new_end  # ends inside one: to its end
        if old_end <= position if start_of else old_end < position:
            shift = new_end - old_end
        else:
            break
    return position + shift


def masked(text: str, echo: Iterable[Span]) -> str:
    """``text`` with every character in an echo span replaced by :data:`ECHO_MASK`."""
    spans = _merged(echo)
    if not spans:
        return text
    pieces: list[str] = []
    position = 0
    for start, end in spans:
        pieces += [text[position:start], ECHO_MASK * (end - start)]
        position = end
    pieces.append(text[position:])
    return "".join(pieces)
