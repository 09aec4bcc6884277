"""One check's results in a PolicyReport, as the engine that owns the policy would write them.

Where objects were judged one by one, a check has one result per (rule, object); else one
result for the check:

* **An imported policy** (``policy:NAME``): one result per object each rule judged, from
  the run's stored outcomes (``ProbeRun.judged``), never an object a rule did not judge (a
  match, exclusion or match condition left it out); an object a Kyverno PolicyException
  exempts is ``skip`` (or ``pass``, as the exception says), in Kyverno's words. ``policy``
  and ``rule`` are named as Kyverno's background scan names them: a ClusterPolicy's name
  and rule; a ValidatingPolicy's name, no rule (``exception`` for an exempt object); a
  ValidatingAdmissionPolicy's name as both, its binding in ``properties.binding``; a
  Gatekeeper constraint's name, its template as the rule.
  ``message`` is the policy's own for a failure, and the engine's own words for a pass
  (ClusterPolicy ``Validation rule 'R' passed.``, ValidatingPolicy ``success``, none for a
  ValidatingAdmissionPolicy or Gatekeeper); ``properties.process`` is ``background
  scan``, as Kyverno says of the stored objects it judges. A rule over a kind it could not
  judge (a listing failed, a CEL error, the deadline) is one ``error`` result naming why.
* **A model's probe over each object** (docs/probes.md): one result per object it judged,
  in order, up to and including the first failing one (the rest were not judged).
* **Anything else**: one result, ``pass``/``fail``/``error``/``skip`` for ``true``/
  ``false``/``cannot_determine``/``poorly_posed``, with the explanation.

``category``, ``severity`` and ``scored`` come from the policy's annotations, as Kyverno
reads them (``policies.kyverno.io/category``, ``/severity``, ``/scored``, on the Kyverno
policy, the ValidatingAdmissionPolicy (then its binding), the Gatekeeper constraint (then
its template)); Gatekeeper documents no such annotations of its own. Failing that, from the
``assay.dev/category`` / ``assay.dev/severity`` labels of the Check or Schedule that
declared the run. A result whose policy says ``scored: "false"`` reports ``warn`` for a
failure, as Kyverno does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from schemas.policy import POLICY_PREFIX
from schemas.verdict import Verdict, VerdictKind

if TYPE_CHECKING:
    from schemas.policy import ImportedPolicy, PolicyProbeResult, PolicyResult
    from schemas.probe import JudgedObject
    from schemas.report import RunReport

ResultStatus = Literal["pass", "fail", "warn", "error", "skip"]
RESULT_OF: dict[VerdictKind, ResultStatus] = {
    VerdictKind.TRUE: "pass",
    VerdictKind.FALSE: "fail",
    VerdictKind.CANNOT_DETERMINE: "error",
    VerdictKind.POORLY_POSED: "skip",
}
SOURCE = "assay"
CATEGORY_ANNOTATION = "policies.kyverno.io/category"
SEVERITY_ANNOTATION = "policies.kyverno.io/severity"
SCORED_ANNOTATION = "policies.kyverno.io/scored"
CATEGORY_LABEL = "assay.dev/category"
SEVERITY_LABEL = "assay.dev/severity"
SEVERITIES = frozenset({"critical", "high", "medium", "low", "info"})
PASS_MESSAGES: dict[str, str | None] = {
    "kyverno-clusterpolicy": "Validation rule '{rule}' passed.",
    "kyverno-validatingpolicy": "success",
    "vap": None,
    "gatekeeper": None,
}
PROPERTY_CHARS = 1024
MESSAGE_CHARS = 2048
EVIDENCE_SHOWN = 10


@dataclass
class CheckResult:
    """What a report says of one check: its latest verdict, and the run that gave it."""

    check_id: str
    target: str
    predicate: str
    verdict: Verdict
    policy: str  # the declared check's or schedule's name, else the check id
    report: RunReport | None = None
    imported: ImportedPolicy | None = None  # a ``policy:NAME`` check's policy, as stored
    labels: dict[str, str] = field(default_factory=dict)  # its Check's or Schedule's
    notify: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Resource:
    """The object a result is about, as ``results[].resources`` names it."""

    kind: str
    name: str
    namespace: str | None = None
    api_version: str | None = None
    uid: str | None = None

    def reference(self) -> dict[str, str]:
        out = {"apiVersion": self.api_version} if self.api_version else {}
        out |= {"kind": self.kind, "name": self.name}
        if self.namespace:
            out["namespace"] = self.namespace
        if self.uid:
            out["uid"] = self.uid
        return out


@dataclass(frozen=True)
class Result:
    """One result, before it is written: which report holds it and what it says."""

    policy: str
    status: ResultStatus
    timestamp: datetime
    properties: dict[str, str]
    rule: str | None = None
    message: str | None = None
    scored: bool = True
    category: str | None = None
    severity: str | None = None
    resource: Resource | None = None
    namespace: str | None = None  # the report's namespace (None: the cluster report)
    filtered: bool = False  # an imported policy's: namespace exclusions apply, as Kyverno's

    def document(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": SOURCE, "policy": self.policy}
        if self.rule:
            out["rule"] = self.rule
        if self.category:
            out["category"] = self.category
        if self.severity:
            out["severity"] = self.severity
        out["result"] = self.status
        out["scored"] = self.scored
        out["timestamp"] = {
            "seconds": int(self.timestamp.timestamp()),
            "nanos": self.timestamp.microsecond * 1000,
        }
        if self.message:
            out["message"] = cut(self.message, MESSAGE_CHARS)
        if self.resource is not None:
            out["resources"] = [self.resource.reference()]
        out["properties"] = {k: cut(str(v), PROPERTY_CHARS) for k, v in self.properties.items()}
        return out


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def results_of(check: CheckResult) -> list[Result]:
    """Every result ``check`` has in a target's reports (above)."""
    report = check.report
    if report is not None and report.policy_set is not None and report.policy_set.policies:
        return []  # a set's run: each of its policies reports, as its own check
    if report is not None and report.policy is not None and check.imported is not None:
        return _policy_results(check, check.imported, report.policy)
    objects = _probe_results(check)
    if objects is not None:
        return objects
    verdict = check.verdict
    status = RESULT_OF[verdict.verdict]
    return [_check_level(check, status, verdict.explanation or verdict.verdict.value)]


