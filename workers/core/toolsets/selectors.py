"""Label and field selectors, matched in Python the way the API server matches them.

The snapshot backend (and the test API server) filter objects with these, so a
selector the model writes means the same thing offline as against a live
cluster. Bad syntax raises ``BackendError("bad_request", ...)`` with the
offending part, so the model can correct itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from workers.core.toolsets.backend import BackendError

_LABEL_KEY = r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_LABEL_VALUE = r"(?:[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET_REQUIREMENT = re.compile(
    rf"^\s*(?P<key>{_LABEL_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)\s*$"
)
_EQUALITY_REQUIREMENT = re.compile(
    rf"^\s*(?P<key>{_LABEL_KEY})\s*(?P<op>==|!=|=)\s*(?P<value>{_LABEL_VALUE})\s*$"
)
_EXISTS_REQUIREMENT = re.compile(rf"^\s*(?P<neg>!?)\s*(?P<key>{_LABEL_KEY})\s*$")
_FIELD_REQUIREMENT = re.compile(
    r"^\s*(?P<path>[A-Za-z0-9_.\-/]+)\s*(?P<op>==|!=|=)\s*(?P<value>.*?)\s*$"
)

Matcher = Callable[[Mapping[str, Any]], bool]


@dataclass(frozen=True)
class _LabelRequirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and labels[self.key] in self.values
        # "!=" and "notin" match objects without the label, as the API server does
        return not present or labels[self.key] not in self.values


def _split_top_level(selector: str) -> list[str]:
    """Split on commas that are not inside ``in (a,b)`` parentheses."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [part for part in parts if part.strip()]


def _parse_label_requirement(text: str) -> _LabelRequirement:
    if match := _SET_REQUIREMENT.match(text):
        values = frozenset(v.strip() for v in match["values"].split(",") if v.strip())
        return _LabelRequirement(match["key"], match["op"], values)
    if match := _EQUALITY_REQUIREMENT.match(text):
        op = "=" if match["op"] in ("=", "==") else "!="
        return _LabelRequirement(match["key"], op, frozenset({match["value"]}))
    if match := _EXISTS_REQUIREMENT.match(text):
        return _LabelRequirement(match["key"], "!exists" if match["neg"] else "exists")
    raise BackendError(
        "bad_request",
        f"cannot parse label selector part {text.strip()!r}; use forms like "
        "'app=web', 'tier!=db', 'env in (prod,staging)', 'env notin (dev)', 'app', '!canary'",
    )


def label_matcher(selector: str | None) -> Matcher:
    """A predicate on an object's ``metadata.labels``; None/empty matches everything."""
    if not selector or not selector.strip():
        return lambda obj: True
    requirements = [_parse_label_requirement(part) for part in _split_top_level(selector)]

    def matches(obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(req.matches(labels) for req in requirements)

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
