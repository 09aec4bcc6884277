"""What one schedule fire evaluates: its targets, resolved now, and one request each.

Globs (kubeconfig contexts, snapshot folders) are expanded at fire time, so a
cluster added later is included without touching the schedule; snapshot matches
outside this replica's snapshot roots are skipped (workers/engine/snapshot_roots.py).
Every request's run id is derived from (schedule id, target, scheduled instant), so a fire that
two replicas both claim produces the same run ids and the verdict store's
first-verdict-wins rule records it once.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from schemas.request import ContextTarget, EvaluationRequest, SnapshotTarget, Target
from schemas.schedule import Schedule, ScheduleTargets
from schemas.settings import AssaySettings
from workers.engine.snapshot_roots import SnapshotOutsideRoots, SnapshotRoots
from workers.fleet.targets import TargetGlobError, context_targets, snapshot_targets

_GLOB_CHARS = set("*?[")


class TargetResolutionError(RuntimeError):
    """The schedule's targets could not be listed (e.g. the kubeconfig is unreadable)."""


def target_key(target: Target) -> str:
    """What tells two targets apart (two snapshot folders may share a base name)."""
    if isinstance(target, SnapshotTarget):
        return f"snapshot:{target.path}"
    return target.name


def fire_run_id(schedule_id: str, target: Target, scheduled_at: datetime) -> str:
    """The deterministic run id of one target's evaluation in one fire."""
    instant = scheduled_at.astimezone(UTC)
    stamp = instant.strftime("%Y%m%dT%H%M%S") + f".{instant.microsecond // 1000:03d}Z"
    target_hash = hashlib.sha256(target_key(target).encode()).hexdigest()[:10]
    return f"{schedule_id}.{stamp}.{target_hash}"


def resolve_targets(targets: ScheduleTargets, settings: AssaySettings) -> list[Target]:
    """The concrete targets of a fire, in a stable order, without duplicates.

    Globs are expanded with the fleet's own expanders (``workers.fleet.targets``), so
    a schedule and a batch over the same glob see the same targets.
    """

    resolved: list[Target] = []
    try:
        if targets.contexts:
            resolved = [
                ContextTarget(context=name, kubeconfig=targets.kubeconfig)
                for name in targets.contexts
            ]
        elif targets.context_glob is not None:
            kubeconfig = targets.kubeconfig or settings.kubeconfig
            resolved = sorted(
                context_targets(targets.context_glob, kubeconfig), key=lambda t: t.name
            )
        else:
            roots = SnapshotRoots.for_local(settings)
            for pattern in targets.snapshots:
                try:
                    found = sorted(snapshot_targets(pattern, roots), key=lambda t: t.path)
                except SnapshotOutsideRoots:  # the roots changed since: the worker says so
                    found = []
                if not found and not _GLOB_CHARS & set(pattern):
                    found = [SnapshotTarget(path=pattern)]  # missing or refused: ends as 3
                resolved.extend(found)
    except TargetGlobError as exc:
        raise TargetResolutionError(str(exc)) from exc
    unique: dict[str, Target] = {}
    for target in resolved:
        unique.setdefault(target_key(target), target)
    return list(unique.values())


def build_requests(
    schedule: Schedule, scheduled_at: datetime, targets: list[Target]
) -> list[EvaluationRequest]:
    """One evaluation request per target for the fire of ``scheduled_at``."""
    return [
        EvaluationRequest(
            kind=schedule.kind,
            text=schedule.predicate,
            target=target,
            profile=schedule.profile,
            budget=schedule.budget,
            model=schedule.model,
            probe=schedule.probe,
            run_id=fire_run_id(schedule.id, target, scheduled_at),
            schedule_id=schedule.id,
            notify=schedule.notify,
            declared_by=f"schedule/{schedule.name}",
            scheduled_at=scheduled_at.astimezone(UTC),
        )
        for target in targets
    ]
