"""Which parts of a get / describe output are structured fields, and which are free text.

Anyone who can write to a cluster can write prose into it: a log line, an event
message, an annotation, a ConfigMap value, a long string in a custom resource.
Prose is where planted instructions live, so under the ``strict`` profile a
``true`` must rest on at least one *structured* field (a replica count, a phase,
an image, a condition's status), and the fresh-context confirmation is shown
structured fields only.

The get and describe tools can render what they returned a second time, with
every free-text value replaced by :data:`FREE_TEXT` (the *structured
rendering*): ``ToolResult.meta["structured"]`` is a function producing it,
called only by runs that need it (strict checks), so other runs pay nothing.
The renderer is the same, so every structured line reads the same in both; the
engine lines the two up token by token (workers/engine/evidence.py) and keeps only the
text of the real output that the structured rendering shares.

Free text, wherever it sits in an object:

* every value under ``annotations``; every value of a ConfigMap's or Secret's
  ``data`` / ``binaryData`` / ``stringData``;
* every value of a field named ``message``, ``note`` or ``description``
  (condition and container-state messages, event messages);
* any string that is not token-like: one holding whitespace, a quote, a
  backtick, a bracket or brace, ``<``, ``>``, ``|``, ``;`` or a backslash, or
  longer than 253 characters (the longest Kubernetes name);
* a map key of that kind (its entry stays, under the key ``<free-text-withheld>-N``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from workers.engine.toolsets.compaction import render_object
from workers.engine.toolsets.tables import Column, render_table

FREE_TEXT = "<free-text-withheld>"  # one token: the engine lines renderings up by tokens
META_KEY = "structured"
MAX_TOKEN_CHARS = 253
_FREE_TEXT_MAPS = frozenset({"annotations"})
_FREE_TEXT_FIELDS = frozenset({"message", "note", "description"})
_DATA_KINDS = frozenset({"ConfigMap", "Secret"})
_DATA_FIELDS = frozenset({"data", "binaryData", "stringData"})
_TOKEN = re.compile(r"[A-Za-z0-9._:/@+=,%*#~^?!$&()\-]*")
_NO_LIMIT = 10**9


def is_free_text(value: str) -> bool:
    """Whether a string is prose rather than a token-like value (name, image, quantity, time)."""
    return len(value) > MAX_TOKEN_CHARS or _TOKEN.fullmatch(value) is None


def withhold_free_text(value: Any) -> Any:
    """A copy of ``value`` (an object, or any JSON-like value) with free text replaced."""
    if isinstance(value, Mapping):
        data_kind = value.get("kind") in _DATA_KINDS
        return {
            _safe_key(key, index): _withhold(
                child, opaque=(data_kind and key in _DATA_FIELDS) or _opaque_under(key)
            )
            for index, (key, child) in enumerate(value.items())
        }
    return _withhold(value, opaque=False)


def _opaque_under(key: Any) -> bool:
    return key in _FREE_TEXT_MAPS or key in _FREE_TEXT_FIELDS


def _safe_key(key: Any, index: int) -> Any:
    if isinstance(key, str) and is_free_text(key):
        return f"{FREE_TEXT}-{index}"
    return key


def _withhold(value: Any, *, opaque: bool) -> Any:
    if isinstance(value, Mapping):
        return {
            _safe_key(key, index): _withhold(child, opaque=opaque or _opaque_under(key))
            for index, (key, child) in enumerate(value.items())
        }
    if isinstance(value, list):
        return [_withhold(item, opaque=opaque) for item in value]
    if isinstance(value, str):
        return FREE_TEXT if opaque or is_free_text(value) else value
    if opaque and value is not None:
        return FREE_TEXT
    return value


def object_rendering(obj: Mapping[str, Any]) -> str:
    """The structured rendering of one object: as ``render_object``, free text withheld."""
    return render_object(withhold_free_text(obj))


def table_rendering(
    objects: Iterable[Mapping[str, Any]],
    kind: str,
    *,
    with_namespace: bool,
    columns: list[Column] | None = None,
    footer: Callable[[int], str] | None = None,
) -> str:
    """The structured rendering of a table: the same columns over the withheld objects."""
    withheld = [withhold_free_text(obj) for obj in objects]
    table = render_table(
        withheld,
        kind,
        limit_chars=_NO_LIMIT,
        with_namespace=with_namespace,
        columns=columns,
        footer=footer,
    )
    return table.text


class FirstObjects:
    """Passes a stream of objects through, keeping the first ``keep`` of them.

    A table shows its first rows and only counts the rest, so the objects a
    table showed are the first ones of the stream: those are the ones whose
    structured rendering is needed, without holding a 20,000-pod listing.
    """

    def __init__(self, objects: Iterable[Mapping[str, Any]], keep: int) -> None:
        self._objects = objects
        self._keep = keep
        self.kept: list[Mapping[str, Any]] = []

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        for obj in self._objects:
            if len(self.kept) < self._keep:
                self.kept.append(obj)
            yield obj