# --- imported policies -------------------------------------------------------------------------


def _policy_results(
    check: CheckResult, policy: ImportedPolicy, result: PolicyResult
) -> list[Result]:
    meta = _Metadata.of(policy, check.labels)
    name = policy.policy_name if policy.format == "vap" else policy.name
    properties = {
        "process": "background scan",  # as Kyverno says of stored objects it judged
        "check_id": check.check_id,
        "run_id": check.verdict.run_id,
        "target": check.target,
        "format": policy.format,
    }
    binding = _binding_name(policy)
    if binding is not None:
        properties["binding"] = binding
    common: dict[str, Any] = {
        "policy": name,
        "timestamp": check.verdict.finished_at,
        "properties": properties,
        "scored": meta.scored,
        "category": meta.category,
        "severity": meta.severity,
        "filtered": True,
    }
    out: list[Result] = []
    for probe in result.probes:
        rule = None if policy.format == "kyverno-validatingpolicy" else probe.rule
        if probe.run.verdict is None:
            out.append(_probe_error(probe, rule, common))
            continue
        for judged in _judged_of(probe):
            status: ResultStatus = "pass" if judged.passed else "fail"
            if status == "fail" and not meta.scored:
                status = "warn"
            message = judged.message if not judged.passed else _pass_message(policy, probe)
            named = rule
            if judged.exception:  # exempt by a Kyverno PolicyException, reported as Kyverno
                status, message, named = _exempt(policy, judged.exception, rule)
            out.append(
                Result(
                    **common,
                    rule=named,
                    status=status,
                    message=message,
                    resource=_resource(judged, probe.kind),
                    namespace=judged.namespace or None,
                )
            )
    if not result.probes and result.verdict != VerdictKind.TRUE:
        why = result.reason or check.verdict.explanation
        out.append(Result(**common, status=RESULT_OF[result.verdict], message=why))
    return out


