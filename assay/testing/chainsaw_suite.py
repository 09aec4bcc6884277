"""Labelled fixtures from Kyverno's own conformance tests (chainsaw ``Test`` files).

A chainsaw test is a list of steps run against a real cluster with Kyverno installed: it
creates policies, then objects, and says what the cluster answered. Two kinds of label come
out of it, both the engine's own:

* **admission**: an object created while exactly one policy enforces (``Deny``) either
  passes (no ``expect``, or ``($error == null)``) or is refused (an ``expect`` that checks
  ``$error`` is set, or its message). A file of several objects refused says only that one
  of them was, and is left out; a file of several admitted says each was. An object
  created again (an update) or a policy that only audits says nothing about a
  stored object, and is left out (counted).
* **background reports**: a ``PolicyReport`` the test asserts after the objects exist names,
  per policy, a ``pass``, ``fail`` or ``skip`` for its ``scope`` object: what Kyverno's
  background scan (the job a scan of stored objects does) found.

Objects the test created before the labelled one (a Namespace, a ConfigMap, a
GlobalContextEntry) go along as context: a snapshot holds them as the cluster did.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from workers.engine.toolsets.yaml_documents import load_documents

POLICY_KINDS = frozenset(
    {
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingPolicy",
        "NamespacedValidatingPolicy",
        "ClusterPolicy",
        "Policy",
        "PolicyException",
        "ImageValidatingPolicy",
        "NamespacedImageValidatingPolicy",
        "MutatingPolicy",
        "NamespacedMutatingPolicy",
        "GeneratingPolicy",
        "NamespacedGeneratingPolicy",
        "DeletingPolicy",
        "NamespacedDeletingPolicy",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
        "ConstraintTemplate",
        "GlobalContextEntry",
        "CleanupPolicy",
        "ClusterCleanupPolicy",
    }
)
# the policies whose verdict on one object is what a check of stored objects reports
VALIDATING_KINDS = frozenset(
    {"ValidatingAdmissionPolicy", "ValidatingPolicy", "NamespacedValidatingPolicy"}
)
KYVERNO_RULE_KINDS = frozenset({"ClusterPolicy", "Policy"})
REPORT_KINDS = frozenset({"PolicyReport", "ClusterPolicyReport"})
# a report result's ``source`` -> the kinds of policy it speaks for
REPORT_SOURCES = {
    "ValidatingAdmissionPolicy": frozenset({"ValidatingAdmissionPolicy"}),
    "KyvernoValidatingPolicy": frozenset({"ValidatingPolicy", "NamespacedValidatingPolicy"}),
    "kyverno": KYVERNO_RULE_KINDS,
}
# kinds a test creates to stand up the cluster (their creation is never labelled)
INFRASTRUCTURE_KINDS = frozenset(
    {"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
)


@dataclass(frozen=True)
class ChainsawFixture:
    """One labelled object, before it becomes a :class:`~assay.testing.policy_corpus.Fixture`."""

    source: str
    policy_files: tuple[str, ...]
    policy: str
    rule: str | None
    obj: dict[str, Any] = field(hash=False, compare=False)
    context: tuple[dict[str, Any], ...] = field(hash=False, compare=False)
    allowed: bool
    label: str


@dataclass
class _Applied:
    path: Path
    documents: list[dict[str, Any]]


@dataclass
class _State:
    """What the cluster holds at a point of the test."""

    policy_files: list[_Applied] = field(default_factory=list)
    objects: list[dict[str, Any]] = field(default_factory=list)

    def policies(self) -> list[dict[str, Any]]:
        return [
            d
            for applied in self.policy_files
            for d in applied.documents
            if d.get("kind") in VALIDATING_KINDS | KYVERNO_RULE_KINDS
        ]

    def holds(self, obj: dict[str, Any]) -> bool:
        return any(_same(o, obj) for o in self.objects)

    def patch(self, patches: list[dict[str, Any]]) -> None:
        """A policy patched in place (kyverno/policies' tests switch a policy to
        ``Enforce`` so its admission answer shows what it judges); patches of other
        objects are updates, which label nothing."""
        for change in patches:
            for applied in self.policy_files:
                for document in applied.documents:
                    if _same(document, change):
                        _merge(document, change)


def _merge(into: dict[str, Any], change: dict[str, Any]) -> None:
    """A JSON merge patch (RFC 7386): maps merged, anything else replaced, null removes."""
    for key, value in change.items():
        if value is None:
            into.pop(key, None)
        elif isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    ma, mb = a.get("metadata") or {}, b.get("metadata") or {}
    return (
        a.get("kind") == b.get("kind")
        and ma.get("name") == mb.get("name")
        # the snapshot puts an object written without a namespace in ``default``
        and (ma.get("namespace") or "default") == (mb.get("namespace") or "default")
    )


def documents_of(path: Path) -> list[dict[str, Any]]:
    """A file's objects, timestamps as the API's text (as a snapshot stores them)."""
    try:
        text = path.read_text(encoding="utf-8")
        return [d for d in load_documents(text) if isinstance(d, dict)]
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return []


def is_chainsaw_test(head: str) -> bool:
    return "chainsaw.kyverno.io" in head and "kind: Test" in head


def read_chainsaw_test(path: Path, skipped: Counter[str]) -> list[ChainsawFixture]:
    """Every labelled object of one chainsaw test file."""
    try:
        test = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        skipped["a chainsaw test that is not YAML"] += 1
        return []
    if not isinstance(test, dict) or test.get("kind") != "Test":
        return []
    state = _State()
    found: dict[tuple[str, str, str, str], ChainsawFixture] = {}
    for step in (test.get("spec") or {}).get("steps") or []:
        for operation in _operations(step, path.parent):
            verb, applied, expect = operation
            if verb in ("patch", "update"):
                state.patch(applied.documents)
                continue
            if verb == "assert":
                for fixture in _report_labels(path, applied, state, skipped):
                    found.setdefault(_key(fixture), fixture)
                continue
            kinds = {d.get("kind") for d in applied.documents}
            if kinds == {"GlobalContextEntry"}:  # the cluster holds it, as a check reads it
                state.objects += [d for d in applied.documents if not state.holds(d)]
                continue
            if kinds & POLICY_KINDS:
                state.policy_files.append(applied)
                continue
            for fixture in _admission_labels(path, applied, expect, state, skipped):
                found.setdefault(_key(fixture), fixture)
            if expects_refusal(expect) is False:  # a refused create left nothing in the cluster
                for document in applied.documents:
                    if not state.holds(document):
                        state.objects.append(document)
    return list(found.values())


def _key(f: ChainsawFixture) -> tuple[str, str, str, str]:
    meta = f.obj.get("metadata") or {}
    return (f.policy, str(f.obj.get("kind")), str(meta.get("name")), f.label)


def _operations(step: Any, base: Path) -> list[tuple[str, _Applied, list[Any]]]:
    """A step's create/apply/assert operations on files, in order (templates resolved)."""
    out: list[tuple[str, _Applied, list[Any]]] = []
    if not isinstance(step, dict):
        return out
    template = (step.get("use") or {}).get("template")
    if template:
        bindings = {
            b.get("name"): b.get("value")
            for b in ((step.get("use") or {}).get("with") or {}).get("bindings") or []
            if isinstance(b, dict)
        }
        named = bindings.get("file")
        if "policy" in str(template) and isinstance(named, str):
            file = base / named
            out.append(("apply", _Applied(file, documents_of(file)), []))
        return out
    for operation in step.get("try") or []:
        if not isinstance(operation, dict):
            continue
        for verb in ("create", "apply", "assert", "patch", "update"):
            body = operation.get(verb)
            if not isinstance(body, dict):
                continue
            if isinstance(body.get("file"), str) and "*" not in body["file"]:
                file = base / body["file"]
                documents = documents_of(file)
            elif isinstance(body.get("resource"), dict):
                file, documents = base / "chainsaw-test.yaml", [body["resource"]]
            else:
                continue
            out.append((verb, _Applied(file, documents), list(body.get("expect") or [])))
    return out


