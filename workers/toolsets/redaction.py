"""Keeping Secret values inside the toolset.

Applied by a backend the moment an object is read, before any tool, log line
or cache sees it:

* every value under a Secret's ``data`` / ``stringData`` becomes ``REDACTED``
  (keys stay: "the Secret has a key tls.key" is a legitimate fact);
* the ``kubectl.kubernetes.io/last-applied-configuration`` annotation is
  dropped from every object, since for a Secret it embeds the whole manifest;
* :class:`SecretScrubber` then removes copies of those values that leaked
  elsewhere (a Deployment env literal, a log line printing a password).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable
from typing import Any

from workers.toolsets.backend import REDACTED

LAST_APPLIED_ANNOTATIONS = frozenset({"kubectl.kubernetes.io/last-applied-configuration"})
SECRET_VALUE_FIELDS = ("data", "stringData")
# Shorter values ("true", "admin") are too common to scrub from other text without
# mangling it; the Secret itself is always redacted regardless of length.
MIN_SCRUB_LENGTH = 8


def drop_last_applied(obj: dict[str, Any]) -> None:
    annotations = (obj.get("metadata") or {}).get("annotations")
    if isinstance(annotations, dict):
        for key in LAST_APPLIED_ANNOTATIONS & annotations.keys():
            del annotations[key]


def _decoded(value: str) -> str | None:
    try:
        return base64.b64decode(value, validate=True).decode("utf-8").strip()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None


def redact_in_place(obj: dict[str, Any]) -> list[str]:
    """Redact one object; returns the Secret values removed (raw and base64-decoded)."""
    drop_last_applied(obj)
    if obj.get("kind") != "Secret":
        return []
    removed: list[str] = []
    for field in SECRET_VALUE_FIELDS:
        values = obj.get(field)
        if not isinstance(values, dict):
            if values is not None:
                obj[field] = REDACTED
            continue
        for key, value in values.items():
            if isinstance(value, str):
                removed.append(value.strip())
                if field == "data" and (decoded := _decoded(value)):
                    removed.append(decoded)
            values[key] = REDACTED
    return removed


class SecretScrubber:
    """Replaces known Secret values wherever else they appear."""

    def __init__(self, secret_values: Iterable[str]) -> None:
        values = sorted(
            {v for v in secret_values if len(v) >= MIN_SCRUB_LENGTH}, key=len, reverse=True
        )
        self._pattern = re.compile("|".join(re.escape(v) for v in values)) if values else None

    def text(self, text: str) -> str:
        if self._pattern is None:
            return text
        return self._pattern.sub(REDACTED, text)

    def in_place(self, value: Any) -> Any:
        """Scrub every string inside a JSON-like value; returns the (possibly new) value."""
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            for key, item in value.items():
                value[key] = self.in_place(item)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                value[index] = self.in_place(item)
        return value
