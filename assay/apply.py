"""`assay apply`: make the stored checks and schedules what a set of files declares.

The CLI (`assay apply -f`) and the API (``POST /v1/apply``) both call :func:`apply`.
It works in two steps, so a bad set of files changes nothing:

1. **Plan.** Every document is turned into the object it declares (snapshot globs
   confined to the snapshot roots and matching something, the interval floor, the
   model, the notify routes, the check's targets resolved) and compared with what is
   stored. Every problem is collected with its file, line and field; if there is one,
   :class:`~assay.manifests.ManifestErrors` is raised and nothing is written.
2. **Apply** (skipped by ``dry_run``): create, change or, with ``prune``, delete.

Each object is ``created``, ``configured`` or ``unchanged`` (or ``pruned``), and the
plan carries a unified diff of the object as stored and as declared, both rendered
by the same functions `assay get -o yaml` uses (:func:`schedule_document`,
:func:`check_document`): applying what `get` wrote changes nothing.

Ownership: an object `assay apply` creates carries the label ``assay.dev/source``
with the apply's source. ``prune`` deletes only objects with that label and that
value which the files no longer hold. An object created by another source is
refused (apply it from its own source); one made without apply (`assay schedule
add`) may be changed by apply but never gets the label, so it is never pruned.

A ``Check`` is evaluated once on each of its targets (resolved now: a glob is
expanded when applied) each time applying it creates or changes it; its verdicts
are kept under check id ``NAME`` (one target) or ``NAME.TARGET`` (several).
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import ValidationError

from assay.manifests import Loaded, Loc, ManifestErrors, ManifestProblem
from assay.terminal_text import hides
from scheduler.fires import TargetResolutionError, resolve_targets, target_key
from scheduler.schedules import ScheduleConflict
from schemas.declarative import (
    API_VERSION,
    MAX_SOURCE_LENGTH,
    SCHEDULE_SPEC_LOCS,
    SOURCE_LABEL,
    BudgetSpec,
    CheckDefinition,
    CheckDocument,
    CheckSpec,
    PolicySpec,
    ScheduleDocument,
    ScheduleSpec,
    TargetsSpec,
    schedule_fields,
    schedule_spec,
)
from schemas.kubernetes_metadata import label_value_errors
from schemas.policy import POLICY_PREFIX, POLICY_SET_PREFIX, PolicyReference, policy_reference
from schemas.request import EvaluationRequest, Target
from schemas.schedule import CHANGEABLE_FIELDS, Schedule

if TYPE_CHECKING:
    from scheduler.schedules import ScheduleStore
    from schemas.policy import ImportedPolicy
    from schemas.settings import AssaySettings
    from workers.fleet.check_definitions import CheckDefinitionStore
    from workers.fleet.policy_store import PolicyStore

Action = Literal["created", "configured", "unchanged", "pruned"]


class SourceError(ValueError):
    """A source name that cannot be a label value."""


def source_name(text: str) -> str:
    """``text`` if it can be the ``assay.dev/source`` label, else :class:`SourceError`."""
    if not text or len(text) > MAX_SOURCE_LENGTH or label_value_errors(text):
        raise SourceError(
            f"source {text!r} cannot be a label value: use 1 to {MAX_SOURCE_LENGTH} characters "
            "from A-Z a-z 0-9 . _ -, starting and ending with a letter or digit"
        )
    return text


def default_source(paths: Sequence[str]) -> str:
    """The source of an apply that names none: its one path as a label value (``-``: stdin)."""
    if len(paths) != 1:
        raise SourceError("several -f paths need one --source NAME that names them together")
    raw = paths[0]
    if raw == "-":
        return "stdin"
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", raw).strip("-._")[-MAX_SOURCE_LENGTH:]
    return source_name(slug.strip("-._") or "files")


NO_MODEL = (
    "no model is configured for the fleet: its {workers} worker(s) run without ASSAY_MODEL, "
    "so every run of this object would end cannot_determine; give spec.model, or restart the "
    "workers with ASSAY_MODEL set"
)


ModelProblem = tuple[str, str]
"""Why no worker could run a model: (the API's error code, one sentence)."""


def fleet_model_refusal(
    model: str | None, *, redis: Any, settings: AssaySettings
) -> ModelProblem | None:
    """Why no worker could evaluate a run of ``model`` (None: the workers' own), or None: the
    refusal `submit`, `batch` and `schedule add` give. A model name no worker can route
    (``unroutable_model``) or whose key none holds (``model_key_missing``); or no model named
    while live workers run and none has one (``no_fleet_model``; with no live worker at all
    the runs wait for one, as a submitted run does)."""
    from assay.model_check import fleet_model_refusal as refusal_of
    from assay.worker_presence import read_fleet_models

    if model:
        refusal = refusal_of(model, None, redis=redis, settings=settings)
        if refusal is None:
            return None
        return refusal.code, refusal.message
    fleet = read_fleet_models(redis, settings.key_prefix)
    if fleet.workers and not fleet.models:
        return "no_fleet_model", NO_MODEL.format(workers=fleet.workers)
    return None


@dataclass
class ApplyContext:
    """What applying needs from where it runs (the CLI or the API)."""

    settings: AssaySettings
    schedules: ScheduleStore
    checks: CheckDefinitionStore
    confine_snapshot: Callable[[str], str]
    """A snapshot folder or glob made absolute inside the roots; ``ValueError`` says why not."""
    model_problem: Callable[[str | None], ModelProblem | None]
    """:func:`fleet_model_refusal` for this fleet."""
    submit: Callable[[list[EvaluationRequest]], Any]
    policies: PolicyStore
    read_policy_files: bool = True
    """False over HTTP: a document cannot make the server read a file."""
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))


