"""Policy files as documents: YAML or JSON, several documents a file, ``List`` kinds welcome.

Each document keeps the file it came from (``-`` for standard input), so a refusal names it.
Values are made plain JSON (a YAML date becomes its text), as they are stored and bound to
CEL as such.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from workers.engine.toolsets.yaml_documents import describe_yaml_error, load_checked
from workers.engine.user_files import UnreadableUserFile, read_user_file

MAX_FILE_BYTES = 4 * 1024 * 1024


class UnreadableFile(ValueError):
    """A policy file that could not be read or parsed; the message names it."""


@dataclass(frozen=True)
class SourcedDocument:
    source: str
    document: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.document.get("kind") or "")

    @property
    def api_group(self) -> str:
        api_version = str(self.document.get("apiVersion") or "")
        return api_version.rpartition("/")[0]


def name_of(document: dict[str, Any] | None) -> str:
    meta = (document or {}).get("metadata")
    return str(meta.get("name") or "") if isinstance(meta, dict) else ""


def namespace_of(document: dict[str, Any] | None) -> str | None:
    """The namespace the document names (as written: ``""`` stays ``""``); None for none."""
    meta = (document or {}).get("metadata")
    namespace = meta.get("namespace") if isinstance(meta, dict) else None
    return namespace if isinstance(namespace, str) else None


def documents_from_text(text: str, source: str) -> list[SourcedDocument]:
    """Every object document of ``text`` (YAML or JSON), ``List`` items unpacked."""
    try:  # aliases, nesting and repeated keys checked (yaml_documents.WrittenLoader)
        loaded = list(load_checked(text))
    except yaml.YAMLError as exc:  # where and what, never the file's line (it may be a secret)
        raise UnreadableFile(f"{source} is not YAML or JSON: {describe_yaml_error(exc)}") from None
    out: list[SourcedDocument] = []
    for document in _unpacked(loaded):
        plain = json.loads(json.dumps(document, default=str))
        out.append(SourcedDocument(source, plain))
    return out


def _unpacked(documents: Iterable[Any]) -> Iterable[dict[str, Any]]:
    for document in documents:
        if not isinstance(document, dict):
            continue  # an empty document (a trailing ---) or a bare scalar
        if str(document.get("kind", "")).endswith("List") and isinstance(
            document.get("items"), list
        ):
            yield from _unpacked(document["items"])
        else:
            yield document


def read_files(paths: Iterable[str | Path]) -> list[SourcedDocument]:
    """The documents of every file, in order; UnreadableFile for the first that fails."""
    out: list[SourcedDocument] = []
    for path in paths:
        try:  # a regular file under the size limit: not /dev/zero, not a FIFO
            text = read_user_file(Path(path), limit=MAX_FILE_BYTES)
        except UnreadableUserFile as exc:
            raise UnreadableFile(str(exc)) from None
        out.extend(documents_from_text(text, str(path)))
    return out