def _exempt(
    policy: ImportedPolicy, exception: str, rule: str | None
) -> tuple[ResultStatus, str, str | None]:
    """The result Kyverno reports for an object the PolicyException ``exception``
    (namespace/name) exempts: for a ValidatingPolicy, rule ``exception``, ``skip`` (``pass``
    when the exception says ``reportResult: pass``), "rule is skipped due to policy
    exception: NAME"; for a ClusterPolicy rule, ``skip``, "rule is skipped due to policy
    exception NAME" (its background scan's words)."""
    if policy.format != "kyverno-validatingpolicy":
        return "skip", f"rule is skipped due to policy exception {exception}", rule
    reported = "skip"
    for document in policy.documents[1:]:
        meta = document.get("metadata")
        spec = document.get("spec")
        if document.get("kind") != "PolicyException" or not isinstance(meta, dict):
            continue
        if f"{meta.get('namespace')}/{meta.get('name')}" == exception and isinstance(spec, dict):
            reported = "pass" if spec.get("reportResult") == "pass" else "skip"
    said = "passed" if reported == "pass" else "skipped"
    status: ResultStatus = "pass" if reported == "pass" else "skip"
    return status, f"rule is {said} due to policy exception: {exception}", "exception"


def _judged_of(probe: PolicyProbeResult) -> list[JudgedObject]:
    """The objects a rule judged; from a run stored before outcomes were kept, its
    violations (the objects that passed are not known, so none is reported as passing)."""
    from schemas.probe import JudgedObject

    run = probe.run
    if run.judged is not None:
        return run.judged
    return [
        JudgedObject(**v.model_dump(exclude={"message"}), passed=False, message=v.message)
        for v in run.violations
    ]


def _probe_error(probe: PolicyProbeResult, rule: str | None, common: dict[str, Any]) -> Result:
    where = probe.kind + (f" in namespace {probe.namespace}" if probe.namespace else "")
    why = probe.run.error or "it gave no value"
    return Result(
        **common,
        rule=rule,
        status="error",
        message=f"{where} could not be judged: {why}",
        namespace=probe.namespace,
    )


def _pass_message(policy: ImportedPolicy, probe: PolicyProbeResult) -> str | None:
    template = PASS_MESSAGES.get(policy.format)
    return template.format(rule=probe.rule) if template else None


def _resource(judged: JudgedObject, kind: str) -> Resource:
    return Resource(
        kind=judged.kind if judged.kind and judged.kind != "?" else kind,
        name=judged.name,
        namespace=judged.namespace or None,
        api_version=judged.api_version,
        uid=judged.uid,
    )


def _binding_name(policy: ImportedPolicy) -> str | None:
    for document in policy.documents:
        if document.get("kind") == "ValidatingAdmissionPolicyBinding":
            return _name(document)
    return None


@dataclass(frozen=True)
class _Metadata:
    category: str | None
    severity: str | None
    scored: bool

    @classmethod
    def of(cls, policy: ImportedPolicy | None, labels: Mapping[str, str]) -> _Metadata:
        annotations = _annotations(policy) if policy is not None else {}
        category = annotations.get(CATEGORY_ANNOTATION) or labels.get(CATEGORY_LABEL)
        severity = (annotations.get(SEVERITY_ANNOTATION) or "").strip().lower()
        if severity not in SEVERITIES:
            severity = (labels.get(SEVERITY_LABEL) or "").strip().lower()
        return cls(
            category=category.strip() if category and category.strip() else None,
            severity=severity if severity in SEVERITIES else None,
            scored=annotations.get(SCORED_ANNOTATION, "").strip().lower() != "false",
        )