@dataclass
class Planned:
    kind: str
    name: str
    action: Action
    before: Schedule | CheckDefinition | None
    after: Schedule | CheckDefinition | None
    diff: str = ""
    requests: list[EvaluationRequest] = field(default_factory=list)
    policies: list[ImportedPolicy] = field(default_factory=list)
    policy_set: str | None = None


@dataclass(frozen=True)
class ObjectChange:
    """What applying did (or, in a dry run, would do) to one object."""

    kind: str
    name: str
    action: Action
    diff: str = ""
    runs: tuple[str, ...] = ()

    def describe(self) -> str:
        text = f"{self.kind.lower()}/{self.name} {self.action}"
        if self.runs:
            text += f" ({len(self.runs)} run{'s' if len(self.runs) != 1 else ''} queued)"
        return text


@dataclass(frozen=True)
class ApplyResult:
    source: str
    dry_run: bool
    changes: tuple[ObjectChange, ...]

    @property
    def changed(self) -> bool:
        return any(change.action != "unchanged" for change in self.changes)

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for change in self.changes:
            counts[change.action] = counts.get(change.action, 0) + 1
        if not self.changed:
            total = len(self.changes)
            return f"no changes: {total} object{'s' if total != 1 else ''} unchanged"
        parts = [
            f"{counts[a]} {a}"
            for a in ("created", "configured", "pruned", "unchanged")
            if a in counts
        ]
        prefix = "dry run, nothing applied: would be " if self.dry_run else ""
        return prefix + ", ".join(parts)

    def as_json(self) -> dict[str, Any]:
        """What ``POST /v1/apply`` answers and ``assay apply --json`` prints."""
        return {
            "source": self.source,
            "dry_run": self.dry_run,
            "changed": self.changed,
            "summary": self.summary(),
            "changes": [
                {
                    "kind": c.kind,
                    "name": c.name,
                    "action": c.action,
                    "diff": c.diff,
                    "runs": list(c.runs),
                }
                for c in self.changes
            ],
        }


# --- documents as `assay get` writes them ------------------------------------------------------


