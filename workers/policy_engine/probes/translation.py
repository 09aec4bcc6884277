"""A verified translation between policy engines: policies in (a Gatekeeper template and
constraint, a Kyverno policy, a ValidatingAdmissionPolicy), their export out (export.py),
and the proof that the two judge alike.

The proof imports the translation back, as ``assay probe import`` would, and judges every
object given with the originals and with the translation, one object at a time, as a
check of stored objects judges it (each object as if it were created now): allowed,
denied, or undetermined (a policy could not judge it: the reason is kept). An object on
which the two differ, or which either cannot judge, is a disagreement: nothing is proven
on it. What the objects cannot show (how an update, a deletion or a subresource request
is matched) is carried field by field by the export itself (export_policy.py).
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from schemas.policy import ImportedPolicy, ImportRefusal
from schemas.verdict import VerdictKind
from workers.engine.toolsets.backend import BackendError, ClusterBackend, ResourceInfo
from workers.engine.toolsets.kinds import builtin_index
from workers.engine.toolsets.redaction import SecretScrubber
from workers.engine.toolsets.snapshot_backend import SnapshotBackend
from workers.policy_engine.policies.documents import SourcedDocument, documents_from_text
from workers.policy_engine.policies.importer import import_documents
from workers.policy_engine.policies.matching import Undecidable, resources_of
from workers.policy_engine.policies.run import run_policies
from workers.policy_engine.probes.export import (
    Action,
    Exported,
    ExportFormat,
    NotExportable,
    export_policy,
)

Judged = Literal["allowed", "denied", "undetermined"]
# API groups of policy documents (policies, bindings, constraints, the engines' own tests):
# every other document given with them is an object to prove the translation on.
POLICY_GROUPS = frozenset(
    {"admissionregistration.k8s.io", "kyverno.io", "policies.kyverno.io",
     "templates.gatekeeper.sh", "constraints.gatekeeper.sh", "cli.kyverno.io",
     "test.gatekeeper.sh"}
)  # fmt: skip


class NotTranslatable(ValueError):
    """The documents cannot be translated (a refused import, no policy, no object to prove
    it on); the message says why."""


class NotProvable(ValueError):
    """The translation cannot be judged by assay; the message says why."""


@dataclass(frozen=True)
class ObjectVerdict:
    """One object, judged by the originals and by the translation."""

    kind: str
    namespace: str | None
    name: str
    original: Judged
    translation: Judged
    reason: str = ""

    @property
    def agrees(self) -> bool:
        return self.original == self.translation != "undetermined"

    def describe(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        line = f"{self.kind} {where}{self.name}: original {self.original}, "
        line += f"translation {self.translation}"
        return line + (f" ({self.reason})" if self.reason else "")


@dataclass
class Proof:
    """Every object judged both ways."""

    verdicts: list[ObjectVerdict] = field(default_factory=list)

    @property
    def disagreements(self) -> list[ObjectVerdict]:
        return [v for v in self.verdicts if not v.agrees]

    @property
    def proven(self) -> bool:
        return bool(self.verdicts) and not self.disagreements

    def summary(self) -> str:
        agreed = len(self.verdicts) - len(self.disagreements)
        return (
            f"{agreed} of {len(self.verdicts)} objects judged alike by the original and the "
            "translation"
        )


def split_documents(
    documents: list[SourcedDocument],
) -> tuple[list[SourcedDocument], list[dict[str, Any]]]:
    """The policy documents (with the params objects a ValidatingAdmissionPolicy among them
    takes), and the objects (every other document; a params object is judged too)."""
    policies = [d for d in documents if d.api_group in POLICY_GROUPS]
    params_kinds = set()
    for document in policies:
        spec = document.document.get("spec")
        kind = spec.get("paramKind") if isinstance(spec, dict) else None
        if isinstance(kind, dict):
            params_kinds.add((kind.get("apiVersion"), kind.get("kind")))
    others = [d for d in documents if d.api_group not in POLICY_GROUPS]
    params = [d for d in others if (d.document.get("apiVersion"), d.kind) in params_kinds]
    return policies + params, [d.document for d in others]


def translate_and_prove(
    documents: list[SourcedDocument],
    objects: list[dict[str, Any]],
    fmt: ExportFormat,
    *,
    action: Action | None = None,
    target: ClusterBackend | None = None,
    deadline: float | None = None,
) -> tuple[Exported, Proof]:
    """The policies of ``documents`` translated to ``fmt``, and the proof on ``objects``
    and, with a ``target``, on every object of it of a kind they judge. NotTranslatable,
    NotExportable or NotProvable (each saying why) when there is no such translation or
    proof."""
    policies, refusals = import_documents(documents)
    if refusals:
        raise NotTranslatable(
            "some documents cannot be translated: " + "; ".join(_refusal(r) for r in refusals)
        )
    if not policies:
        raise NotTranslatable("the documents hold no policy to translate")
    objects = unique_objects(objects)
    if not objects and target is None:
        raise NotTranslatable(
            "there is nothing to prove it on: give objects (the policy's own tests, or files "
            "of objects) or a snapshot or context to judge"
        )
    with tempfile.TemporaryDirectory(prefix="assay-translate-") as folder:
        given = _snapshot_of(objects, Path(folder)) if objects else None
        exported = translate(policies, fmt, action=action, backend=target or given)
        translated = reimport(exported)
        proof = Proof()
        if given is not None:
            proof = prove(policies, translated, given, objects, deadline=deadline)
    if target is not None:
        found = unique_objects(list(objects_to_judge(policies + translated, target)))
        proof.verdicts += prove(policies, translated, target, found, deadline=deadline).verdicts
    return exported, proof


def unique_objects(objects: list[Any]) -> list[dict[str, Any]]:
    """Each object once (by API version, kind, namespace and name), a namespaced object
    left without a namespace in ``default`` (where it would be created)."""
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for obj in objects:
        if not isinstance(obj, dict) or not obj.get("kind"):
            continue
        obj = with_namespace(obj)
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        key = (obj.get("apiVersion"), obj.get("kind"), meta.get("namespace"), meta.get("name"))
        out.setdefault(key, obj)
    return list(out.values())


def with_namespace(obj: dict[str, Any]) -> dict[str, Any]:
    """A namespaced object written without a namespace is in ``default``, as ``kubectl
    apply`` (and the engines' test tools) put it."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or meta.get("namespace") or obj.get("kind") == "Namespace":
        return obj
    try:
        namespaced = builtin_index().resolve(str(obj.get("kind") or "")).namespaced
    except BackendError:
        namespaced = True
    return {**obj, "metadata": {**meta, "namespace": "default"}} if namespaced else obj


def _snapshot_of(objects: list[dict[str, Any]], folder: Path) -> SnapshotBackend:
    """A snapshot of the given objects: their kinds (CRDs among them) and namespaces."""
    for number, obj in enumerate(objects):
        (folder / f"{number}.json").write_text(json.dumps(obj), encoding="utf-8")
    return SnapshotBackend(folder)


def translate(
    policies: list[ImportedPolicy],
    fmt: ExportFormat,
    *,
    action: Action | None = None,
    backend: ClusterBackend | None = None,
) -> Exported:
    """Every policy exported in ``fmt``, as one set of documents (NotExportable, naming the
    policy, when one cannot be)."""
    documents: list[dict[str, Any]] = []
    warnings: list[str] = []
    for policy in policies:
        try:
            exported = export_policy(policy, fmt, action=action, backend=backend)
        except NotExportable as exc:
            raise NotExportable(f"{policy.predicate}: {exc}") from None
        documents += exported.documents
        prefix = f"{policy.predicate}: " if len(policies) > 1 else ""
        warnings += [prefix + w for w in exported.warnings]
    return Exported(documents, warnings)


def reimport(exported: Exported) -> list[ImportedPolicy]:
    """The translation as assay imports it (NotProvable when it refuses any of it)."""
    policies, refusals = import_documents(documents_from_text(exported.yaml(), "translation"))
    if refusals:
        raise NotProvable(
            "assay cannot judge the translation, so nothing can be proven: "
            + "; ".join(_refusal(r) for r in refusals)
        )
    return policies


def _refusal(refusal: ImportRefusal) -> str:
    return f"{refusal.kind} {refusal.name}: {refusal.reason}"


def prove(
    originals: list[ImportedPolicy],
    translated: list[ImportedPolicy],
    backend: ClusterBackend,
    objects: list[dict[str, Any]],
    *,
    deadline: float | None = None,
) -> Proof:
    """Each object judged by the originals and by the translation (module docstring);
    ``backend`` serves the kinds and the namespaces the objects are judged among.
    ``deadline`` (a ``time.monotonic()`` instant): past it, NotProvable."""
    served = _served(backend)
    proof = Proof()
    for number, obj in enumerate(objects):
        if deadline is not None and time.monotonic() > deadline:
            raise NotProvable(
                f"time ran out after judging {number} of {len(objects)} objects, so the "
                "translation is not proven"
            )
        resource = _resource_of(obj, served)
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        assert isinstance(meta, dict)
        kind, name = str(obj.get("kind") or ""), str(meta.get("name") or "")
        namespace = str(meta["namespace"]) if meta.get("namespace") else None
        # What the proof reports leaves the process: a name holding a Secret value is shown
        # scrubbed, as the model's tools show it (the object itself is judged as stored).
        shown_name = backend.scrubber.text(name)
        if resource is None:
            proof.verdicts.append(
                ObjectVerdict(kind, namespace, shown_name, "undetermined", "undetermined",
                              f"the target serves no kind {kind} of {obj.get('apiVersion')}")
            )  # fmt: skip
            continue
        view = OneObject(backend, served, resource, obj)
        before, why_before = _judge(originals, view, kind, name, deadline)
        after, why_after = _judge(translated, view, kind, name, deadline)
        reason = "; ".join(dict.fromkeys(r for r in (why_before, why_after) if r))
        proof.verdicts.append(
            ObjectVerdict(kind, namespace, shown_name, before, after, backend.scrubber.text(reason))
        )
    return proof


def _judge(
    policies: list[ImportedPolicy], view: OneObject, kind: str, name: str, deadline: float | None
) -> tuple[Judged, str]:
    """Denied when any policy finds the object violating it; undetermined when one could
    not judge it (and none denied); allowed otherwise."""
    results, _ = run_policies(policies, view, deadline=deadline)
    if any(v.kind == kind and v.name == name for r in results for v in r.violations):
        return "denied", ""
    failed = [r for r in results if r.verdict == VerdictKind.CANNOT_DETERMINE]
    if failed:
        return "undetermined", f"policy:{failed[0].policy}: {failed[0].reason}"
    return "allowed", ""


def objects_to_judge(
    policies: list[ImportedPolicy], backend: ClusterBackend
) -> Iterator[dict[str, Any]]:
    """Every object of ``backend`` of a kind one of the policies' rules judges."""
    served = _served(backend)
    seen: set[tuple[str, str]] = set()
    for policy in policies:
        for rule in policy.rules:
            try:
                resources, _ = resources_of(rule, served)
            except Undecidable as exc:
                raise NotProvable(f"the target's kinds cannot be read: {exc}") from None
            for resource in resources:
                if (resource.group, resource.plural) in seen:
                    continue
                seen.add((resource.group, resource.plural))
                try:
                    yield from backend.list_objects(resource, None, as_stored=True)
                except BackendError as exc:
                    raise NotProvable(
                        f"the target's {resource.plural} could not be listed: {exc.message}"
                    ) from None


def _served(backend: ClusterBackend) -> list[ResourceInfo]:
    try:
        return list(backend.api_resources())
    except BackendError as exc:
        raise NotProvable(f"the target's kinds could not be read: {exc.message}") from None


def _resource_of(obj: dict[str, Any], served: list[ResourceInfo]) -> ResourceInfo | None:
    group, _, version = str(obj.get("apiVersion") or "").rpartition("/")
    kind = str(obj.get("kind") or "")
    found = [r for r in served if r.kind == kind and r.group == group]
    preferred = [r for r in found if r.version == version]
    return next(iter(preferred or found), None)


class OneObject:
    """A target that holds one object of its kind: the judged object, so each policy's run
    says what it makes of that object alone. Its kinds, and its Namespaces (for namespace
    selectors), are the target's."""

    def __init__(
        self,
        backend: ClusterBackend,
        served: list[ResourceInfo],
        resource: ResourceInfo,
        obj: dict[str, Any],
    ) -> None:
        self._backend = backend
        self.name = getattr(backend, "name", "")
        self._served = served
        self._resource = resource
        self._object = obj

    @property
    def scrubber(self) -> SecretScrubber:
        return self._backend.scrubber

    def api_resources(self) -> list[ResourceInfo]:
        return self._served

    def resolve(self, kind: str) -> ResourceInfo:
        return self._backend.resolve(kind)

    def list_objects(
        self,
        resource: ResourceInfo,
        namespace: str | None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        *,
        as_stored: bool = False,
    ) -> Iterator[dict[str, Any]]:
        if (resource.group, resource.plural) == (self._resource.group, self._resource.plural):
            meta = self._object.get("metadata") or {}
            if namespace is None or not resource.namespaced or meta.get("namespace") == namespace:
                return iter([self._object])
            return iter([])
        if (resource.group, resource.plural) == ("", "namespaces"):
            return self._backend.list_objects(
                resource, namespace, label_selector, field_selector, as_stored=as_stored
            )
        return iter([])

    def get(
        self, resource: ResourceInfo, name: str, namespace: str | None, *, as_stored: bool = False
    ) -> dict[str, Any]:
        return self._backend.get(resource, name, namespace, as_stored=as_stored)

    def events(
        self,
        namespace: str | None,
        involved_kind: str | None = None,
        involved_name: str | None = None,
        *,
        as_stored: bool = False,
    ) -> list[dict[str, Any]]:
        return self._backend.events(namespace, involved_kind, involved_name, as_stored=as_stored)

    def logs(
        self,
        namespace: str,
        pod: str,
        container: str | None = None,
        tail_lines: int | None = None,
        previous: bool = False,
        since_seconds: int | None = None,
        limit_bytes: int | None = None,
    ) -> str:
        return self._backend.logs(
            namespace, pod, container, tail_lines, previous, since_seconds, limit_bytes
        )

    def explain(self, resource: ResourceInfo, field_path: str | None = None) -> dict[str, Any]:
        return self._backend.explain(resource, field_path)

    def close(self) -> None:
        """The target is the caller's to close."""