def _annotations(policy: ImportedPolicy) -> dict[str, str]:
    """The annotations of the policy's own documents, the first of them winning: a Kyverno
    policy; a ValidatingAdmissionPolicy, then its binding (not its params object); a
    Gatekeeper constraint, then its template."""
    own = policy.documents[:2]  # policy and binding; template and constraint
    ordered = list(reversed(own)) if policy.format == "gatekeeper" else own
    out: dict[str, str] = {}
    for document in ordered:
        metadata = document.get("metadata")
        found = metadata.get("annotations") if isinstance(metadata, dict) else None
        if isinstance(found, dict):
            for key, value in found.items():
                if isinstance(value, str):
                    out.setdefault(str(key), value)
    return out


def _name(document: Mapping[str, Any]) -> str | None:
    metadata = document.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return str(name) if name else None


# --- a model's probe over each object ----------------------------------------------------------


def _probe_results(check: CheckResult) -> list[Result] | None:
    """Per-object results of the check's accepted each-object probe, when it gave this
    verdict and recorded what it judged; None otherwise (the check has one result)."""
    outcome = check.report.probe if check.report is not None else None
    verdict = check.verdict
    if outcome is None or outcome.status != "accepted" or outcome.probe is None:
        return None
    probe, run = outcome.probe, outcome.run
    if probe.scope != "each_object" or run.verdict != verdict.verdict or run.judged is None:
        return None
    held: ResultStatus = "pass" if probe.verdict_for(True) == VerdictKind.TRUE else "fail"
    broke: ResultStatus = "pass" if probe.verdict_for(False) == VerdictKind.TRUE else "fail"
    kind = run.objects[0].kind if run.objects else "Object"
    explanation = verdict.explanation or verdict.verdict.value
    passed_note = (
        explanation
        if verdict.verdict == VerdictKind.TRUE
        else f"the check's expression holds for this object: {probe.summary()}"
    )
    return [
        _check_level(
            check,
            held if judged.passed else broke,
            passed_note if judged.passed else explanation,
            _resource(judged, kind),
        )
        for judged in run.judged
    ]


# --- one result per check ----------------------------------------------------------------------


def _check_level(
    check: CheckResult, status: ResultStatus, message: str, resource: Resource | None = None
) -> Result:
    meta = _Metadata.of(check.imported, check.labels)
    if status == "fail" and not meta.scored:
        status = "warn"
    policy = check.policy
    if check.imported is not None and check.predicate.strip().startswith(POLICY_PREFIX):
        policy = check.imported.name
    return Result(
        policy=policy,
        rule=check.check_id,
        status=status,
        message=message,
        timestamp=check.verdict.finished_at,
        properties=_check_properties(check),
        scored=meta.scored,
        category=meta.category,
        severity=meta.severity,
        resource=resource,
        namespace=resource.namespace if resource is not None else None,
    )


def _check_properties(check: CheckResult) -> dict[str, str]:
    verdict = check.verdict
    props = {
        "predicate": check.predicate,
        "verdict": verdict.verdict.value,
        "check_id": check.check_id,
        "run_id": verdict.run_id,
        "target": check.target,
        "source": str(verdict.source),
        "profile": verdict.profile,
        "evidence_verified": str(verdict.evidence_verified).lower(),
    }
    if verdict.model:
        props["model"] = verdict.model
    if verdict.reason:
        props["reason"] = verdict.reason
    outcome = check.report.probe if check.report is not None else None
    if outcome is not None and outcome.run.judged is not None:
        props["objects_read"] = str(outcome.run.objects_read)
    for index, item in enumerate(verdict.evidence[:EVIDENCE_SHOWN]):
        args = " ".join(f"{k}={v}" for k, v in sorted(item.arguments.items()))
        props[f"evidence.{index}"] = f"step {item.step} {item.tool} {args}: {item.excerpt}"
    return props