def _metadata(name: str, labels: dict[str, str]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = dict(sorted(labels.items()))
    return meta


def schedule_document(schedule: Schedule) -> dict[str, Any]:
    """A stored schedule as the document that declares it (what apply reads back)."""
    return {
        "apiVersion": API_VERSION,
        "kind": "Schedule",
        "metadata": _metadata(schedule.name, schedule.labels),
        "spec": {**_what(schedule.predicate), **schedule_spec(schedule)},
    }


def check_document(definition: CheckDefinition) -> dict[str, Any]:
    """A stored check as the document that declares it."""
    body = definition.spec
    spec = _what(body.predicate or "")
    if body.evaluation != "check":
        spec["evaluation"] = body.evaluation
    spec["targets"] = _dump(body.targets)
    if body.profile is not None:
        spec["profile"] = body.profile
    _common(spec, body.model, body.budget, body.probe, body.notify)
    return {
        "apiVersion": API_VERSION,
        "kind": "Check",
        "metadata": _metadata(definition.name, definition.labels),
        "spec": spec,
    }


def _what(predicate: str) -> dict[str, Any]:
    """``predicate``, or the imported policy (set) a ``policy:`` predicate names."""
    if predicate.startswith(POLICY_SET_PREFIX):
        return {"policy": {"set": predicate.removeprefix(POLICY_SET_PREFIX)}}
    if predicate.startswith(POLICY_PREFIX):
        return {"policy": {"name": predicate.removeprefix(POLICY_PREFIX)}}
    return {"predicate": predicate}


def _common(
    spec: dict[str, Any], model: str | None, budget: BudgetSpec, probe: str, notify: list[str]
) -> None:
    if model is not None:
        spec["model"] = model
    if not budget.is_empty():
        spec["budget"] = _dump(budget)
    if probe != "auto":
        spec["probe"] = probe
    if notify:
        spec["notify"] = list(notify)


def _dump(model: Any) -> dict[str, Any]:
    data: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    return data


def document_of(obj: Schedule | CheckDefinition) -> dict[str, Any]:
    return schedule_document(obj) if isinstance(obj, Schedule) else check_document(obj)


def as_yaml(
    documents: Sequence[dict[str, Any]], *, separated: bool = True, dumper: Any = yaml.SafeDumper
) -> str:
    """Documents as multi-document YAML, keys in the order they were written.

    ``separated``: each document opens with ``---``, the first too, so files written by
    ``get`` and joined (``cat a.yaml b.yaml``) stay separate documents (without it the last
    of one file and the first of the next were one mapping, its repeated keys refused).

    YAML writes a control character as an escape, but a bidirectional override as is:
    documents holding one are written all in escapes (``\u202e``), so the text shown on a
    terminal is the text that is applied back (assay/terminal_text.py). ``dumper``: a
    SafeDumper (libyaml's, for megabytes of reports)."""
    options = {"Dumper": dumper, "sort_keys": False, "width": 100, "explicit_start": separated}
    text = yaml.dump_all(documents, allow_unicode=True, **options)
    return yaml.dump_all(documents, **options) if hides(text) else text


def portable(document: dict[str, Any], base: Path) -> dict[str, Any]:
    """``document`` with its snapshot paths written relative to ``base``, as apply reads a
    file kept in ``base`` (docs/apply.md, "Paths"): ``snaps/prod-eu``, ``../snaps/*``. A
    path sharing no folder with ``base`` but ``/`` stays absolute.

    Why: the store keeps each path absolute (confined to the snapshot roots where it
    entered), and a file for git must not carry one machine's folders."""
    targets = document["spec"].get("targets", {})
    if not targets.get("snapshots"):
        return document
    root = os.path.abspath(base)
    written = []
    for path in targets["snapshots"]:
        shared = os.path.isabs(path) and os.path.commonpath([root, path]) != os.sep
        written.append(os.path.relpath(path, root) if shared else path)
    spec = {**document["spec"], "targets": {**targets, "snapshots": written}}
    return {**document, "spec": spec}


def evaluated(spec: dict[str, Any]) -> str:
    """What a document's spec evaluates, as one line: its predicate or ``policy:NAME``."""
    if "predicate" in spec:
        return str(spec["predicate"])
    policy = spec.get("policy") or {}
    if "set" in policy:
        return POLICY_SET_PREFIX + str(policy["set"])
    return POLICY_PREFIX + str(policy.get("name", ""))


def _diff(kind: str, name: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> str:
    old = as_yaml([before], separated=False).splitlines(keepends=True) if before else []
    new = as_yaml([after], separated=False).splitlines(keepends=True) if after else []
    label = f"{kind.lower()}/{name}"
    return "".join(
        difflib.unified_diff(old, new, fromfile=f"{label} (stored)", tofile=f"{label} (files)")
    )


# --- planning ----------------------------------------------------------------------------------


def _owner_problem(item: Loaded, labels: dict[str, str], source: str) -> ManifestProblem | None:
    owner = labels.get(SOURCE_LABEL)
    if owner is None or owner == source:
        return None
    kind = item.document.kind.lower()
    return item.problem(
        ("metadata", "name"),
        f"{kind} {item.document.metadata.name!r} was created from source {owner!r}; apply it "
        f"with --source {owner}, or delete it there first",
        "owned_by_other_source",
    )


def _labels(item: Loaded, current_labels: dict[str, str] | None, source: str) -> dict[str, str]:
    labels = dict(item.document.metadata.labels)
    if current_labels is None:
        labels[SOURCE_LABEL] = source
    elif SOURCE_LABEL in current_labels:
        labels[SOURCE_LABEL] = current_labels[SOURCE_LABEL]
    return labels


def _environment_problems(
    item: Loaded, ctx: ApplyContext, model: str | None, notify: list[str], predicate: str
) -> list[ManifestProblem]:
    problems = []
    # A policy's check is answered by its probes: it needs no model (a named one is checked).
    refusal = None if model is None and policy_reference(predicate) else ctx.model_problem(model)
    if refusal is not None:
        code, reason = refusal
        problems.append(item.problem(("spec", "model"), reason, code))
    known = ctx.settings.notify_sinks
    if known:
        for index, sink in enumerate(notify):
            if sink not in known:
                problems.append(
                    item.problem(
                        ("spec", "notify", index),
                        f"no sink named {sink!r} is configured (notify_sinks has "
                        f"{', '.join(sorted(known))})",
                        "sink_not_found",
                    )
                )
    return problems


def _confined_targets(
    item: Loaded, targets: TargetsSpec, ctx: ApplyContext, problems: list[ManifestProblem]
) -> TargetsSpec:
    snapshots = []
    for index, pattern in enumerate(targets.snapshots):
        local = item.local_path(pattern)
        try:
            snapshots.append(ctx.confine_snapshot(local))
        except ValueError as exc:
            read_from = (
                f" (read from the document's folder, {item.folder})" if local != pattern else ""
            )
            problems.append(
                item.problem(
                    ("spec", "targets", "snapshots", index),
                    f"{exc}{read_from}",
                    "snapshot_outside_roots",
                )
            )
    return targets.model_copy(update={"snapshots": snapshots})


@dataclass
class _PolicyPlan:
    """What a document's ``policy`` comes to: the predicate, and what to import for it."""

    predicate: str
    policies: list[ImportedPolicy] = field(default_factory=list)
    policy_set: str | None = None
    changed: list[str] = field(default_factory=list)

    def mark(self, step: Planned) -> Planned:
        """``step`` with the import it needs; a changed policy changes an unchanged object."""
        if not self.changed:
            return step
        step.policies, step.policy_set = self.policies, self.policy_set
        note = "".join(
            f"# policy {name}: imported from the files (new or changed)\n" for name in self.changed
        )
        step.diff = note + step.diff
        if step.action == "unchanged":
            step.action = "configured"
        return step


def _same_policy(stored: ImportedPolicy | None, new: ImportedPolicy) -> bool:
    """Equal but for when and from which path it was imported."""
    skip = {"imported_at", "source"}
    return stored is not None and stored.model_dump(exclude=skip) == new.model_dump(exclude=skip)


def _stored_policy_problem(
    item: Loaded, loc: Loc, ref: PolicyReference, ctx: ApplyContext
) -> ManifestProblem | None:
    """A problem when the policy or set ``ref`` names is not stored: every run of the object
    would end ``cannot_determine`` (``schedule add`` refuses it too)."""
    if ref.kind == "policy" and ctx.policies.get(ref.name) is None:
        return item.problem(
            loc,
            f"no imported policy is named {ref.name!r}; import it with `assay probe import` "
            "or give policy.file",
            "policy_not_found",
        )
    if ref.kind == "set" and ctx.policies.set_members(ref.name) is None:
        return item.problem(
            loc,
            f"there is no policy set {ref.name!r}; import one with `assay probe import --set` "
            "or give policy.file",
            "policy_not_found",
        )
    return None


def _plan_policy(
    item: Loaded,
    spec: PolicySpec | None,
    predicate: str | None,
    ctx: ApplyContext,
    problems: list[ManifestProblem],
) -> _PolicyPlan | None:
    from workers.engine.user_files import UnreadableUserFile, read_user_file
    from workers.fleet.policy_store import taken_by_other_sets
    from workers.policy_engine.policies.documents import (
        MAX_FILE_BYTES,
        UnreadableFile,
        documents_from_text,
    )
    from workers.policy_engine.policies.importer import import_documents
    from workers.policy_engine.policies.kyverno_exceptions import Acceptance

    if spec is None:
        ref = policy_reference(predicate or "")
        if ref is not None and (
            found := _stored_policy_problem(item, ("spec", "predicate"), ref, ctx)
        ):
            problems.append(found)
            return None
        return _PolicyPlan(predicate or "")
    if spec.file is None:
        if spec.name is not None:
            ref, field_name = PolicyReference("policy", spec.name), "name"
        else:
            ref, field_name = PolicyReference("set", spec.set or ""), "set"
        if found := _stored_policy_problem(item, ("spec", "policy", field_name), ref, ctx):
            problems.append(found)
            return None
        return _PolicyPlan(spec.predicate([]))
    where = ("spec", "policy", "file")
    if not ctx.read_policy_files:
        problems.append(
            item.problem(
                where,
                "a policy file cannot be read over HTTP; import it with `assay probe import` "
                "and give policy.name or policy.set",
            )
        )
        return None
    try:
        path = item.policy_path(spec.file)
        text = read_user_file(path, limit=MAX_FILE_BYTES, within=item.folder)
        documents = documents_from_text(text, spec.file)
    except (ValueError, UnreadableUserFile, UnreadableFile) as exc:
        problems.append(item.problem(where, str(exc)))
        return None
    policies, refusals = import_documents(
        documents, now=ctx.now(), exceptions_accepted=Acceptance.of(ctx.settings)
    )
    if spec.set is not None:
        refusals += taken_by_other_sets(ctx.policies, policies, spec.set)
    for refusal in refusals:
        problems.append(
            item.problem(
                where, f"{refusal.kind} {refusal.name!r} cannot be imported: {refusal.reason}"
            )
        )
    if not policies and not refusals:
        problems.append(item.problem(where, f"{spec.file} holds no admission policy"))
    if len(policies) > 1 and spec.set is None:
        names = ", ".join(p.name for p in policies)
        problems.append(
            item.problem(
                where,
                f"{spec.file} holds {len(policies)} policies ({names}); give policy.set "
                "to evaluate them as one set",
            )
        )
    if refusals or not policies or (len(policies) > 1 and spec.set is None):
        return None
    stored = ctx.policies.many([p.name for p in policies])
    changed = [p.name for p in policies if not _same_policy(stored.get(p.name), p)]
    if spec.set is not None and ctx.policies.set_members(spec.set) != sorted(
        p.name for p in policies
    ):
        changed.append(f"set {spec.set}")
    return _PolicyPlan(spec.predicate([p.name for p in policies]), policies, spec.set, changed)


def _plan_targets_and_policy(
    item: Loaded,
    spec: CheckSpec | ScheduleSpec,
    owned: dict[str, str] | None,
    ctx: ApplyContext,
    source: str,
) -> tuple[TargetsSpec, _PolicyPlan | None, list[ManifestProblem]]:
    """What a check and a schedule document both plan first: that this source owns the
    stored object (``owned``: its labels, if one is stored), its targets confined to the
    snapshot roots, and its predicate or policy import."""
    problems: list[ManifestProblem] = []
    if owned is not None and (owner := _owner_problem(item, owned, source)):
        return spec.targets, None, [owner]
    targets = _confined_targets(item, spec.targets, ctx, problems)
    policy = _plan_policy(item, spec.policy, spec.predicate, ctx, problems)
    return targets, policy, problems


def _plan_schedule(
    item: Loaded, current: Schedule | None, ctx: ApplyContext, source: str
) -> tuple[Planned | None, list[ManifestProblem]]:
    document = item.document
    assert isinstance(document, ScheduleDocument)
    spec = document.spec
    owned = None if current is None else current.labels
    targets, policy, problems = _plan_targets_and_policy(item, spec, owned, ctx, source)
    if problems or policy is None:
        return None, problems
    fields: dict[str, Any] = {
        "name": document.metadata.name,
        "predicate": policy.predicate,
        **schedule_fields(spec),
        "targets": targets.as_schedule_targets(),
        "profile": spec.profile or ctx.settings.unattended_profile(),
        "labels": _labels(item, current.labels if current else None, source),
    }
    if current is not None:
        fields["id"] = current.id
    try:
        desired = Schedule.model_validate(fields)
    except ValidationError as exc:
        for error in exc.errors():
            loc = tuple(error.get("loc", ()))
            where = SCHEDULE_SPEC_LOCS.get(str(loc[0]), ("spec",)) if loc else ("spec",)
            message = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
            problems.append(item.problem(where, message))
        return None, problems
    try:
        desired.check_interval_floor(ctx.settings.min_interval_seconds)
    except ValueError as exc:
        problems.append(item.problem(("spec", "every"), str(exc)))
    problems += _environment_problems(item, ctx, desired.model, desired.notify, desired.predicate)
    if problems:
        return None, problems
    return policy.mark(_compared("Schedule", document.metadata.name, current, desired)), []


def _compared(
    kind: str,
    name: str,
    current: Schedule | CheckDefinition | None,
    desired: Schedule | CheckDefinition,
) -> Planned:
    after = document_of(desired)
    before = document_of(current) if current is not None else None
    if before == after:
        return Planned(kind, name, "unchanged", current, desired)
    action: Action = "created" if current is None else "configured"
    return Planned(kind, name, action, current, desired, _diff(kind, name, before, after))


def check_ids_for(name: str, targets: Sequence[Target]) -> dict[str, str]:
    """The check id each target's verdicts are kept under: ``NAME`` for one target, else
    ``NAME.TARGET`` (the target's name in the id alphabet, shortened with a hash if long)."""
    if len(targets) == 1:
        return {targets[0].name: name}
    ids: dict[str, str] = {}
    for target in targets:
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", target.name).strip("-.") or "target"
        if len(slug) > 48:
            digest = hashlib.sha256(target_key(target).encode()).hexdigest()[:8]
            slug = f"{slug[:39]}-{digest}"
        candidate = f"{name}.{slug}"
        if candidate in ids.values():
            candidate += "-" + hashlib.sha256(target_key(target).encode()).hexdigest()[:8]
        ids[target.name] = candidate
    return ids


def _plan_check(
    item: Loaded, current: CheckDefinition | None, ctx: ApplyContext, source: str
) -> tuple[Planned | None, list[ManifestProblem]]:
    document = item.document
    assert isinstance(document, CheckDocument)
    spec = document.spec
    owned = None if current is None else current.labels
    targets, policy, problems = _plan_targets_and_policy(item, spec, owned, ctx, source)
    if problems or policy is None:
        return None, problems
    normalized = CheckSpec.model_validate(
        {
            **spec.model_dump(by_alias=True),
            "predicate": policy.predicate,
            "policy": None,
            "targets": targets.model_dump(by_alias=True),
            "profile": spec.profile or ctx.settings.unattended_profile(),
        }
    )
    problems += _environment_problems(item, ctx, spec.model, spec.notify, policy.predicate)
    if problems:
        return None, problems
    now = ctx.now()
    desired = CheckDefinition(
        name=document.metadata.name,
        labels=_labels(item, current.labels if current else None, source),
        spec=normalized,
        revision=current.revision + 1 if current else 1,
        created_at=current.created_at if current else now,
        updated_at=now,
        check_ids=current.check_ids if current else {},
        runs=current.runs if current else {},
    )
    planned = policy.mark(_compared("Check", desired.name, current, desired))
    if planned.action == "unchanged":
        return planned, []
    try:
        resolved = resolve_targets(normalized.targets.as_schedule_targets(), ctx.settings)
    except TargetResolutionError as exc:
        return None, [item.problem(("spec", "targets"), str(exc), "context_glob_failed")]
    if not resolved:
        nothing = "the targets match nothing to evaluate"
        return None, [item.problem(("spec", "targets"), nothing, "targets_empty")]
    planned.requests = _check_requests(desired, resolved)
    assert isinstance(planned.after, CheckDefinition)
    planned.after.check_ids = {r.target.name: r.check_id for r in planned.requests}
    planned.after.runs = {r.target.name: r.run_id for r in planned.requests}
    return planned, []


def _check_requests(definition: CheckDefinition, targets: list[Target]) -> list[EvaluationRequest]:
    spec = definition.spec
    ids = check_ids_for(definition.name, targets)
    stamp = int(definition.updated_at.timestamp())
    requests = []
    for target in targets:
        digest = hashlib.sha256(target_key(target).encode()).hexdigest()[:8]
        requests.append(
            EvaluationRequest(
                kind=spec.evaluation,
                text=spec.predicate or "",
                target=target,
                profile=spec.profile or "fast",
                budget=spec.budget.as_budget(),
                model=spec.model,
                probe=spec.probe,
                check_id=ids[target.name],
                run_id=f"{definition.name}.r{definition.revision}.{stamp}.{digest}",
                notify=spec.notify,
                declared_by=f"check/{definition.name}",
            )
        )
    return requests


def plan(loaded: Sequence[Loaded], ctx: ApplyContext, *, source: str, prune: bool) -> list[Planned]:
    """What applying ``loaded`` would do; :class:`ManifestErrors` when any of it cannot be done."""
    schedules = {s.name: s for s in ctx.schedules.all()}
    checks = {c.name: c for c in ctx.checks.all()}
    planned: list[Planned] = []
    problems: list[ManifestProblem] = []
    for item in loaded:
        name = item.document.metadata.name
        if isinstance(item.document, ScheduleDocument):
            step, found = _plan_schedule(item, schedules.get(name), ctx, source)
        else:
            step, found = _plan_check(item, checks.get(name), ctx, source)
        problems += found
        if step is not None:
            planned.append(step)
    problems += _shared_check_ids(loaded, planned, checks, source if prune else None)
    if problems:
        raise ManifestErrors(problems)
    if prune:
        declared = {item.key for item in loaded}
        stored: list[Schedule | CheckDefinition] = [*schedules.values(), *checks.values()]
        for obj in sorted(stored, key=lambda o: (type(o).__name__, o.name)):
            kind = "Schedule" if isinstance(obj, Schedule) else "Check"
            if obj.labels.get(SOURCE_LABEL) == source and (kind, obj.name) not in declared:
                diff = _diff(kind, obj.name, document_of(obj), None)
                planned.append(Planned(kind, obj.name, "pruned", obj, None, diff))
    return planned


def _shared_check_ids(
    loaded: Sequence[Loaded],
    planned: list[Planned],
    stored: dict[str, CheckDefinition],
    pruned_source: str | None,
) -> list[ManifestProblem]:
    """A problem for each check id two checks would keep their verdicts under.

    Why: a check's id on one target is its name, on several ``NAME.TARGET``, so ``web`` on
    targets ``snapshot-alpha`` and ``snapshot-beta`` and a check named
    ``web.snapshot-alpha`` both write ``web.snapshot-alpha``: the later run overwrote the
    other's verdict history and changes. Ids are compared across the whole input and with
    the stored checks it leaves in place (not those it redeclares, nor those it prunes).
    """
    items = {item.key: item for item in loaded}
    declared = {name for kind, name in items if kind == "Check"}
    owners: dict[str, tuple[str, str]] = {}  # check id -> (the check keeping it, in words)
    for definition in stored.values():
        pruned = pruned_source is not None and definition.labels.get(SOURCE_LABEL) == pruned_source
        if definition.name in declared or pruned:
            continue
        for target, check_id in definition.check_ids.items():
            said = f"the stored check {definition.name!r} (on {target})"
            owners.setdefault(check_id, (definition.name, said))
    problems = []
    for step in planned:
        if not isinstance(step.after, CheckDefinition):
            continue
        item = items[("Check", step.name)]
        for target, check_id in sorted(step.after.check_ids.items()):
            said = f"check {step.name!r} at {item.file}:{item.line} (on {target})"
            owner, owner_said = owners.setdefault(check_id, (step.name, said))
            if owner != step.name:
                problems.append(
                    item.problem(
                        ("metadata", "name"),
                        f"its verdicts on {target} would be kept under check id {check_id!r}, "
                        f"which {owner_said} uses too, and one would overwrite the other's "
                        "history; rename one of them",
                        "check_id_taken",
                    )
                )
    return problems


# --- applying ----------------------------------------------------------------------------------


def _execute(step: Planned, ctx: ApplyContext) -> ObjectChange:
    runs: tuple[str, ...] = ()
    if step.policies:  # the policy first: the object's runs evaluate it
        ctx.policies.save(step.policies, step.policy_set)
    if step.action == "unchanged":
        pass
    elif step.kind == "Schedule":
        _execute_schedule(step, ctx)
    else:
        runs = _execute_check(step, ctx)
    return ObjectChange(step.kind, step.name, step.action, step.diff, runs)


def _execute_schedule(step: Planned, ctx: ApplyContext) -> None:
    before, after = step.before, step.after
    if step.action == "pruned":
        assert isinstance(before, Schedule)
        ctx.schedules.remove(before.id)
        return
    assert isinstance(after, Schedule)
    if before is None:
        try:
            ctx.schedules.create(after)
        except ScheduleConflict as exc:
            raise ApplyFailed(str(exc)) from None
        return
    assert isinstance(before, Schedule)
    changes = {
        name: getattr(after, name)
        for name in CHANGEABLE_FIELDS
        if getattr(after, name) != getattr(before, name)
    }
    if changes:
        try:
            ctx.schedules.update(before.id, **changes)
        except ScheduleConflict as exc:
            raise ApplyFailed(str(exc)) from None
    if after.enabled != before.enabled:
        (ctx.schedules.resume if after.enabled else ctx.schedules.pause)(before.id)


def _execute_check(step: Planned, ctx: ApplyContext) -> tuple[str, ...]:
    from workers.fleet.check_definitions import DefinitionConflict

    before, after = step.before, step.after
    try:
        if step.action == "pruned":
            assert isinstance(before, CheckDefinition)
            ctx.checks.delete(before)
            return ()
        assert isinstance(after, CheckDefinition)
        # Its runs first, then the definition: an apply stopped in between (Ctrl-C, a broker
        # fault) leaves the old definition stored, so the next apply finds the change again
        # and queues its runs. Stored first, the next apply found it 'unchanged' and the
        # check kept the verdicts of what it said before. (Queued twice at worst.)
        ctx.submit(step.requests)
        ctx.checks.put(after, before.revision if isinstance(before, CheckDefinition) else 0)
    except DefinitionConflict as exc:
        raise ApplyFailed(str(exc)) from None
    return tuple(request.run_id for request in step.requests)


class ApplyFailed(RuntimeError):
    """A write failed after the plan passed (a race with another writer); what was applied
    before it stays, and applying again finishes the job."""


def apply(
    loaded: Sequence[Loaded],
    ctx: ApplyContext,
    *,
    source: str,
    prune: bool = False,
    dry_run: bool = False,
) -> ApplyResult:
    """Plan, then (unless ``dry_run``) apply; see the module's docstring."""
    source = source_name(source)
    steps = plan(loaded, ctx, source=source, prune=prune)
    if dry_run:
        changes = [ObjectChange(s.kind, s.name, s.action, s.diff) for s in steps]
    else:
        changes = [_execute(step, ctx) for step in steps]
    return ApplyResult(source, dry_run, tuple(changes))


def stored_documents(
    ctx_schedules: ScheduleStore | None,
    ctx_checks: CheckDefinitionStore | None,
    *,
    source: str | None = None,
    names: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """The documents of the stored schedules or checks (whichever store is given), by name."""
    objects: list[Schedule | CheckDefinition] = []
    if ctx_schedules is not None:
        objects += ctx_schedules.all()
    if ctx_checks is not None:
        objects += ctx_checks.all()
    chosen = [
        obj
        for obj in sorted(objects, key=lambda o: o.name)
        if (source is None or obj.labels.get(SOURCE_LABEL) == source)
        and (not names or obj.name in names)
    ]
    return [document_of(obj) for obj in chosen]
