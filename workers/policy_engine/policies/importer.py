"""``assay probe import``: policy documents in, imported policies and refusals out.

The documents of all the files given are read together, so a policy and its binding, params
object or constraint may sit in different files. Every policy document either becomes one
or more :class:`ImportedPolicy` or is refused with one sentence saying why; documents that
are no policy (a params object, a binding, a constraint, a Kyverno PolicyException or
GlobalContextEntry, anything else) are used by the policy that names them, and reported when
nothing does.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial

from pydantic import ValidationError

from schemas.policy import NO_KIND, POLICY_NAME_PATTERN, ImportedPolicy, ImportRefusal
from workers.policy_engine.policies import gatekeeper, kyverno, kyverno_exceptions, vap
from workers.policy_engine.policies.cluster_reads import GLOBAL_CONTEXT_KIND
from workers.policy_engine.policies.common import Unsupported, label_selector
from workers.policy_engine.policies.documents import SourcedDocument, name_of
from workers.policy_engine.policies.kyverno_exceptions import Acceptance, Applied

VAP_GROUP = "admissionregistration.k8s.io"
KYVERNO_POLICIES_GROUP = "policies.kyverno.io"
KYVERNO_GROUP = "kyverno.io"
GATEKEEPER_TEMPLATES_GROUP = "templates.gatekeeper.sh"


def import_documents(
    documents: list[SourcedDocument],
    now: datetime | None = None,
    exceptions_accepted: Acceptance | None = None,
) -> tuple[list[ImportedPolicy], list[ImportRefusal]]:
    """Every policy the documents hold, and every refusal, in document order.
    ``exceptions_accepted``: which Kyverno PolicyExceptions apply (default: every one)."""
    now = now or datetime.now(UTC)
    policies: list[ImportedPolicy] = []
    refusals: list[ImportRefusal] = []
    used: set[int] = set()

    def attempt(doc: SourcedDocument, make: Callable[[], list[ImportedPolicy]]) -> None:
        used.add(id(doc))
        try:
            made = make()
        except Unsupported as exc:
            refusals.append(_refusal(doc, str(exc)))
            return
        except ValueError as exc:  # a value the policy model refuses (a name, a limit)
            refusals.append(_refusal(doc, _first_line(exc)))
            return
        policies.extend(made)

    exceptions: list[SourcedDocument] = []
    not_accepted: dict[int, str] = {}  # exceptions this Kyverno configuration does not apply
    accepted = exceptions_accepted or Acceptance()
    for doc in (d for d in documents if kyverno_exceptions.is_exception(d)):
        if (reason := accepted.refusal(doc)) is None:
            exceptions.append(doc)
        else:
            not_accepted[id(doc)] = reason
    entries = [d for d in documents if _is(d, KYVERNO_GROUP, GLOBAL_CONTEXT_KIND)]

    def kyverno_policy(make: Callable[[], tuple[ImportedPolicy, Applied]]) -> list[ImportedPolicy]:
        policy, applied = make()
        used.update(id(d) for d in applied.documents)
        for doc, reason in applied.not_applied:
            used.add(id(doc))
            refusals.append(_refusal(doc, f"for policy {policy.name}: {reason}"))
        used.update(id(e) for e in entries if e.document in policy.documents)
        return [policy]

    bound: dict[str, list[SourcedDocument]] = {}  # each binding read once, by its policy
    for binding in (d for d in documents if _is(d, VAP_GROUP, "ValidatingAdmissionPolicyBinding")):
        bound.setdefault(vap.binding_policy(binding), []).append(binding)
    templates = [d for d in documents if _is(d, GATEKEEPER_TEMPLATES_GROUP, "ConstraintTemplate")]
    kinds_of_templates = {gatekeeper.template_kind(t) for t in templates}
    for doc in documents:
        if id(doc) in not_accepted:
            used.add(id(doc))
            refusals.append(_refusal(doc, not_accepted[id(doc)]))
        elif _is(doc, VAP_GROUP, "ValidatingAdmissionPolicy"):
            mine = bound.get(name_of(doc.document), [])
            used.update(id(b) for b in mine)
            attempt(doc, partial(vap.import_vap, doc, mine, documents, now))
        elif doc.api_group == KYVERNO_POLICIES_GROUP and doc.kind in (
            kyverno.VALIDATING_POLICY_KINDS
        ):
            make = partial(kyverno.import_validating_policy, doc, now, exceptions, entries)
            attempt(doc, partial(kyverno_policy, make))
        elif doc.api_group == KYVERNO_GROUP and doc.kind in kyverno.CLUSTER_POLICY_KINDS:
            make = partial(kyverno.import_cluster_policy, doc, now, exceptions)
            attempt(doc, partial(kyverno_policy, make))
        elif _is(doc, GATEKEEPER_TEMPLATES_GROUP, "ConstraintTemplate"):
            kind = gatekeeper.template_kind(doc)
            mine = [
                d
                for d in documents
                if d.api_group == gatekeeper.CONSTRAINTS_GROUP and d.kind == kind
            ]
            used.update(id(c) for c in mine)
            attempt(doc, partial(gatekeeper.import_template, doc, mine, now))
    _refuse_leftovers(documents, policies, used, kinds_of_templates, refusals)
    return _unique(policies, refusals), refusals


def _refuse_leftovers(
    documents: list[SourcedDocument],
    policies: list[ImportedPolicy],
    used: set[int],
    template_kinds: set[str],
    refusals: list[ImportRefusal],
) -> None:
    """Documents no policy used: say what they are, so nothing is dropped silently."""
    params_kinds = {
        (d.get("apiVersion"), d.get("kind"))
        for policy in policies
        for d in policy.documents[1:]
        if d.get("kind") not in (kyverno_exceptions.EXCEPTION_KIND, GLOBAL_CONTEXT_KIND)
    }
    for doc in documents:  # a params object of a policy in the files, imported or refused
        spec = doc.document.get("spec")
        if _is(doc, VAP_GROUP, "ValidatingAdmissionPolicy") and isinstance(spec, dict):
            kind = spec.get("paramKind")
            if isinstance(kind, dict):
                params_kinds.add((kind.get("apiVersion"), kind.get("kind")))
    ignored = _ignored_params(documents)
    for doc in documents:
        if id(doc) in used or (doc.document.get("apiVersion"), doc.kind) in params_kinds:
            continue
        if id(doc) in ignored:
            continue  # named by a paramRef Kubernetes ignores: nothing to import or refuse
        if doc.kind == "ValidatingAdmissionPolicyBinding":
            reason = f"it binds the policy {vap.binding_policy(doc)!r}, which is not in the files"
        elif doc.api_group == gatekeeper.CONSTRAINTS_GROUP:
            reason = f"its ConstraintTemplate ({doc.kind}) is not in the files"
            if doc.kind in template_kinds:
                continue
        elif kyverno_exceptions.is_exception(doc):
            reason = (
                "it exempts objects from no policy imported from the files (the policies it "
                "names are not in them, or were refused)"
            )
        elif _is(doc, KYVERNO_GROUP, GLOBAL_CONTEXT_KIND):
            reason = "no policy imported from the files reads this global context entry"
        elif doc.api_group in (KYVERNO_GROUP, KYVERNO_POLICIES_GROUP):
            reason = f"a Kyverno {doc.kind} is not a validating policy"
        else:
            reason = (
                "it is not a policy this import reads (ValidatingAdmissionPolicy, Kyverno "
                "ValidatingPolicy or ClusterPolicy, Gatekeeper ConstraintTemplate) and no "
                "policy in the files names it as params"
            )
        refusals.append(_refusal(doc, reason))


def _ignored_params(documents: list[SourcedDocument]) -> set[int]:
    """Documents a binding's ``paramRef`` names when its policy (in the files) takes no
    params (no ``paramKind``): Kubernetes ignores that paramRef, and so does the import."""
    takes_params = {
        name_of(d.document): bool((d.document.get("spec") or {}).get("paramKind"))
        for d in documents
        if _is(d, VAP_GROUP, "ValidatingAdmissionPolicy")
        and isinstance(d.document.get("spec"), dict)
    }
    ignored: set[int] = set()
    for binding in documents:
        if not _is(binding, VAP_GROUP, "ValidatingAdmissionPolicyBinding"):
            continue
        if takes_params.get(vap.binding_policy(binding), True):
            continue
        spec = vap.binding_spec(binding)
        ref = spec.param_ref if spec is not None else None
        if ref is None:
            continue
        if not ref.name:
            try:
                if label_selector(ref.selector, "paramRef.selector") is None:
                    continue  # none, or an empty one, names no object in particular
            except Unsupported:
                continue  # a selector the API server refuses selects nothing
        picks = vap.picker(ref)
        ignored.update(id(doc) for doc in documents if picks(doc))
    return ignored


def _unique(policies: list[ImportedPolicy], refusals: list[ImportRefusal]) -> list[ImportedPolicy]:
    """Two policies of the files with one name: the later is refused (names are ids)."""
    seen: dict[str, ImportedPolicy] = {}
    for policy in policies:
        if policy.name in seen:
            first = seen[policy.name]
            refusals.append(
                ImportRefusal(
                    source=policy.source,
                    kind=policy.format,
                    name=policy.name,
                    reason=f"another policy of the files ({first.format} from {first.source}) "
                    "already has this name",
                )
            )
            continue
        seen[policy.name] = policy
    return list(seen.values())


def _is(doc: SourcedDocument, group: str, kind: str) -> bool:
    return doc.api_group == group and doc.kind == kind


def _refusal(doc: SourcedDocument, reason: str) -> ImportRefusal:
    name = name_of(doc.document) or "(no name)"
    return ImportRefusal(source=doc.source, kind=doc.kind or NO_KIND, name=name, reason=reason)


def _first_line(exc: ValueError) -> str:
    """A model's refusal in one line: the first problem, where it is."""
    if isinstance(exc, ValidationError):
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        if where.startswith("name") or where == "name":
            return f"its name is not a valid policy name ({POLICY_NAME_PATTERN}): {message}"
        return f"{where}: {message}" if where else message
    return " ".join(str(exc).split())[:300]
