"""Pieces every importer shares: reading admission-API shapes into the neutral policy model.

A document's admission-API parts (match constraints, variables, match conditions,
validations, params) are read through the one admission-document model
(``workers/policy_engine/admission_schema.py``, as an engine reads them: :func:`parsed`),
and what the model hands back is turned into the neutral model here. Each importer
(``vap.py``, ``kyverno.py``, ``gatekeeper.py``) raises :class:`Unsupported`
with one sentence when a document asks for something a check of stored objects cannot
honour; :func:`refusal_in` is the expression-level part of that (what a policy's CEL reads).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from pydantic import BaseModel

from schemas.kubernetes_metadata import LabelSelector, SelectorError
from schemas.policy import KindRef, ResourceFilter
from schemas.probe import ProbeCondition, ProbeValidation, ProbeVariable
from workers.policy_engine import admission_schema
from workers.policy_engine.admission_schema import (
    MatchCondition,
    MatchResources,
    ReadError,
    Reading,
    RuleWithOperations,
    Validation,
    Variable,
)
from workers.policy_engine.cel.programs import RESERVED_PREFIX
from workers.policy_engine.policies.expressions import global_calls, references
from workers.policy_engine.probes.admission_inputs import SERVED_REQUEST_FIELDS

ADMITTING_OPERATIONS = frozenset({"CREATE", "UPDATE", "*"})
_USER = "Kyverno's user library, which assay does not serve"
_RANDOM = (
    "Kyverno's random library: its answer is new at every call, so a verdict would not "
    "follow from the stored object"
)
_KYVERNO_LIBRARIES = {
    "resource": "Kyverno's resource library, which only a Kyverno ValidatingPolicy has",
    "http": "Kyverno's http library (it calls a service over the network)",
    "globalContext": "Kyverno's global context, which only a Kyverno ValidatingPolicy has",
    "generator": "Kyverno's generator library (it creates objects)",
    "imagedata": "Kyverno's image data (it reads a registry over the network)",
    "hash": "Kyverno's hash library, which only a Kyverno ValidatingPolicy has",
    "json": "Kyverno's json library, which only a Kyverno ValidatingPolicy has",
    **{name: f"Kyverno's {name} library, which only a Kyverno ValidatingPolicy has"
       for name in ("yaml", "math", "time", "gzip", "transform", "x509")},
    "random": _RANDOM,
    "user": _USER,
}  # fmt: skip
# What a Kyverno ValidatingPolicy may read of its target, served from the target's listings
# and kinds (cluster_reads.py): resource.Get / List / ToGVR and globalContext.Get, each in
# Kyverno's two spellings. resource.Post creates objects (or asks the API server a question,
# a SubjectAccessReview).
_SERVED_LIBRARY_CALLS = {
    "resource": frozenset({"Get", "get", "List", "list", "ToGVR", "toGVR"}),
    "globalContext": frozenset({"Get", "get"}),
    # pure functions of their arguments (cel/lib/kyverno_hash.py, kyverno_json.py)
    "hash": frozenset({"sha1", "sha256", "md5"}),
    "json": frozenset({"unmarshal", "marshal"}),
    # cel/lib/kyverno_yaml.py, kyverno_math.py, kyverno_time.py (time.now: the check's
    # clock), kyverno_gzip.py, kyverno_transform.py, kyverno_x509.py
    "x509": frozenset({"decode"}),
    "yaml": frozenset({"parse"}),
    "math": frozenset({"round"}),
    "time": frozenset({"now", "truncate", "toCron"}),
    "gzip": frozenset({"decompress"}),
    "transform": frozenset({"listObjToMap"}),
}
# Calls of a served library that are not served, and why.
_UNSERVED_CALLS = {
    "gzip.compress": "it calls Kyverno's gzip.compress, whose bytes are Go's own deflate "
    "encoder's, which assay cannot reproduce byte for byte",
}
# Kyverno's global functions (cel/lib/kyverno_hash.py, kyverno_image.py): only a Kyverno
# ValidatingPolicy has them.
_KYVERNO_FUNCTIONS = {
    "sha1": "Kyverno's hash library", "sha256": "Kyverno's hash library",
    "md5": "Kyverno's hash library", "image": "Kyverno's image library",
    "parseImageReference": "Kyverno's image library", "isImage": "Kyverno's image library",
    "listObjToMap": "Kyverno's transform library",
}  # fmt: skip
_LIBRARY_CALLS_REFUSED = {
    "Post": "it calls Kyverno's resource.Post, which creates an object (or asks the API "
    "server, as a SubjectAccessReview does), and a check never writes to its target",
}


class Unsupported(Exception):
    """The document cannot become a check; the message says why, in one sentence."""


def as_list(value: Any, what: str, error: type[Exception] = Unsupported) -> list[Any]:
    """A list of a document (none given: []); ``error`` (the reader's own refusal) when it is
    something else."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise error(f"{what} is not a list")
    return value


def as_map(value: Any, what: str, error: type[Exception] = Unsupported) -> dict[str, Any]:
    """A mapping of a document (none given: {}); ``error`` when it is something else."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise error(f"{what} is not a mapping")
    return value


Part = TypeVar("Part", bound=BaseModel)


def parsed(
    shape: type[Part], value: Any, what: str, error: type[Exception] = Unsupported
) -> Part | None:
    """``value`` read as an engine reads an admission-API part; None for none given;
    ``error`` with the model's one sentence when it is not of that shape."""
    if value is None:
        return None
    try:
        return admission_schema.read(shape, value, Reading.ENGINE, what)
    except ReadError as exc:
        raise error(str(exc)) from None


def parsed_list(
    shape: type[Part], value: Any, what: str, error: type[Exception] = Unsupported
) -> list[Part]:
    """A list of ``shape`` read as an engine reads it; [] for none given."""
    if value is None:
        return []
    try:
        return admission_schema.read(list[shape], value, Reading.ENGINE, what)  # type: ignore[valid-type]
    except ReadError as exc:
        raise error(str(exc)) from None


def label_selector(value: Any, what: str) -> LabelSelector | None:
    """A Kubernetes label selector (its API form, or the admission model's), checked as the
    API server checks one; None for none given (match everything)."""
    if value is None:
        return None
    if isinstance(value, BaseModel):
        value = admission_schema.written(value)
    try:
        selector = LabelSelector.from_api(value, what)
    except SelectorError as exc:
        raise Unsupported(str(exc)) from exc
    return None if selector.empty else selector


def resource_rule_kinds(rule: RuleWithOperations, what: str) -> tuple[list[KindRef], list[str]]:
    """The kinds of one ``resourceRules`` entry (a ValidatingAdmissionPolicy's), and its
    ``resourceNames``. Refuses rules that judge no stored object: every resource (``*``),
    only subresources, or only deletions and connections."""
    operations = rule.operations
    if operations and not ADMITTING_OPERATIONS & set(operations):
        raise Unsupported(
            f"{what} judges only {', '.join(operations)} requests, not objects as they are "
            "created or updated"
        )
    groups = rule.api_groups or ["*"]
    versions = rule.api_versions or ["*"]
    plain = [r for r in rule.resources if "/" not in r]
    if not plain:
        raise Unsupported(
            f"{what} names only subresources ({', '.join(rule.resources) or 'none'}), which "
            "are requests, not stored objects"
        )
    if "*" in plain:
        raise Unsupported(f"{what} matches every resource ('*'); name the resources it judges")
    kinds = [
        KindRef(group=group, version=version, name=resource)
        for resource in plain
        for group in groups
        for version in (versions if "*" not in versions else ["*"])
    ]
    return kinds, list(rule.resource_names)


def vap_match_filter(constraints: MatchResources | None, what: str) -> ResourceFilter | None:
    """A ``matchConstraints`` / binding ``matchResources`` block as one filter term (its
    ``resourceRules`` become the kinds; ``scope`` and ``resourceNames`` must agree across
    its rules). None for an absent or empty block."""
    if constraints is None or not constraints.model_fields_set:
        return None
    kinds: list[KindRef] | None = None
    named: set[tuple[str, ...]] = set()
    scopes: set[str] = set()
    for index, rule in enumerate(constraints.resource_rules):
        rule_kinds, rule_names = resource_rule_kinds(rule, f"{what}.resourceRules[{index}]")
        kinds = (kinds or []) + rule_kinds
        named.add(tuple(sorted(rule_names)))
        scopes.add(rule.scope or "*")
    # One term holds the kinds of every rule and one list of names: rules that name objects
    # differently (in whatever order) would narrow each other's kinds to the other's names,
    # and a kind whose objects are all left out passes unseen.
    if len(named) > 1:
        raise Unsupported(f"{what} names objects in some resource rules and not in others")
    names = (list(named.pop()) or None) if named else None
    if len(scopes) > 1:
        raise Unsupported(f"{what} mixes resource rule scopes {sorted(scopes)}")
    return ResourceFilter(
        kinds=kinds,
        names=names,
        namespace_selector=label_selector(
            constraints.namespace_selector, f"{what}.namespaceSelector"
        ),
        object_selector=label_selector(constraints.object_selector, f"{what}.objectSelector"),
        scope=scopes.pop() if scopes else "*",
    )


def vap_exclusions(constraints: MatchResources | None, what: str) -> list[list[ResourceFilter]]:
    """``excludeResourceRules`` as exclusion groups (one per rule)."""
    if constraints is None:
        return []
    out: list[list[ResourceFilter]] = []
    for index, rule in enumerate(constraints.exclude_resource_rules):
        kinds, names = resource_rule_kinds(rule, f"{what}.excludeResourceRules[{index}]")
        out.append([ResourceFilter(kinds=kinds, names=names or None)])
    return out


def variables_of(items: list[Variable], what: str) -> list[ProbeVariable]:
    out = []
    for item in items:
        if item.name.startswith(RESERVED_PREFIX):  # the adapter's own (Kyverno's exceptions)
            raise Unsupported(
                f"{what} names a variable {item.name!r}, and names beginning "
                f"{RESERVED_PREFIX} are assay's"
            )
        out.append(ProbeVariable(name=item.name, expression=_text(item.expression, what)))
    return out


def conditions_of(items: list[MatchCondition], what: str) -> list[ProbeCondition]:
    return [
        ProbeCondition(name=item.name, expression=_text(item.expression, what)) for item in items
    ]


def validations_of(
    items: list[Validation], what: str, default_message: Any = None
) -> list[ProbeValidation]:
    """``default_message``: a Kyverno rule's ``validate.message``, for expressions without one."""
    out = []
    for item in items:
        message = item.message or (str(default_message) if default_message else None)
        out.append(
            ProbeValidation(
                expression=_text(item.expression, what),
                message=" ".join(message.split()) if message else None,
                message_expression=item.message_expression or None,
                reason=item.reason or None,
            )
        )
    return out


def _text(expression: str, what: str) -> str:
    if not expression.strip():
        raise Unsupported(f"{what} has an entry without an expression")
    return expression.strip()


def judges_creations(constraints: MatchResources | None) -> bool:
    """Whether a ``matchConstraints`` block admits CREATE requests (a resource rule with
    ``CREATE``, ``*`` or no operations named): only then is a stored object judged as its
    CREATE, with ``oldObject`` null."""
    rules = constraints.resource_rules if constraints is not None else []
    for rule in rules:
        if not rule.operations or {"CREATE", "*"} & set(rule.operations):
            return True
    return not rules


def refusal_in(
    expressions: Iterable[str],
    *,
    params_given: bool,
    creates: bool = True,
    kyverno_libraries: bool = False,
) -> str | None:
    """Why these expressions cannot judge a stored object, or None.

    Each stored object is judged as if it were created now (probes/admission_inputs.py;
    ``creates``: the policy admits CREATE requests, else ``oldObject`` is refused):
    ``object``, ``oldObject`` (null), ``namespaceObject`` and the request's kind, resource,
    name, namespace, operation and dry run are served. What only an admission request holds
    is refused, naming it: who asked (``request.userInfo``), the request's own identity and
    options (``request.uid``, ``request.options``), and whether the asker may do something
    else (``authorizer``). Kyverno's libraries that reach out of the policy (services,
    registries) are refused too. ``kyverno_libraries``: the expressions are a Kyverno
    ValidatingPolicy's, whose reads of its own target (``resource.Get`` / ``List``,
    ``globalContext.Get``) a check serves from the target's listings; what needs the network
    (``http``, image data, ``image.GetMetadata``) or writes (``resource.Post``) is refused still.
    """
    for expression in expressions:
        for ref in references(expression):
            if ref.root == "oldObject" and not creates:
                return (
                    "it reads oldObject and judges only UPDATE requests: the object before "
                    "the update lives in the admission request, and a stored object comes "
                    "without one"
                )
            if ref.root == "authorizer":
                return (
                    "it asks the authorizer what the requester may do, and a stored object "
                    "has no requester"
                )
            if ref.root == "request":
                field = ref.fields[0] if ref.fields else ""
                if field not in SERVED_REQUEST_FIELDS:
                    shown = f"request.{field}" if field else "request"
                    return (
                        f"it reads {shown}, which only an admission request holds (who asked "
                        "and how), and a stored object comes without one"
                    )
            if ref.root == "params" and not params_given:
                return "it reads params, and no params object was given in the files"
            if kyverno_libraries and ref.root in _SERVED_LIBRARY_CALLS:
                call = ref.fields[0] if ref.called and len(ref.fields) == 1 else ""
                if call in _SERVED_LIBRARY_CALLS[ref.root]:
                    continue
                named = call[:1].upper() + call[1:]
                if ref.root == "resource" and named in _LIBRARY_CALLS_REFUSED:
                    return _LIBRARY_CALLS_REFUSED[named]
                shown = ".".join((ref.root, *ref.fields))
                if shown in _UNSERVED_CALLS:
                    return _UNSERVED_CALLS[shown]
                return f"it reads {shown}, which Kyverno's library has not"
            if ref.root in _KYVERNO_LIBRARIES:
                return f"it calls {_KYVERNO_LIBRARIES[ref.root]}"
            if ref.root == "image" and ref.fields[:1] == ("GetMetadata",):
                return "it calls Kyverno's image.GetMetadata (it reads a registry)"
        called = global_calls(expression)
        if "random" in called:
            return f"it calls random, of {_RANDOM}"
        if "parseServiceAccount" in called:
            return f"it calls parseServiceAccount, of {_USER}"
        if not kyverno_libraries:
            for function in sorted(global_calls(expression) & _KYVERNO_FUNCTIONS.keys()):
                library = _KYVERNO_FUNCTIONS[function]
                return (
                    f"it calls {function}, of {library}, which only a Kyverno ValidatingPolicy has"
                )
    return None