def expects_refusal(expect: list[Any]) -> bool | None:
    """Whether the test expects the cluster to refuse (None: it checks something else)."""
    if not expect:
        return False
    for entry in expect:
        check = (entry or {}).get("check") if isinstance(entry, dict) else None
        if not isinstance(check, dict):
            continue
        for key, value in check.items():
            key = str(key).replace(" ", "")
            if key == "($error!=null)":
                return bool(value)
            if key == "($error==null)":
                return not bool(value)
            if key == "($error)":
                return value is not None
    return None


def _enforcing(policy: dict[str, Any], documents: list[dict[str, Any]]) -> bool:
    """Whether the policy denies at admission (what an admission label measures)."""
    spec = policy.get("spec") or {}
    kind = policy.get("kind")
    if kind in ("ValidatingPolicy", "NamespacedValidatingPolicy"):
        admission = ((spec.get("evaluation") or {}).get("admission") or {}).get("enabled")
        actions = spec.get("validationActions") or ["Deny"]
        return admission is not False and "Deny" in actions
    if kind == "ValidatingAdmissionPolicy":
        name = (policy.get("metadata") or {}).get("name")
        return any(
            d.get("kind") == "ValidatingAdmissionPolicyBinding"
            and (d.get("spec") or {}).get("policyName") == name
            and "Deny" in ((d.get("spec") or {}).get("validationActions") or [])
            for d in documents
        )
    action = str(spec.get("validationFailureAction") or "Audit").lower()
    rules = spec.get("rules") or []
    per_rule = {
        str((r.get("validate") or {}).get("failureAction") or "").lower()
        for r in rules
        if isinstance(r, dict)
    }
    return spec.get("admission") is not False and (
        "enforce" in per_rule or (action == "enforce" and per_rule <= {"", "enforce"})
    )


