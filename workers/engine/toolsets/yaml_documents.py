"""YAML documents as plain Python data: PyYAML's safe loading, with a faster construction step.

Why: a snapshot is parsed by libyaml (PyYAML's ``CSafeLoader``), but turning its
nodes into dicts and lists is PyYAML's Python constructor, which handles every
YAML feature for every node (anchors shared between nodes, recursive structures,
merge keys, ``!!set``, ``!!omap``) through a generator per collection. On the example
snapshots that step is about half the time of a parse: 84 ms for 300 KB, against
46 ms with the construction below; a tiny one-Deployment folder, parsed for every
run of a fleet evaluating many clusters, went from 71 to 44 us (issue 15).

What is built directly: documents of plain mappings (string or plain-scalar keys),
sequences and scalars of the core tags (str, int, float, bool, null, timestamp,
binary), each scalar made by PyYAML's own constructor for its tag, so ``yes``,
``0x1F``, ``1e3`` and ``2001-12-14`` become what they always did. Anything else
(a merge key ``<<``, an explicit ``!!set``/``!!omap``/custom tag, a complex key,
nesting deep enough to exhaust Python's stack) hands the document to PyYAML's
constructor unchanged, which builds it or raises its own error, as before.

Only for text without aliases: an alias is the node of its anchor, met again, and
this construction copies it each time, so nine aliases of nine aliases ("billion
laughs") would be expanded here, unbounded. Text that may hold one (an ``&`` and a
``*`` anywhere) is loaded by PyYAML's constructor, and the snapshot backend then
copies its aliases within a budget.

One tag is built as the API server would give it, on both paths: an unquoted
timestamp (``creationTimestamp: 2023-06-26T15:04:05Z``, which YAML reads as a
timestamp, not a string) becomes the API's text, ``2023-06-26T15:04:05Z``, not a
Python datetime that prints as ``2023-06-26 15:04:05+00:00``: JSON has no
timestamp type, and what ``kubectl get -o yaml`` prints, quoted, is this text. An
offset is turned into UTC (``Z``), as the API prints its timestamps; fractional
seconds keep the digits written (``.5Z``, ``.123456Z``); a date alone stays as
written (``2023-06-26``). So get, describe, the structured view, probes and their
sensitivity search all read the same strings a live cluster would return.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

# libyaml is several times faster on large snapshots; fall back when PyYAML lacks it.
SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_FRACTION = re.compile(r"[0-9]:[0-9]{2}:[0-9]{2}\.([0-9]+)")


def api_timestamp(loader: Any, node: ScalarNode) -> str:
    """An unquoted YAML timestamp as the API server's text (``2023-06-26T15:04:05Z``)."""
    value = yaml.SafeLoader.construct_yaml_timestamp(loader, node)
    if not isinstance(value, datetime):
        return str(node.value)  # a date alone, as written
    if value.tzinfo is not None:
        value = value.astimezone(UTC)  # a time without an offset is UTC already (YAML)
    fraction = _FRACTION.search(node.value)
    digits = f".{fraction.group(1)}" if fraction else ""
    return f"{value:%Y-%m-%dT%H:%M:%S}{digits}Z"


_SCALAR_TAGS = ("int", "float", "bool", "null", "binary")
_SCALARS: dict[str, Callable[[Any, ScalarNode], Any]] = {
    f"tag:yaml.org,2002:{name}": yaml.SafeLoader.yaml_constructors[f"tag:yaml.org,2002:{name}"]
    for name in _SCALAR_TAGS
}
_SCALARS[_TIMESTAMP] = api_timestamp


class ApiSafeLoader(SafeLoader):
    """PyYAML's safe loader (libyaml when present), with timestamps as the API's text."""


ApiSafeLoader.add_constructor(_TIMESTAMP, api_timestamp)


class _Unusual(Exception):
    """The document uses something only PyYAML's own constructor builds."""


class _PlainLoader(ApiSafeLoader):
    """``SafeLoader`` whose documents of plain data are built without PyYAML's constructor."""

    def construct_document(self, node: Node) -> Any:
        try:
            return _plain(self, node)
        except (_Unusual, RecursionError):
            return super().construct_document(node)


