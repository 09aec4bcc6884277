"""Checking what a verdict cites against what the lookups of the run really returned.

A model's word is not evidence. When the planner ends with ``true`` or
``false``, the engine itself checks, in every profile:

* each citation names a lookup (COMMAND step) of this run;
* at least one cited lookup succeeded;
* each excerpt occurs in the output that lookup returned to the model: the
  whole text the model was shown, not the shortened copy in the run report,
  outside every span where that output repeats the model's own arguments
  (a footer naming the namespace and selectors asked for, an error quoting a
  name: workers/engine/toolsets/echo.py). Those spans are masked before the
  search, so an excerpt lying wholly or partly in one is not found, whatever
  its case, spacing or Unicode;
  Both sides are whitespace-normalised (runs of spaces, tabs and newlines count
  as one space, so ``api 3/3`` matches the table's ``api     3/3``); case is
  kept, because ``True`` and ``true`` are different values in Kubernetes;
* each excerpt is *meaningful* (:func:`meaningful`): at least
  :data:`MIN_EXCERPT_CHARS` non-whitespace characters and at least one token
  holding a letter or a digit. A one-character excerpt (``1``, ``a``, ``:``)
  occurs in almost any output, so finding it proves nothing; three characters
  are the shortest form that still pins a value in kubectl-like output (a ready
  count ``1/3``, a name ``web``). A too-short excerpt counts as not
  verified: a repair turn, then ``cannot_determine``.

For a ``true`` of a check under ``strict`` at least one excerpt must also rest
on a structured field: it must lie within the *structured view* of a get or
describe output, which is the real output with its free-text parts withheld
(see workers/engine/toolsets/structured.py for what counts as free text).

The structured view is built by lining up the tokens of the real output with
those of the tool's structured rendering (one linear pass, see
:func:`_shared_runs`): only runs of tokens the two share are kept, everything
else becomes :data:`FREE_TEXT`. So the view holds nothing but
text the model was really shown (scrubbed and neutralised as it was), and a
run it keeps is a verbatim run of the structured rendering: free text can only
appear in the view where it equals structured text of the same object.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from schemas.actions import EvidenceRef
from schemas.report import Step
from schemas.verdict import Evidence
from workers.engine.toolsets.echo import ECHO_MASK, Span, masked
from workers.engine.toolsets.structured import FREE_TEXT

_TOKEN = re.compile(r"\S+")
MIN_EXCERPT_CHARS = 3  # non-whitespace characters an excerpt needs to be worth checking
_WORD_CHARACTER = re.compile(r"[^\W_]")  # a letter or a digit, in any script
CONTEXT_LINES = 5
_ANCHOR = 3  # tokens in a row that must agree before the two texts are lined up again
_LOOKAHEAD = 64  # tokens looked ahead, on each side, for that place


def normalise(text: str) -> str:
    """Whitespace runs as single spaces, ends trimmed: how excerpts and outputs are compared."""
    return " ".join(text.split())


def meaningful(excerpt: str) -> bool:
    """Whether ``excerpt`` is long enough to show anything: at least ``MIN_EXCERPT_CHARS``
    non-whitespace characters and one token with a letter or digit (not only ``---`` or ``:``)."""
    tokens = excerpt.split()
    return sum(map(len, tokens)) >= MIN_EXCERPT_CHARS and any(
        _WORD_CHARACTER.search(token) for token in tokens
    )


def occurs_in(excerpt: str, output: str, echo: Sequence[Span] = ()) -> bool:
    """Whether ``excerpt`` (normalised, non-empty) occurs in ``output`` (normalised) outside
    the ``echo`` spans of ``output`` (text repeating the model's arguments, masked first)."""
    wanted = normalise(excerpt)
    if not wanted or ECHO_MASK in wanted:
        return False
    return wanted in normalise(masked(output, echo))


def structured_view(seen: str, structured: str) -> str:
    """``seen`` with every part the structured rendering does not share replaced by FREE_TEXT."""
    spans = [match.span() for match in _TOKEN.finditer(seen)]
    block_of = _shared_runs(structured.split(), [seen[start:end] for start, end in spans])
    pieces: list[str] = []
    position = 0
    previous: int | None = None  # run of the last kept token; -1 after a withheld stretch
    for index, (start, end) in enumerate(spans):
        gap = seen[position:start]
        block = block_of.get(index)
        if block is not None:
            if previous is not None and previous not in (-1, block):
                pieces.append(" " + FREE_TEXT)  # the rendering has something in between
            pieces += [gap, seen[start:end]]
            previous = block
        elif previous != -1:
            pieces += [gap, FREE_TEXT]
            previous = -1
        position = end
    pieces.append(seen[position:])
    return "".join(pieces)


def _shared_runs(rendering: list[str], seen: list[str]) -> dict[int, int]:
    """Which tokens of ``seen`` belong to a run shared verbatim with ``rendering``, by run.

    Both come from the same renderer over the same objects, in the same order, so
    one pass lines them up: equal tokens advance both sides; a FREE_TEXT token of the
    rendering stands for the free text in ``seen`` up to the next place the token
    after it occurs; any other difference (a cut, a warning line) is passed by
    picking up again where ``_ANCHOR`` tokens in a row agree. Linear, unlike a full
    diff, whatever the output holds. Each run is a verbatim run of both texts, so a
    misplaced pick-up can only withhold structured text, never admit free text.
    """
    seen_at = _positions(seen, 1)
    seen_runs_at = _positions(seen, _ANCHOR)
    rendering_runs_at = _positions(rendering, _ANCHOR)
    runs: dict[int, int] = {}
    i = j = run = 0
    while i < len(rendering) and j < len(seen):
        if rendering[i] == seen[j]:
            runs[j] = run
            i, j = i + 1, j + 1
            continue
        run += 1
        after = i + 1
        if FREE_TEXT in rendering[i] and after < len(rendering):
            places = seen_at.get((rendering[after],), [])
            at = bisect_right(places, j)
            if FREE_TEXT not in rendering[after] and at < len(places):
                i, j = after, places[at]
                continue
        resumed = _resume(rendering, seen, i, j, seen_runs_at, rendering_runs_at)
        if resumed is None:
            break
        i, j = resumed
    return runs


def _positions(tokens: list[str], size: int) -> dict[tuple[str, ...], list[int]]:
    """Where each run of ``size`` tokens starts, in order."""
    found: dict[tuple[str, ...], list[int]] = {}
    for start in range(len(tokens) - size + 1):
        found.setdefault(tuple(tokens[start : start + size]), []).append(start)
    return found


def _resume(
    rendering: list[str],
    seen: list[str],
    i: int,
    j: int,
    seen_at: dict[tuple[str, ...], list[int]],
    rendering_at: dict[tuple[str, ...], list[int]],
) -> tuple[int, int] | None:
    """The nearest (i', j') at or after (i, j) where ``_ANCHOR`` tokens agree, or None."""
    best: tuple[int, int] | None = None
    for skip in range(_LOOKAHEAD):
        for side, tokens, start, other_at, other_start in (
            (0, rendering, i + skip, seen_at, j),
            (1, seen, j + skip, rendering_at, i),
        ):
            key = tuple(tokens[start : start + _ANCHOR])
            places = other_at.get(key) if len(key) == _ANCHOR else None
            if not places:
                continue
            at = bisect_left(places, other_start)
            if at == len(places):
                continue
            candidate = (start, places[at]) if side == 0 else (places[at], start)
            if best is None or sum(candidate) < sum(best):
                best = candidate
        if best is not None and sum(best) - i - j <= skip:
            return best  # nothing later in the look-ahead can be nearer
    return best


def locate(view: str, excerpt: str) -> tuple[int, int] | None:
    """First and last line of ``view`` holding ``excerpt`` within one structured run, or None."""
    wanted = normalise(excerpt)
    if not wanted or FREE_TEXT in wanted:
        return None
    characters: list[str] = []
    line_of: list[int] = []
    for number, line in enumerate(view.splitlines()):
        for token in line.split():
            if characters:
                characters.append(" ")
                line_of.append(number)
            characters.extend(token)
            line_of.extend([number] * len(token))
    text = "".join(characters)
    start = text.find(wanted)
    while start >= 0:
        if FREE_TEXT not in text[start : start + len(wanted)]:
            return line_of[start], line_of[start + len(wanted) - 1]
        start = text.find(wanted, start + 1)
    return None


def context(view: str, excerpt: str, around: int = CONTEXT_LINES) -> str:
    """The lines of ``view`` holding ``excerpt`` (marked ``=>``) and ``around`` lines each side."""
    found = locate(view, excerpt)
    if found is None:
        return ""
    lines = view.splitlines()
    first, last = found
    shown = range(max(0, first - around), min(len(lines), last + around + 1))
    return "\n".join(("=> " if first <= n <= last else "   ") + lines[n] for n in shown)


@dataclass(frozen=True)
class EvidenceCheck:
    """Every citation of a lookup with the engine's findings, and why the verdict cannot stand."""

    evidence: list[Evidence]
    problems: list[str]

    @property
    def verified(self) -> bool:
        """At least one successful lookup cited, and every excerpt found in its output."""
        return (
            not self.problems
            and any(item.ok for item in self.evidence)
            and all(item.verified for item in self.evidence)
        )


def check_evidence(
    refs: Sequence[EvidenceRef],
    steps: Sequence[Step],
    seen: Mapping[int, str],
    views: Mapping[int, str],
    *,
    echoes: Mapping[int, Sequence[Span]] | None = None,
    verdict: str,
    decisive: bool,
    needs_structure: bool,
) -> EvidenceCheck:
    """Check the citations of a DONE against the steps made before it.

    ``decisive``: a true or false, which must be earned. ``needs_structure``: the
    strict rule for a check's true. ``echoes``: per step, the spans of its seen output
    that repeat the model's own arguments (never evidence). The problems name citations
    by number and step, never by their excerpt: an excerpt is model output, and echoing
    it back would feed planted text to the model again.
    """
    evidence: list[Evidence] = []
    problems: list[str] = []
    for number, ref in enumerate(refs, start=1):
        cited = steps[ref.step] if ref.step < len(steps) else None
        if cited is None or cited.kind != "COMMAND":
            problems.append(
                f"evidence item {number} cites step {ref.step}, which is not a lookup of this run"
            )
            continue
        output = seen.get(ref.step, cited.output or "")
        view = views.get(ref.step)
        enough = meaningful(ref.excerpt)
        item = Evidence(
            step=ref.step,
            tool=cited.tool or "",
            arguments=cited.arguments,
            ok=bool(cited.ok),
            excerpt=ref.excerpt,
            verified=enough and occurs_in(ref.excerpt, output, (echoes or {}).get(ref.step, ())),
            structured=bool(enough and cited.ok and view and locate(view, ref.excerpt)),
        )
        evidence.append(item)
        if decisive and not enough:
            problems.append(
                f"evidence item {number} (step {ref.step}): its excerpt is too short to show "
                f"anything; quote at least {MIN_EXCERPT_CHARS} characters, including a word or "
                "a number, exactly as they appear between that step's fence lines (the whole "
                "line that decides is best)"
            )
        elif decisive and not item.verified:
            problems.append(
                f"evidence item {number} (step {ref.step}): its excerpt does not occur in the "
                "output of that step, outside the parts that repeat your own arguments (the "
                "namespace, names and selectors you asked for are not evidence); copy the "
                "excerpt exactly from what the cluster returned between that step's fence lines"
            )
    if decisive and not problems and not any(item.ok for item in evidence):
        problems.append(
            f"a {verdict} verdict must cite at least one lookup of this run that succeeded"
        )
    if needs_structure and not problems and not any(item.structured for item in evidence):
        problems.append(
            "under the strict profile a true verdict must rest on at least one structured "
            "field of an object returned by get or describe (a count, a status, a phase, a "
            "name, an image), not only on free text such as log lines, event messages, "
            "annotations, ConfigMap data or other prose; cite such a field exactly, or answer "
            "cannot_determine"
        )
    return EvidenceCheck(evidence, problems)