def _files(state: _State) -> tuple[str, ...]:
    return tuple(dict.fromkeys(str(a.path.resolve()) for a in state.policy_files))


def _admission_labels(
    path: Path,
    applied: _Applied,
    expect: list[Any],
    state: _State,
    skipped: Counter[str],
) -> list[ChainsawFixture]:
    objects = [d for d in applied.documents if d.get("kind") not in INFRASTRUCTURE_KINDS]
    if not objects or not state.policy_files:
        return []
    refused = expects_refusal(expect)
    if refused is None:
        skipped["a chainsaw step that checks something other than the admission answer"] += 1
        return []
    if refused and len(objects) != 1:  # that one of them was refused is all it says
        skipped["a chainsaw step refused while creating several objects"] += 1
        return []
    updates = [o for o in objects if state.holds(o)]
    skipped["a chainsaw step that updates an object (an update request)"] += len(updates)
    objects = [o for o in objects if not state.holds(o)]
    if not objects:
        return []
    documents = [d for a in state.policy_files for d in a.documents]
    enforcing = [p for p in state.policies() if _enforcing(p, documents)]
    if len(enforcing) != 1:
        skipped[
            "a chainsaw admission no validating policy enforces"
            if not enforcing
            else "a chainsaw admission several policies judge"
        ] += 1
        return []
    policy = enforcing[0]
    return [
        ChainsawFixture(
            source=str(path),
            policy_files=_files(state),
            policy=str((policy.get("metadata") or {}).get("name") or ""),
            rule=None,
            obj=obj,
            context=tuple(state.objects),
            allowed=not refused,
            label="denied" if refused else "admitted",
        )
        for obj in objects
    ]


def _report_labels(
    path: Path, applied: _Applied, state: _State, skipped: Counter[str]
) -> list[ChainsawFixture]:
    out: list[ChainsawFixture] = []
    for report in applied.documents:
        if report.get("kind") not in REPORT_KINDS:
            continue
        scope = report.get("scope") or {}
        owners = (report.get("metadata") or {}).get("ownerReferences") or []
        target = scope or (owners[0] if owners and isinstance(owners[0], dict) else {})
        obj = next(
            (
                o
                for o in state.objects
                if o.get("kind") == target.get("kind")
                and (o.get("metadata") or {}).get("name") == target.get("name")
            ),
            None,
        )
        if obj is None:
            skipped["a chainsaw report on an object the test did not create"] += 1
            continue
        for result in report.get("results") or []:
            if not isinstance(result, dict):
                continue
            label = str(result.get("result") or "")
            if label not in ("pass", "fail", "skip"):
                skipped[f"a chainsaw report result of {label or 'no value'}"] += 1
                continue
            name = str(result.get("policy") or "")
            kinds = REPORT_SOURCES.get(str(result.get("source") or ""))
            candidates = [
                p
                for p in state.policies()
                if (p.get("metadata") or {}).get("name") == name
                and (kinds is None or p.get("kind") in kinds)
            ]
            if len(candidates) != 1:
                skipped["a chainsaw report result naming no single validating policy"] += 1
                continue
            files = tuple(
                str(a.path.resolve())
                for a in state.policy_files
                if candidates[0] in a.documents
                or not {d.get("kind") for d in a.documents}
                & (VALIDATING_KINDS | KYVERNO_RULE_KINDS)
            )
            out.append(
                ChainsawFixture(
                    source=str(path),
                    policy_files=tuple(dict.fromkeys(files)),
                    policy=name,
                    rule=(
                        str(result["rule"])
                        if candidates[0].get("kind") in KYVERNO_RULE_KINDS and result.get("rule")
                        else None
                    ),
                    obj=obj,
                    context=tuple(o for o in state.objects if o is not obj),
                    allowed=label != "fail",
                    label=label,
                )
            )
    return out
