"""Imported policies and policy sets in Redis; the only code that touches ``policy`` keys.

Key layout (``P`` = ``settings.key_prefix``)::

    P:policy:{name}          string  an ImportedPolicy (JSON)
    P:policies               zset    policy names, scored by import time (ms)
    P:policyset:{set}        set     the names of the set's policies
    P:policysets             set     set names

An import replaces each policy it stores, and, with ``--set NAME``, makes the set exactly
the policies of that import; both in one script (``policy_import.lua``), so a fleet reading
the set mid-import sees the set before or after, never half of it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from schemas.policy import (
    POLICY_NAME_PATTERN,
    ImportedPolicy,
    ImportRefusal,
    ImportReport,
    valid_set_name,
)
from workers.fleet.lua_scripts import lua_source
from workers.policy_engine.policies.documents import SourcedDocument
from workers.policy_engine.policies.importer import import_documents
from workers.policy_engine.policies.kyverno_exceptions import Acceptance

if TYPE_CHECKING:
    import redis

    from schemas.settings import AssaySettings

_NAME = re.compile(POLICY_NAME_PATTERN)
# Reads of the set names a drop makes before it gives up: each retry means another import
# or drop changed the sets between its read and its write.
DROP_ATTEMPTS = 20


class UnreadablePolicy(ValueError):
    """A stored policy that no longer validates (written by another version, or edited)."""


class PolicyStore:
    """Imported policies and sets under one key prefix."""

    def __init__(self, client: redis.Redis, *, prefix: str = "assay") -> None:
        self.client = client
        self.prefix = prefix
        self._import_script = client.register_script(lua_source("policy_import"))
        self._drop_script = client.register_script(lua_source("policy_drop"))
        self._drop_set_script = client.register_script(lua_source("policy_drop_set"))

    @classmethod
    def from_settings(cls, settings: AssaySettings, client: redis.Redis) -> PolicyStore:
        return cls(client, prefix=settings.key_prefix)

    def _key(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    @staticmethod
    def _name(name: str) -> str:
        if not _NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a policy name (a lower-case DNS name)")
        return name

    def save(self, policies: list[ImportedPolicy], policy_set: str | None = None) -> list[str]:
        """Store ``policies`` (replacing any of the same name); with ``policy_set``, the set
        becomes exactly these. Returns the names that existed before."""
        set_name = valid_set_name(policy_set) if policy_set else ""
        set_key = self._key("policyset", set_name) if set_name else ""
        score = int(max((p.imported_at.timestamp() for p in policies), default=0) * 1000)
        keys = [self._key("policies"), self._key("policysets")]
        argv: list[str | int] = [score, set_name]
        for policy in policies:
            name = self._name(policy.name)
            keys.append(self._key("policy", name))
            argv += [name, policy.model_dump_json()]
        if set_key:
            keys.append(set_key)
        replaced = self._import_script(keys=keys, args=argv)
        return [r.decode() if isinstance(r, bytes) else str(r) for r in replaced]

    def get(self, name: str) -> ImportedPolicy | None:
        raw = self.client.get(self._key("policy", self._name(name)))
        if raw is None:
            return None
        try:
            return ImportedPolicy.model_validate_json(raw)
        except ValidationError as exc:
            raise UnreadablePolicy(
                f"the stored policy {name!r} no longer reads ({exc.errors()[0]['msg']}); "
                "import it again"
            ) from None

    def many(self, names: list[str]) -> dict[str, ImportedPolicy | None]:
        """Each named policy (None for one not stored), in one round trip."""
        if not names:
            return {}
        raws = self.client.mget([self._key("policy", self._name(n)) for n in names])
        out: dict[str, ImportedPolicy | None] = {}
        for name, raw in zip(names, raws, strict=True):
            out[name] = None if raw is None else ImportedPolicy.model_validate_json(raw)
        return out

    def names(self) -> list[str]:
        names: Any = self.client.zrange(self._key("policies"), 0, -1)
        return [_text(n) for n in names]

    def set_members(self, policy_set: str) -> list[str] | None:
        """The set's policy names, sorted; None when there is no such set."""
        name = valid_set_name(policy_set)
        if not self.client.sismember(self._key("policysets"), name):
            return None
        return sorted(_text(m) for m in self.client.smembers(self._key("policyset", name)))

    def sets(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for raw in sorted(self.client.smembers(self._key("policysets"))):
            name = _text(raw)
            out[name] = sorted(_text(m) for m in self.client.smembers(self._key("policyset", name)))
        return out

    def other_sets(self, names: list[str], policy_set: str) -> dict[str, str]:
        """Each of ``names`` that a set other than ``policy_set`` holds, with that set (the
        first by name): what an import into ``policy_set`` would take from it."""
        holders: dict[str, str] = {}
        wanted = set(names)
        for name, members in self.sets().items():
            if name == policy_set:
                continue
            for member in sorted(wanted.intersection(members) - holders.keys()):
                holders[member] = name
        return holders

    def drop(self, name: str) -> bool:
        """Forget a policy (and its place in every set); False when there was none."""
        name = self._name(name)
        sets_key = self._key("policysets")
        for _ in range(DROP_ATTEMPTS):
            sets = sorted(_text(s) for s in self.client.smembers(sets_key))
            existed = int(
                self._drop_script(
                    keys=[
                        self._key("policy", name),
                        self._key("policies"),
                        sets_key,
                        *(self._key("policyset", s) for s in sets),
                    ],
                    args=[name, *sets],
                )
            )
            if existed >= 0:
                return bool(existed)
        raise RuntimeError(
            f"the policy sets kept changing while policy {name!r} was being dropped; drop it again"
        )

    def drop_set(self, policy_set: str) -> bool:
        """Forget a set (its policies stay); False when there was none."""
        name = valid_set_name(policy_set)
        keys = [self._key("policysets"), self._key("policyset", name)]
        return bool(self._drop_set_script(keys=keys, args=[name]))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def import_into(
    store: PolicyStore | None,
    documents: list[SourcedDocument],
    *,
    policy_set: str | None = None,
    dry_run: bool = False,
    exceptions_accepted: Acceptance | None = None,
) -> tuple[ImportReport, list[ImportedPolicy]]:
    """Import ``documents`` into ``store`` (nothing is stored on a dry run, or when nothing
    could be imported: a set is never emptied by an import that refused everything).

    A set is imported whole or not at all: with ``policy_set`` and any refusal, nothing is
    stored and no policy is returned (the report keeps the refusals). The set becomes
    exactly what an import stores, so a partial one would drop the refused policy from it
    (its old version still stored, no longer judged by the set's check).

    A policy another set holds is refused from a set import (:func:`taken_by_other_sets`;
    checked when ``store`` is given, a dry run included)."""
    if policy_set is not None:
        valid_set_name(policy_set)
    policies, refusals = import_documents(documents, exceptions_accepted=exceptions_accepted)
    if policy_set is not None and store is not None:
        refusals += taken_by_other_sets(store, policies, policy_set)
    if policy_set is not None and refusals:
        policies = []
    replaced: list[str] = []
    if policies and not dry_run:
        assert store is not None
        replaced = store.save(policies, policy_set)
    report = ImportReport(
        imported=[p.name for p in policies],
        replaced=replaced,
        refused=refusals,
        policy_set=policy_set if policies else None,
        dry_run=dry_run,
    )
    return report, policies


def taken_by_other_sets(
    store: PolicyStore, policies: list[ImportedPolicy], policy_set: str
) -> list[ImportRefusal]:
    """A refusal for each policy that a set other than ``policy_set`` already holds.

    Why: a policy name is one stored policy. Imported into a second set it replaced the
    first set's policy silently, so that set's check judged with the other team's rules
    from then on, and dropping either set's policy dropped both. A policy belongs to one
    set; to move it, drop it from its set first (or import it under another name)."""
    holders = store.other_sets([p.name for p in policies], policy_set)
    return [
        ImportRefusal(
            source=policy.source,
            kind=policy.format,
            name=policy.name,
            reason=f"it already belongs to policy set {holders[policy.name]!r}: import it into "
            f"that set, or drop policy:{policy.name} first to move it to {policy_set!r}",
        )
        for policy in policies
        if policy.name in holders
    ]
