"""Declared checks in Redis: what `assay apply` stored for each ``kind: Check`` document.

This is the only code that touches their key::

    P:checkdefs    hash   check name -> CheckDefinition JSON (schemas/declarative.py)

A check's verdicts live in the verdict store under its check ids like any other
check's; this key only remembers what was declared, so `assay get checks` can write
it back and `assay apply` can tell a changed check from an unchanged one. Every
write is one script (``checkdef_put.lua``, ``checkdef_delete.lua``) that compares the
stored revision first, so two applies racing on the same check cannot silently
overwrite each other: the loser is told.
"""

from __future__ import annotations

from typing import Any

from schemas.declarative import CheckDefinition
from workers.fleet.lua_scripts import lua_source


class DefinitionConflict(RuntimeError):
    """The stored check changed since it was read (another apply got there first)."""


class CheckDefinitionStore:
    """Declared checks for one Redis and key prefix."""

    def __init__(self, redis: Any, key_prefix: str) -> None:
        self.redis = redis
        self.key = f"{key_prefix}:checkdefs"
        self._put_script = redis.register_script(lua_source("checkdef_put"))
        self._delete_script = redis.register_script(lua_source("checkdef_delete"))

    def all(self) -> list[CheckDefinition]:
        bodies = self.redis.hgetall(self.key)
        found = [CheckDefinition.model_validate_json(body) for body in bodies.values()]
        return sorted(found, key=lambda d: d.name)

    def get(self, name: str) -> CheckDefinition | None:
        body = self.redis.hget(self.key, name)
        return CheckDefinition.model_validate_json(body) if body is not None else None

    def put(self, definition: CheckDefinition, expected_revision: int) -> None:
        """Write ``definition``; ``expected_revision`` 0 means it must be new."""
        written = self._put_script(
            keys=[self.key],
            args=[definition.name, definition.model_dump_json(), expected_revision],
        )
        if not int(written):
            raise DefinitionConflict(
                f"check {definition.name!r} changed while it was being applied; apply again"
            )

    def delete(self, definition: CheckDefinition) -> None:
        deleted = self._delete_script(keys=[self.key], args=[definition.name, definition.revision])
        if not int(deleted):
            raise DefinitionConflict(
                f"check {definition.name!r} changed while it was being pruned; apply again"
            )