def _plain(loader: Any, node: Node) -> Any:
    """``node`` as Python data, or :class:`_Unusual` (nothing is kept from a partial build)."""
    kind = node.__class__
    if kind is ScalarNode:
        tag = node.tag
        if tag == _STR:
            return node.value
        scalar = _SCALARS.get(tag)
        if scalar is None:
            raise _Unusual
        return scalar(loader, node)  # type: ignore[arg-type]
    if kind is MappingNode:
        if node.tag != _MAP:
            raise _Unusual
        built: dict[Any, Any] = {}
        for key, value in node.value:
            if key.__class__ is not ScalarNode or (key.tag != _STR and key.tag not in _SCALARS):
                raise _Unusual  # a merge key, a complex key, an explicitly tagged one
            built[_plain(loader, key)] = _plain(loader, value)
        return built
    if kind is SequenceNode:
        if node.tag != _SEQ:
            raise _Unusual
        return [_plain(loader, item) for item in node.value]
    raise _Unusual


def may_alias(text: str) -> bool:
    """Whether ``text`` can hold a YAML alias: without an anchor or an alias nothing is shared."""
    return "&" in text and "*" in text


def load_documents(text: str) -> Iterator[Any]:
    """The documents of ``text``, as ``yaml.safe_load_all`` gives them (libyaml when present),
    timestamps as the API's text.

    Raises ``yaml.YAMLError`` where PyYAML does, after yielding the documents before it.
    """
    loader = ApiSafeLoader if may_alias(text) else _PlainLoader
    documents: Iterator[Any] = yaml.load_all(text, Loader=loader)
    return documents


MAX_EXPANDED_VALUES = 1_000_000
"""Values (scalars, mappings, sequences, keys) one document read from a user's text may
stand for once its aliases are expanded: a policy file, an apply document."""


class AliasBomb(yaml.YAMLError):
    """A document whose aliases refer to themselves or expand past the limit."""


def _children(node: Node) -> list[Node]:
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, SequenceNode):
        return list(node.value)
    return []


def check_expansion(node: Node, limit: int = MAX_EXPANDED_VALUES) -> int:
    """How many values ``node`` stands for with every alias expanded; :class:`AliasBomb`
    past ``limit`` or for an alias inside its own anchor.

    Why: an alias is its anchor's node met again, so nine aliases of nine aliases ("billion
    laughs", a few hundred bytes) parse at once but every walk over the document (checking
    it, indexing its lines, turning it into JSON) takes 10^9 steps, or forever for an alias
    inside itself. Each node is sized once here (shared nodes are memoised), so the check
    costs the text's length, not the expansion's.
    """
    sizes: dict[int, int] = {}
    active: set[int] = set()
    stack: list[tuple[Node, bool]] = [(node, False)]
    while stack:
        current, children_done = stack.pop()
        key = id(current)
        if children_done:
            active.discard(key)
            size = 1 + sum(sizes[id(child)] for child in _children(current))
            if size > limit:
                raise AliasBomb(f"its aliases expand past {limit:,} values")
            sizes[key] = size
            continue
        if key in sizes:
            continue
        if key in active:
            raise AliasBomb("an alias refers to itself (it sits inside its own anchor)")
        active.add(key)
        stack.append((current, True))
        stack.extend((child, False) for child in _children(current) if id(child) not in sizes)
    return sizes[id(node)]


def load_checked(text: str, loader: Any = None) -> Iterator[Any]:
    """The documents of ``text`` as ``yaml.safe_load_all`` gives them (``loader``:
    :class:`WrittenLoader` unless given: nesting and repeated keys refused), each checked by
    :func:`check_expansion` before it is built."""
    reader = (loader or WrittenLoader)(text)
    try:
        while reader.check_node():
            node = reader.get_node()
            if node is None:
                continue
            check_expansion(node)
            yield reader.construct_document(node)
    finally:
        reader.dispose()


# --- documents people write: apply documents, policy files (CLI and HTTP) --------------------

MAX_NESTING_DEPTH = 100
"""Mappings and sequences inside one another that a document people write may hold (an
apply document, a policy file; from a file, standard input or an HTTP body).

Why a limit: PyYAML's composer, the JSON round trip of a policy and the walks over a
document recurse once or twice per level, so text nested 3,000 deep (6 KB) ended in
Python's ``RecursionError``: a traceback (exit 70) or a 500 with the connection dropped.
Why 100: Kubernetes objects people write nest about 15 deep (a Gatekeeper template's
parameter schema, a Kyverno pattern), so 100 refuses nothing real, and it stays far below
the stack that a walk of each level costs. Snapshot files (captured cluster state, which
can hold deep CRD schemas) keep libyaml's own limit of 1,000.
"""


