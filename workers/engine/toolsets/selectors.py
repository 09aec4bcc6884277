"""Label and field selectors, matched in Python the way the API server matches them.

The snapshot backend (and the test API server) filter objects with these, so a
selector the model writes means the same thing offline as against a live
cluster; label selectors are read and matched by ``schemas.kubernetes_metadata``.
Bad syntax raises ``BackendError("bad_request", ...)`` with the offending part, so
the model can correct itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from schemas.kubernetes_metadata import LabelSelector, SelectorError
from workers.engine.toolsets.backend import BackendError

_FIELD_REQUIREMENT = re.compile(
    r"^\s*(?P<path>[A-Za-z0-9_.\-/]+)\s*(?P<op>==|!=|=)\s*(?P<value>.*?)\s*$"
)

Matcher = Callable[[Mapping[str, Any]], bool]


def label_matcher(selector: str | None) -> Matcher:
    """A predicate on an object's ``metadata.labels``; None/empty matches everything."""
    try:
        parsed = LabelSelector.from_text(selector)
    except SelectorError as exc:
        raise BackendError(
            "bad_request",
            f"cannot parse label selector {selector!r}: {exc}; use forms like "
            "'app=web', 'tier!=db', 'env in (prod,staging)', 'env notin (dev)', 'app', '!canary'",
        ) from exc
    if parsed.empty:
        return lambda obj: True
    labels_match = parsed.matcher()

    def matches(obj: Mapping[str, Any]) -> bool:
        return labels_match((obj.get("metadata") or {}).get("labels") or {})

    return matches


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The string form of a dotted field, "" when absent (the API server's convention)."""
    current: Any = obj
    for part in path.split("."):
        if isinstance(current, Mapping) and part in current:
            current = current[part]
        else:
            return ""
    if current is None:
        return ""
    if isinstance(current, bool):
        return "true" if current else "false"
    if isinstance(current, (dict, list)):
        return ""
    return str(current)


def field_matcher(selector: str | None) -> Matcher:
    """A predicate for ``metadata.name=x,status.phase!=Running`` and any dotted path."""
    if not selector or not selector.strip():
        return lambda obj: True
    requirements: list[tuple[str, bool, str]] = []
    for part in selector.split(","):
        if not part.strip():
            continue
        match = _FIELD_REQUIREMENT.match(part)
        if not match:
            raise BackendError(
                "bad_request",
                f"cannot parse field selector part {part.strip()!r}; use forms like "
                "'metadata.name=web', 'status.phase!=Running', 'spec.nodeName=node-1'",
            )
        requirements.append((match["path"], match["op"] != "!=", match["value"]))

    def matches(obj: Mapping[str, Any]) -> bool:
        return all(
            (field_value(obj, path) == value) == equal for path, equal, value in requirements
        )

    return matches
