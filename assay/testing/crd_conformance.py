"""The admission-document model held against Kyverno's and Gatekeeper's CRD schemas, and
real policy documents judged by both (bench/check_admission_model.py prints the figures).

assay ships no copy of another project's CRDs; they are read from a folder the user gives.
Which part of a CRD's documents the model reads is :data:`COVERAGE`: a Kyverno
ValidatingPolicy whole, a NamespacedValidatingPolicy's spec (the importer reads any served
version's spec with ``KyvernoSpec``), and a Gatekeeper ConstraintTemplate's CEL source, which
its CRD leaves undescribed (``x-kubernetes-preserve-unknown-fields``), so nothing of it can
be compared there and the output says so.

A document is judged the way each side reads it: by the CRD version its ``apiVersion``
names (unknown fields refused, as strict field validation does; nulls dropped, as the API
server prunes them; ``x-kubernetes-validations`` rules are not run, and are counted), and
by the model as the importer reads its spec (``Reading.ENGINE``). Documents a chainsaw test
only asserts or expects absent are partial and left out (counted).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema

from assay.testing.admission_conformance import Comparison, compare, strict
from assay.testing.chainsaw_suite import documents_of, expects_refusal, is_chainsaw_test
from workers.policy_engine.admission_schema import (
    KyvernoSpec,
    KyvernoValidatingPolicy,
    MatchCondition,
    ReadError,
    Reading,
    Validation,
    Variable,
    read,
)

KYVERNO_POLICIES = "policies.kyverno.io"
GATEKEEPER_TEMPLATES = "templates.gatekeeper.sh"
VALIDATING_POLICY_KINDS = ("ValidatingPolicy", "NamespacedValidatingPolicy")


@dataclass(frozen=True)
class Coverage:
    """One part of a CRD's documents the model reads: at ``path`` (dotted, ``[]`` for a
    list's items; empty for the whole document), ``part`` (a model, or the fields an
    importer reads from an object it otherwise walks itself), named ``name``."""

    group: str
    kind: str
    path: str
    part: Any
    name: str


COVERAGE = (
    Coverage(KYVERNO_POLICIES, "ValidatingPolicy", "", KyvernoValidatingPolicy,
             "KyvernoValidatingPolicy"),
    Coverage(KYVERNO_POLICIES, "NamespacedValidatingPolicy", "spec", KyvernoSpec,
             "KyvernoSpec (the importer reads this kind's spec; the model has no document of it)"),
    Coverage(GATEKEEPER_TEMPLATES, "ConstraintTemplate", "spec.targets[].code[].source",
             {"variables": list[Variable], "matchConditions": list[MatchCondition],
              "validations": list[Validation]},
             "Variable, MatchCondition, Validation (a K8sNativeValidation code source)"),
)  # fmt: skip


@dataclass(frozen=True)
class CrdVersion:
    """One version of a CustomResourceDefinition, with its schema at the document's root."""

    group: str
    kind: str
    version: str
    served: bool
    storage: bool
    schema: dict[str, Any]
    file: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def rules(self) -> int:
        """Its ``x-kubernetes-validations`` rules (CEL the API server runs; not run here)."""
        return json.dumps(self.schema).count('"rule":')


def _yaml_files(root: Path) -> list[Path]:
    return sorted(p for p in [*root.rglob("*.yaml"), *root.rglob("*.yml")] if p.is_file())


def crd_versions(root: Path) -> list[CrdVersion]:
    """Every version with a schema of the CRDs under ``root``; a CRD held in several files
    with the same schema (a chart's copy) counts once."""
    found: dict[tuple[str, str, str, str], CrdVersion] = {}
    for path in _yaml_files(root):
        for document in documents_of(path):
            if document.get("kind") != "CustomResourceDefinition":
                continue
            spec = document.get("spec") or {}
            names = spec.get("names") or {}
            for version in spec.get("versions") or []:
                schema = ((version or {}).get("schema") or {}).get("openAPIV3Schema")
                if not isinstance(schema, dict):
                    continue
                crd = CrdVersion(
                    group=str(spec.get("group")),
                    kind=str(names.get("kind")),
                    version=str(version.get("name")),
                    served=bool(version.get("served")),
                    storage=bool(version.get("storage")),
                    schema=schema,
                    file=str(path.relative_to(root)),
                )
                key = (crd.group, crd.kind, crd.version, json.dumps(schema, sort_keys=True))
                found.setdefault(key, crd)
    return list(found.values())


def _at(schema: dict[str, Any], path: str) -> tuple[dict[str, Any] | None, str]:
    """The node at ``path``, or None and where the schema stops describing the way there."""
    node = schema
    walked: list[str] = []
    for step in [s for s in path.split(".") if s]:
        name = step.removesuffix("[]")
        properties = node.get("properties")
        if not isinstance(properties, dict) or name not in properties:
            return None, ".".join(walked) or "(root)"
        node = properties[name]
        walked.append(name)
        if step.endswith("[]"):
            if not isinstance(node.get("items"), dict):
                return None, ".".join(walked)
            node = node["items"]
            walked[-1] += "[]"
    return node, path


@dataclass(frozen=True)
class Held:
    """One coverage held against one CRD version: the comparison, or where the CRD stops
    describing the way to the model's part (nothing compared)."""

    coverage: Coverage
    crd: CrdVersion
    comparison: Comparison | None
    stops_at: str | None = None