class DocumentProblem(yaml.composer.ComposerError):
    """A document PyYAML would read but a person most likely did not mean: nested past
    :data:`MAX_NESTING_DEPTH`, or a key given twice in one mapping. Its message names keys
    and lines only, never a value of the file."""


class WrittenLoader(yaml.SafeLoader):
    """PyYAML's safe loader (the pure-Python one: it marks every node's line) for documents
    people write, refusing while it composes, before anything walks the document:

    * nesting deeper than :data:`MAX_NESTING_DEPTH` (counted as the composer descends, so
      the refusal comes long before its recursion exhausts the stack);
    * a key given twice in one mapping. PyYAML keeps the last value silently; kubectl
      refuses it, and so must we: two files concatenated without a ``---`` between them
      become one document whose second half silently replaces the first (and ``--prune``
      then deletes the object that vanished). A merge key (``<<``) is not a repeat.
    """

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0

    def _descend(self) -> None:
        self._depth += 1
        if self._depth > MAX_NESTING_DEPTH:
            raise DocumentProblem(
                None,
                None,
                f"nested deeper than {MAX_NESTING_DEPTH} levels of mappings and lists",
                self.peek_event().start_mark,
            )

    def compose_sequence_node(self, anchor: Any) -> Any:
        self._descend()
        try:
            return super().compose_sequence_node(anchor)
        finally:
            self._depth -= 1

    def compose_mapping_node(self, anchor: Any) -> Any:
        self._descend()
        try:
            node = super().compose_mapping_node(anchor)
        finally:
            self._depth -= 1
        _refuse_repeated_keys(node)
        return node


def _refuse_repeated_keys(node: MappingNode) -> None:
    seen: dict[tuple[str, str], Any] = {}
    for key, _ in node.value:
        if not isinstance(key, ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
            continue
        first = seen.get((key.tag, key.value))
        if first is not None:
            raise DocumentProblem(
                None,
                None,
                f"the key {key.value[:100]!r} is given twice in one mapping (first on line "
                f"{first.line + 1}); a file holding several documents needs '---' between them",
                key.start_mark,
            )
        seen[(key.tag, key.value)] = key.start_mark


def _json_numbers(loader: type[yaml.SafeLoader]) -> None:
    """Make ``loader`` read numbers as JSON writes them, and nothing else as a number.

    YAML 1.1 (PyYAML) reads ``5_000``, ``+5000``, ``0x1F``, ``017`` (octal) and ``1:30``
    (sexagesimal: 90) as numbers; none of them is a number in JSON or in the documentation
    (docs/apply.md), and each was a way to set a limit other than the one meant. With this
    loader they are text, which a number field refuses; ``.inf`` and ``.nan`` stay floats
    so a field refuses them for what they are.
    """
    kept = {"tag:yaml.org,2002:int", "tag:yaml.org,2002:float"}
    loader.yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag not in kept]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    loader.add_implicit_resolver(
        "tag:yaml.org,2002:int", re.compile(r"^-?(?:0|[1-9][0-9]*)$"), list("-0123456789")
    )
    loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(
            r"^(?:-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?"
            r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
        ),
        list("-+.0123456789"),
    )


class StrictNumbersLoader(WrittenLoader):
    """:class:`WrittenLoader` whose numbers are JSON's (``5_000``, ``+5000``, ``0x1F`` are
    text): the loader of `assay apply` documents, whose numbers are limits."""


_json_numbers(StrictNumbersLoader)


def nesting_depth_exceeds(value: Any, limit: int = MAX_NESTING_DEPTH) -> bool:
    """Whether parsed data (a JSON body) nests deeper than ``limit``, told without recursion."""
    pending: deque[tuple[Any, int]] = deque([(value, 1)])
    while pending:
        current, depth = pending.pop()
        children = (
            current.values()
            if isinstance(current, dict)
            else current
            if isinstance(current, list)
            else ()
        )
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > limit:
                    return True
                pending.append((child, depth + 1))
    return False


_QUOTED = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"")


def describe_yaml_error(exc: yaml.YAMLError) -> str:
    """Where and what, without any text the parser quotes from the file.

    Why: PyYAML's message prints the offending line of the file and quotes what it
    stumbled on (``the tag '!Pw-9f3kQ2x'``). In a hand-written Secret that is the password;
    for a file named by a document, the line of a file its author may not read.
    """
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if not isinstance(exc, DocumentProblem):
        problem = _QUOTED.sub("'...'", str(problem))
    return f"line {mark.line + 1}: {problem}" if mark is not None else str(problem)
