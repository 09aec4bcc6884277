"""Declared checks in Redis: what `assay apply` stored for each ``kind: Check`` document.

This is the only code that touches their key::

    P:checkdefs    hash   check name -> CheckDefinition JSON (schemas/declarative.py)

A check's verdicts live in the verdict store under its check ids like any other
check's; this key only remembers what was declared, so `assay get checks` can write
it back and `assay apply` can tell a changed check from an unchanged one. Every
write is one named script that compares the stored revision first, so two applies
racing on the same check cannot silently overwrite each other: the loser is told.
"""

from __future__ import annotations

from typing import Any

from schemas.declarative import CheckDefinition

# KEYS: definitions hash.  ARGV: name, JSON, expected revision ('0' = must not exist).
# Returns 1 when written, 0 when the stored revision is not the expected one.
_PUT = """
local got = redis.call('TYPE', KEYS[1])['ok']
if got ~= 'none' and got ~= 'hash' then
  return redis.error_reply('ASSAY_CONFLICT key ' .. KEYS[1] .. ' holds a ' .. got)
end
local current = redis.call('HGET', KEYS[1], ARGV[1])
local expected = tonumber(ARGV[3])
if expected == 0 then
  if current then return 0 end
else
  if not current then return 0 end
  if tonumber(cjson.decode(current)['revision']) ~= expected then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""

# KEYS: definitions hash.  ARGV: name, expected revision.  Returns 1 when deleted.
_DELETE = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then return 0 end
if tonumber(cjson.decode(current)['revision']) ~= tonumber(ARGV[2]) then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
return 1
"""


class DefinitionConflict(RuntimeError):
    """The stored check changed since it was read (another apply got there first)."""


class CheckDefinitionStore:
    """Declared checks for one Redis and key prefix."""

    def __init__(self, redis: Any, key_prefix: str) -> None:
        self.redis = redis
        self.key = f"{key_prefix}:checkdefs"
        self._put_script = redis.register_script(_PUT)
        self._delete_script = redis.register_script(_DELETE)

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
