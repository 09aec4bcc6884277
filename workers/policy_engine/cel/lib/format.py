"""Kubernetes' format library (1.31+): named string formats and their validation.

``format.dns1123Label()`` (and the other named formats below) gives a Format;
``format.named(name)`` gives an optional Format (none for an unknown name);
``<Format>.validate(s)`` gives ``optional.none()`` when ``s`` is valid, else an optional
holding the list of what is wrong with it. Named formats: ``dns1123Label``,
``dns1123Subdomain``, ``dns1035Label``, ``qualifiedName``, ``dns1123LabelPrefix``,
``dns1123SubdomainPrefix``, ``dns1035LabelPrefix``, ``labelValue``, ``uri``, ``uuid``,
``byte``, ``date``, ``datetime``.

The runtime's Python functions cannot return optional values, so the two optional-valued
calls are rewritten (the adapter applies :data:`REWRITES` before compiling) to functions
returning a list of at most one element, read with CEL's optional index ``[?0]``, which
gives ``optional.none()`` on an empty list and ``optional.of(e)`` on ``[e]``:

* ``f.validate(s)`` is ``f.assay_format_validate(s)[?0]``: ``[]`` when valid, ``[errors]``
  otherwise; exactly ``validate``'s none / of(errors). ``validate`` is a function of this
  library only, so every member call of that name is one.
* ``format.named(n)`` is ``assay_format_named(n)[?0]``: ``[]`` for an unknown name, else
  ``[the format]``.

Each validation reports the same conditions as the API server's (a name too long and one
of the wrong characters are two errors), in this library's own words.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from schemas.kubernetes_metadata import (
    dns1035_label_errors,
    dns1123_label_errors,
    dns1123_subdomain_errors,
    label_value_errors,
    qualified_name_errors,
)
from workers.policy_engine.cel.lib import url
from workers.policy_engine.cel.lib.base import (
    CelLibraryError,
    Overload,
    loops,
    opaque,
    unwrap,
)
from workers.policy_engine.cel.lib.rewrite import CallRewrite
from workers.policy_engine.cel.syntax.nodes import Call, Index, Literal, Node

KIND = "format"
VALIDATE = "assay_format_validate"
NAMED = "assay_format_named"
_UUID = re.compile(r"^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$", re.I)
_DATETIME = re.compile(
    r"^(\d{4}-\d{2}-\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$"
)


def _prefix(check: Callable[[str], list[str]]) -> Callable[[str], list[str]]:
    """A name prefix (``generateName``): a trailing '-' is allowed, as the API server
    allows it by masking the end of the name before checking it."""

    def prefixed(value: str) -> list[str]:
        if len(value) > 1 and value.endswith("-"):
            value = value[:-2] + "a"
        return check(value)

    return prefixed


def uri(value: str) -> list[str]:
    return [] if url.is_url(value) else ["must be an absolute URI or an absolute path"]


def uuid(value: str) -> list[str]:
    return [] if _UUID.match(value) else ["does not match the UUID format"]


def byte(value: str) -> list[str]:
    try:
        base64.b64decode(value.replace("\r", "").replace("\n", ""), validate=True)
    except (binascii.Error, ValueError):
        return ["invalid base64"]
    return []


def _is_date(value: str) -> bool:
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        return False
    try:
        datetime.date.fromisoformat(value)
    except ValueError:
        return False
    return True


def date(value: str) -> list[str]:
    return [] if _is_date(value) else ["invalid date"]


def date_time(value: str) -> list[str]:
    match = _DATETIME.match(value)
    valid = (
        match is not None
        and _is_date(match.group(1))
        and int(match.group(2)) < 24
        and int(match.group(3)) < 60
        and int(match.group(4)) < 60
    )
    return [] if valid else ["invalid datetime"]


FORMATS: dict[str, Callable[[str], list[str]]] = {
    "dns1123Label": dns1123_label_errors,
    "dns1123Subdomain": dns1123_subdomain_errors,
    "dns1035Label": dns1035_label_errors,
    "qualifiedName": qualified_name_errors,
    "dns1123LabelPrefix": _prefix(dns1123_label_errors),
    "dns1123SubdomainPrefix": _prefix(dns1123_subdomain_errors),
    "dns1035LabelPrefix": _prefix(dns1035_label_errors),
    "labelValue": label_value_errors,
    "uri": uri,
    "uuid": uuid,
    "byte": byte,
    "date": date,
    "datetime": date_time,
}


def _format(name: str) -> Callable[[], dict[str, Any]]:
    return lambda: opaque(KIND, name=name)


def named(name: str) -> list[dict[str, Any]]:
    """``format.named(name)`` as a list of at most one format (read with ``[?0]``)."""
    return [opaque(KIND, name=name)] if name in FORMATS else []


def validate(value: Any, text: str) -> list[list[str]]:
    """``<Format>.validate(text)`` as ``[]`` (valid) or ``[errors]`` (read with ``[?0]``)."""
    check = FORMATS.get(str(unwrap(value, KIND)["name"]))
    if check is None:
        raise CelLibraryError("no such format")
    errors = check(text)
    return [errors] if errors else []


def _first(call: Node) -> Node:
    """``call[?0]``: none for an empty list, the element of a one-element list."""
    return Index(call, Literal(0, "int"), optional=True)


REWRITES = [
    CallRewrite("validate", True, lambda call: _first(replace(call, function=VALIDATE)),
                introduces=VALIDATE),
    CallRewrite("format.named", False, lambda call: _first(Call(NAMED, call.args, at=call.at)),
                introduces=NAMED),
]  # fmt: skip
OVERLOADS = [
    Overload(f"format.{name}", f"format_{name}", (), KIND, _format(name)) for name in FORMATS
] + [
    Overload(NAMED, "assay_format_named_string", ("string",), "list", named),
    # each format's checks are Python over the text (a regular expression, a URL's parse)
    Overload(
        VALIDATE, "assay_format_validate_string", (KIND, "string"), "list", validate, True, loops
    ),
]