def hold(crds: list[CrdVersion]) -> list[Held]:
    """Every served version of the CRDs the model covers, compared with the model."""
    out = []
    for coverage in COVERAGE:
        for crd in crds:
            if (crd.group, crd.kind) != (coverage.group, coverage.kind) or not crd.served:
                continue
            node, where = _at(crd.schema, coverage.path)
            if node is None:
                out.append(Held(coverage, crd, None, stops_at=where))
                continue
            out.append(Held(coverage, crd, compare(coverage.part, node, coverage.path)))
    return out


# -- documents ---------------------------------------------------------------------------


# one operation of a chainsaw test: (the test's file, its block, its verb, its body)
Operation = tuple[Path, str, str, dict[str, Any]]


def _test_operations(root: Path) -> Iterator[Operation]:
    """Every operation of every chainsaw test under ``root``: (the test's file, its block
    (``try``, ``catch``, ``finally``, ``cleanup``), its verb, its body)."""
    for path in _yaml_files(root):
        head = path.read_text(encoding="utf-8", errors="replace")[:4000]
        if not is_chainsaw_test(head):
            continue
        for test in documents_of(path):
            for step in (test.get("spec") or {}).get("steps") or []:
                for block in ("try", "catch", "finally", "cleanup"):
                    for operation in (step or {}).get(block) or []:
                        for verb, body in (operation or {}).items():
                            if isinstance(body, dict):
                                yield path, block, verb, body


def _partial_files(operations: list[Operation]) -> set[Path]:
    """Files the chainsaw tests only assert (or assert absent): partial documents a cluster
    is compared with, never written to it."""
    written: set[Path] = set()
    checked: set[Path] = set()
    for path, _, verb, body in operations:
        if isinstance(body.get("file"), str):
            file = (path.parent / body["file"]).resolve()
            (checked if verb in ("assert", "error") else written).add(file)
    return checked - written


_APPLIED_FILE = re.compile(r"kubectl\s+(?:apply|create)\b.*?\s-f\s+(\S+)")


def _refused_files(operations: list[Operation]) -> set[Path]:
    """Files the chainsaw tests write (``apply``, ``create``, or ``kubectl apply -f`` in a
    ``script``) expecting the cluster to refuse them."""
    out: set[Path] = set()
    for path, block, verb, body in operations:
        if block != "try":
            continue
        if verb in ("apply", "create") and isinstance(body.get("file"), str):
            files = [body["file"]]
            expect = list(body.get("expect") or [])
        elif verb == "script" and isinstance(body.get("check"), dict):
            files = _APPLIED_FILE.findall(str(body.get("content") or ""))
            expect = [{"check": body["check"]}]
        else:
            continue
        if expects_refusal(expect):
            out.update((path.parent / f).resolve() for f in files)
    return out


@dataclass(frozen=True)
class Judged:
    """One ValidatingPolicy-kind document, as its CRD and as the model read it (the first
    problem each found; None: accepted)."""

    source: str
    crd_problem: str | None
    model_problem: str | None
    expected_refused: bool = False


@dataclass
class Judgement:
    judged: list[Judged] = field(default_factory=list)
    partial: int = 0
    unserved: list[str] = field(default_factory=list)  # versions no CRD given serves

    def count(self, crd_accepts: bool, model_accepts: bool) -> list[Judged]:
        return [
            j
            for j in self.judged
            if (j.crd_problem is None) == crd_accepts and (j.model_problem is None) == model_accepts
        ]


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def crd_problem(document: dict[str, Any], crd: CrdVersion) -> str | None:
    """The first problem the CRD's schema (strict) finds in ``document``; None: none."""
    validator = jsonschema.Draft4Validator(strict(crd.schema))
    error = jsonschema.exceptions.best_match(validator.iter_errors(_without_nulls(document)))
    if error is None:
        return None
    where = ".".join(map(str, error.absolute_path)) or "(root)"
    return f"{where}: {error.message[:300]}"


def model_problem(document: dict[str, Any]) -> str | None:
    """The first problem the model finds in the spec, read as the importer reads it."""
    spec = document.get("spec")
    if spec is None:
        return None
    try:
        read(KyvernoSpec, spec, Reading.ENGINE, "spec")
    except ReadError as exc:
        return str(exc)[:300]
    return None


def judge_documents(root: Path, crds: list[CrdVersion], into: Judgement) -> None:
    """Every ValidatingPolicy-kind document under ``root``, judged into ``into``."""
    by_version = {(c.api_version, c.kind): c for c in crds if c.served}
    operations = list(_test_operations(root))  # one read of the tests serves both
    partial, refused = _partial_files(operations), _refused_files(operations)
    for path in _yaml_files(root):
        documents = documents_of(path)
        for number, document in enumerate(documents):
            kind = document.get("kind")
            api_version = str(document.get("apiVersion"))
            if kind not in VALIDATING_POLICY_KINDS or not api_version.startswith(
                f"{KYVERNO_POLICIES}/"
            ):
                continue
            if path.resolve() in partial:
                into.partial += 1
                continue
            source = f"{path.relative_to(root)}#{number}"
            crd = by_version.get((api_version, str(kind)))
            if crd is None:
                into.unserved.append(f"{source}: {api_version} {kind}")
                continue
            into.judged.append(
                Judged(
                    source=source,
                    crd_problem=crd_problem(document, crd),
                    model_problem=model_problem(document),
                    expected_refused=path.resolve() in refused,
                )
            )
