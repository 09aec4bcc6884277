"""Which checks a report still shows: those whose declaration, policy or set is still stored.

A verdict stays in the store after what produced it is gone: a Check that `assay apply
--prune` removed, a deleted schedule, a policy `assay probe drop` forgot, a policy set
dropped or re-imported without a member. Reports follow what is stored, as Kyverno's
follow the policies a cluster holds, so a check is reported only while

* its run was declared by ``check/NAME``: that Check is still stored, evaluates the same
  predicate, and still has this target;
* its run was declared by ``schedule/NAME``: that schedule (by id) is still stored, under
  that name, with the same predicate;
* it is ``policy:NAME``: the policy is still stored, and when the run was one policy of a
  set run, the set still exists and still holds it;
* it is ``policy-set:NAME``: the set still exists.

A check submitted on its own (``assay check``/``submit``/``batch``) has no declaration and
stays. Lookups are read once per report build and cached here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from schemas.policy import POLICY_SET_PREFIX, ImportedPolicy, policy_reference
from schemas.probe import normalised_predicate

if TYPE_CHECKING:
    from schemas.declarative import CheckDefinition
    from schemas.report import RunReport
    from schemas.schedule import Schedule
    from workers.fleet.store import VerdictStore


class StoredDeclarations:
    """What the store declares now: checks, schedules, policies and sets (read lazily)."""

    def __init__(self, store: VerdictStore) -> None:
        from scheduler.schedules import ScheduleStore
        from workers.fleet.check_definitions import CheckDefinitionStore
        from workers.fleet.policy_store import PolicyStore

        self._checks_store = CheckDefinitionStore(store.client, store.prefix)
        self._schedule_store = ScheduleStore(store.client, store.prefix, 0.0)
        self._policy_store = PolicyStore(store.client, prefix=store.prefix)
        self._checks: dict[str, CheckDefinition] | None = None
        self._sets: dict[str, list[str]] | None = None
        self._schedules: dict[str, Schedule | None] = {}
        self._policies: dict[str, ImportedPolicy | None] = {}

    def policy(self, name: str) -> ImportedPolicy | None:
        """The stored policy ``name`` (None: not stored, or stored unreadably)."""
        from workers.fleet.policy_store import UnreadablePolicy

        if name not in self._policies:
            try:
                self._policies[name] = self._policy_store.get(name)
            except (UnreadablePolicy, ValueError):
                self._policies[name] = None
        return self._policies[name]

    def labels(self, report: RunReport) -> dict[str, str]:
        """The labels of the Check or Schedule that declared the run (empty: none)."""
        declared = report.request.declared_by or ""
        kind, _, name = declared.partition("/")
        if kind == "check":
            definition = self._definitions().get(name)
            return dict(definition.labels) if definition is not None else {}
        if kind == "schedule":
            schedule = self._schedule(report.request.schedule_id)
            return dict(schedule.labels) if schedule is not None else {}
        return {}

    def in_effect(self, report: RunReport) -> bool:
        """Whether the check ``report`` is the latest run of is still declared (above)."""
        request = report.request
        declared_text = request.text
        member_of = report.policy.policy_set if report.policy is not None else None
        if member_of is not None:  # one policy of a set's run: the set is what was declared
            declared_text = POLICY_SET_PREFIX + member_of
        if not self._policy_stored(request.text, member_of):
            return False
        kind, _, name = (request.declared_by or "").partition("/")
        if kind == "check":
            definition = self._definitions().get(name)
            if definition is None or request.target.name not in definition.check_ids:
                return False
            if member_of is None and definition.check_ids[request.target.name] != report.check_id:
                return False
            return _same(definition.spec.predicate or "", declared_text)
        if kind == "schedule":
            schedule = self._schedule(request.schedule_id)
            return (
                schedule is not None
                and schedule.name == name
                and _same(schedule.predicate, declared_text)
            )
        return True

    def _policy_stored(self, text: str, member_of: str | None) -> bool:
        ref = policy_reference(text)
        if ref is None:
            return True
        if ref.kind == "set":
            return ref.name in self._policy_sets()
        if self.policy(ref.name) is None:
            return False
        return member_of is None or ref.name in self._policy_sets().get(member_of, [])

    def _definitions(self) -> dict[str, CheckDefinition]:
        if self._checks is None:
            self._checks = {d.name: d for d in self._checks_store.all()}
        return self._checks

    def _policy_sets(self) -> dict[str, list[str]]:
        if self._sets is None:
            self._sets = self._policy_store.sets()
        return self._sets

    def _schedule(self, schedule_id: str | None) -> Schedule | None:
        if schedule_id is None:
            return None
        if schedule_id not in self._schedules:
            self._schedules[schedule_id] = self._schedule_store.find(schedule_id)
        return self._schedules[schedule_id]


def _same(a: str, b: str) -> bool:
    return normalised_predicate(a) == normalised_predicate(b)
