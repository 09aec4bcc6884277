"""The admission-document model: ``ValidatingAdmissionPolicy``,
``ValidatingAdmissionPolicyBinding`` (``admissionregistration.k8s.io/v1``), Kyverno's
``ValidatingPolicy`` (``policies.kyverno.io/v1``) and the pieces other engines share with
them (a Kyverno ClusterPolicy's ``validate.cel``, a Gatekeeper template's CEL source).

One model, read two ways (:class:`Reading`), because export and import need different rules
of the same shapes:

* ``API_SERVER`` (export): the shapes and the API server's semantic rules (required lists,
  enums, wildcard rules, unique names, CEL identifiers, label selector syntax, validation
  actions). An export the API server would refuse is not written.
* ``ENGINE`` (import): the shapes only. An engine reads what it was given, and Kyverno's
  CRD admits what the API server's rules refuse (match-condition names, rules without
  operations); what assay cannot honour is the importer's to refuse (policies/common.py).

Types are strict in both readings, as a CRD's schema is (``'false'`` is no boolean).
Unknown fields are refused in both readings: a field this model does not know might narrow
or widen what a policy matches, and dropping it could turn a violation into a pass.

Written from the APIs' field references, not generated, so the rules are readable here; the
fields and types are held against the official schemas shipped in kind_schemas.json.gz by
tests/policy_engine/test_admission_schema_official.py, and against Kyverno's and
Gatekeeper's CRDs (read from a path the user gives) by bench/check_admission_model.py.
:func:`problems` lists every problem of a document in one sentence each (empty: valid). The
CEL itself is compiled, and its paths type-checked, by probes/export.py.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from enum import StrEnum
from typing import Any, Literal, Self, TypeVar, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import ErrorDetails

from schemas.kubernetes_metadata import LabelSelector as KubernetesLabelSelector
from schemas.kubernetes_metadata import (
    SelectorError,
    is_dns1035_label,
    is_dns1123_subdomain,
    label_value_errors,
    qualified_name_errors,
)

VAP_API_VERSION = "admissionregistration.k8s.io/v1"
KYVERNO_API_VERSION = "policies.kyverno.io/v1"
_CEL_IDENTIFIER = re.compile(r"^[_A-Za-z][_A-Za-z0-9]*$")
_CEL_RESERVED = frozenset(
    {"true", "false", "null", "in", "as", "break", "const", "continue", "else", "for",
     "function", "if", "import", "let", "loop", "package", "namespace", "return", "var",
     "void", "while"}
)  # fmt: skip
OPERATIONS = frozenset({"*", "CREATE", "UPDATE", "DELETE", "CONNECT"})
REASONS = frozenset({"Forbidden", "Invalid", "RequestEntityTooLarge"})
# Kyverno's CRD holds a ValidatingPolicy's actions to these (a shape rule, read by both
# readings); the API server holds a binding's to them by its own rules (API_SERVER only)
Action = Literal["Deny", "Warn", "Audit"]
ACTIONS = frozenset(get_args(Action))


class Reading(StrEnum):
    """Whose rules a document is read under (the module's docstring says when each applies)."""

    API_SERVER = "api-server"
    ENGINE = "engine"


def _api_server(info: ValidationInfo) -> bool:
    """Whether the API server's semantic rules apply: always, unless read as an engine reads."""
    context = info.context if isinstance(info.context, dict) else {}
    return context.get("reading", Reading.API_SERVER) is Reading.API_SERVER


Shape = TypeVar("Shape")


class ReadError(ValueError):
    """A document (or a part of one) that is not of its shape, in one sentence."""


def read(shape: type[Shape], value: Any, reading: Reading, what: str) -> Shape:
    """``value`` as ``shape`` (a model, or a list of one) under ``reading``; ReadError with the
    first problem, located from ``what``, when it is not of that shape."""
    try:
        return TypeAdapter(shape).validate_python(value, context={"reading": reading})
    except ValidationError as exc:
        raise ReadError(_sentence(exc.errors()[0], what)) from None


def _located(part: str | int) -> str:
    """A step of where a problem is; an author's key past 63 characters cut (a refusal is
    one sentence, whatever the document holds)."""
    text = str(part)
    return text if len(text) <= 63 else f"{text[:60]}..."


def _sentence(error: ErrorDetails, what: str = "") -> str:
    """One problem pydantic found, as one sentence: where it is (from ``what``), and what."""
    where = ".".join(part for part in (what, *map(_located, error["loc"])) if part)
    message = error["msg"].removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def wire_names(shape: type[BaseModel]) -> tuple[str, ...]:
    """The names ``shape``'s fields are written under in a document (``failurePolicy``), in
    the model's order: which fields a part has, said once, by the model."""
    return tuple(field.alias or name for name, field in shape.model_fields.items())


def written(part: BaseModel) -> dict[str, Any]:
    """``part`` as it was written: the fields it was given (a default is not added, a
    ``null`` stays absent), under their wire names, lists in their order."""
    return part.model_dump(by_alias=True, exclude_unset=True)


def dns_subdomain(value: str, what: str) -> str:
    if not is_dns1123_subdomain(value):
        raise ValueError(f"{what} {value!r} is not a DNS subdomain (lower case, at most 253)")
    return value


def qualified_name(value: str, what: str) -> str:
    """A Kubernetes qualified name: an optional DNS-subdomain prefix, '/', a 63-char name."""
    if qualified_name_errors(value):
        raise ValueError(f"{what} {value!r} is not a qualified name")
    return value


class _Shape(BaseModel):
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, strict=True
    )

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        """A field written ``null`` is a field not written, as the API server decodes it."""
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if value is not None}
        return data

    @model_validator(mode="after")
    def _read_as(self, info: ValidationInfo) -> Self:
        if _api_server(info):
            self.api_server_rules()
        return self

    def api_server_rules(self) -> None:
        """The API server's semantic rules of this shape, beyond its fields' types: raise
        ValueError with the one that fails. Not applied when read as an engine reads."""


class LabelSelectorRequirement(_Shape):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)


class LabelSelector(_Shape):
    """The shape of a selector; its rules are the API server's, checked by
    ``schemas.kubernetes_metadata`` (keys, values, operators with and without values)."""

    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list)

    def api_server_rules(self) -> None:
        try:
            KubernetesLabelSelector.from_api(self.model_dump(by_alias=True))
        except SelectorError as exc:
            raise ValueError(str(exc)) from exc


def _one_wildcard(values: list[str], what: str) -> None:
    if len(values) > 1 and "*" in values:
        raise ValueError(f"if '*' is present in {what}, nothing else may be")


def _resource_wildcards(resources: list[str]) -> None:
    """The API server's rules for wildcards among resources and subresources: ``*/*``
    alone; ``*`` with subresources only; ``x/*`` without another ``x/y``; ``*/y`` without
    another ``x/y``."""
    if "*/*" in resources and len(resources) > 1:
        raise ValueError("if '*/*' is present in resources, nothing else may be")
    if "*" in resources and any("/" not in r and r != "*" for r in resources):
        raise ValueError(
            "if '*' is present in resources, no other resource without a subresource may be"
        )
    whole_resources: set[str] = set()  # x/*
    whole_subresources: set[str] = set()  # */y
    for entry in resources:
        if "/" not in entry:
            continue
        resource, subresource = entry.split("/", 1)
        if resource in whole_resources:
            raise ValueError(f"if '{resource}/*' is present in resources, {entry} may not be")
        if subresource in whole_subresources:
            raise ValueError(f"if '*/{subresource}' is present in resources, {entry} may not be")
        if subresource == "*":
            whole_resources.add(resource)
        if resource == "*":
            whole_subresources.add(subresource)


class RuleWithOperations(_Shape):
    api_groups: list[str] = Field(default_factory=list)
    api_versions: list[str] = Field(default_factory=list)
    operations: list[str] = Field(default_factory=list)
    resources: list[str] = Field(default_factory=list)
    resource_names: list[str] = Field(default_factory=list)
    scope: Literal["*", "Cluster", "Namespaced"] | None = None

    def api_server_rules(self) -> None:
        for field in ("api_groups", "api_versions", "operations", "resources"):
            if not getattr(self, field):
                raise ValueError(f"{to_camel(field)} must hold at least one item")
        _one_wildcard(self.api_groups, "apiGroups")
        _one_wildcard(self.api_versions, "apiVersions")
        _one_wildcard(self.operations, "operations")
        if any(not version for version in self.api_versions):
            raise ValueError("apiVersions must not hold an empty version")
        unknown = set(self.operations) - OPERATIONS
        if unknown:
            raise ValueError(f"operations {sorted(unknown)} are not {sorted(OPERATIONS)}")
        if any(not resource for resource in self.resources):
            raise ValueError("resources must not hold an empty resource")
        _resource_wildcards(self.resources)
        if len(set(self.resource_names)) != len(self.resource_names):
            raise ValueError("resourceNames must be unique")
        for name in self.resource_names:
            if not name or name in (".", "..") or "/" in name or "%" in name:
                raise ValueError(f"{name!r} is not a resource name")


class MatchResources(_Shape):
    namespace_selector: LabelSelector | None = None
    object_selector: LabelSelector | None = None
    resource_rules: list[RuleWithOperations] = Field(default_factory=list)
    exclude_resource_rules: list[RuleWithOperations] = Field(default_factory=list)
    match_policy: Literal["Exact", "Equivalent"] | None = None


class Validation(_Shape):
    expression: str
    message: str | None = None
    message_expression: str | None = None
    reason: str | None = None

    def api_server_rules(self) -> None:
        if not self.expression.strip():
            raise ValueError("a validation needs an expression")
        if self.message is not None:
            if not self.message.strip():
                raise ValueError("a validation's message must not be blank")
            if re.search(r"[\n\r]", self.message.strip()):
                raise ValueError("a validation's message must not contain line breaks")
        if self.message_expression is not None and not self.message_expression.strip():
            raise ValueError("a validation's messageExpression must not be blank")
        if self.reason is not None and self.reason not in REASONS:
            raise ValueError(f"reason {self.reason!r} is not one of {sorted(REASONS)}")


class Variable(_Shape):
    name: str
    expression: str

    def api_server_rules(self) -> None:
        if not _CEL_IDENTIFIER.fullmatch(self.name) or self.name in _CEL_RESERVED:
            raise ValueError(f"variable name {self.name!r} is not a CEL identifier")
        if not self.expression.strip():
            raise ValueError(f"variable {self.name} needs an expression")


class MatchCondition(_Shape):
    name: str
    expression: str

    def api_server_rules(self) -> None:
        qualified_name(self.name, "a match condition's name")
        if not self.expression.strip():
            raise ValueError(f"match condition {self.name} needs an expression")


class AuditAnnotation(_Shape):
    key: str = Field(max_length=63)
    value_expression: str = Field(min_length=1, max_length=5 * 1024)


class ParamKind(_Shape):
    api_version: str
    kind: str

    def api_server_rules(self) -> None:
        group, _, version = self.api_version.rpartition("/")
        if group:
            dns_subdomain(group, "paramKind's group")
        if not is_dns1035_label(version):
            raise ValueError(f"paramKind's version {version!r} is not a DNS label")
        if not is_dns1035_label(self.kind.lower()):
            raise ValueError(f"paramKind's kind {self.kind!r} is not a kind name")


class ObjectMeta(_Shape):
    model_config = ConfigDict(extra="allow", alias_generator=to_camel, populate_by_name=True)

    name: str
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)

    def api_server_rules(self) -> None:
        dns_subdomain(self.name, "metadata.name")
        for key, value in self.labels.items():
            qualified_name(key, "a label key")
            if label_value_errors(value):
                raise ValueError(f"label value {value!r} is not a label value")
        for key in self.annotations:
            qualified_name(key, "an annotation key")


def _unique(names: list[str], what: str) -> None:
    if len(set(names)) != len(names):
        raise ValueError(f"{what} names must be unique")


class PolicySpec(_Shape):
    """The ValidatingAdmissionPolicy spec (and the part Kyverno's ValidatingPolicy shares)."""

    param_kind: ParamKind | None = None
    match_constraints: MatchResources | None = None
    validations: list[Validation] = Field(default_factory=list)
    failure_policy: Literal["Ignore", "Fail"] | None = None
    audit_annotations: list[AuditAnnotation] = Field(default_factory=list, max_length=20)
    match_conditions: list[MatchCondition] = Field(default_factory=list, max_length=64)
    variables: list[Variable] = Field(default_factory=list)

    def api_server_rules(self) -> None:
        if self.match_constraints is None or not self.match_constraints.resource_rules:
            raise ValueError(
                "matchConstraints needs resourceRules (they give the expressions their types)"
            )
        if not self.validations and not self.audit_annotations:
            raise ValueError("validations or auditAnnotations must hold at least one item")
        _unique([c.name for c in self.match_conditions], "match condition")
        _unique([v.name for v in self.variables], "variable")
        _unique([a.key for a in self.audit_annotations], "audit annotation key")


class ValidatingAdmissionPolicy(_Shape):
    api_version: Literal["admissionregistration.k8s.io/v1"]
    kind: Literal["ValidatingAdmissionPolicy"]
    metadata: ObjectMeta
    spec: PolicySpec

    def api_server_rules(self) -> None:
        # the API server writes each audit annotation as "{policy name}/{key}"
        for annotation in self.spec.audit_annotations:
            qualified_name(f"{self.metadata.name}/{annotation.key}", "an audit annotation's key")


class ParamRef(_Shape):
    name: str | None = None
    namespace: str | None = None
    selector: LabelSelector | None = None
    parameter_not_found_action: Literal["Allow", "Deny"] | None = None

    def api_server_rules(self) -> None:
        if self.parameter_not_found_action is None:
            raise ValueError("paramRef needs parameterNotFoundAction")
        if (self.name is None) == (self.selector is None):
            raise ValueError("paramRef needs exactly one of name and selector")
        if self.name is not None and (not self.name or "/" in self.name or "%" in self.name):
            raise ValueError(f"paramRef name {self.name!r} is not a name")


def _actions(actions: Sequence[str]) -> None:
    if not actions:
        raise ValueError("at least one validation action is required")
    unknown = set(actions) - ACTIONS
    if unknown:
        raise ValueError(f"validationActions {sorted(unknown)} are not {sorted(ACTIONS)}")
    _unique(list(actions), "validation action")
    if {"Deny", "Warn"} <= set(actions):
        raise ValueError("validationActions must not hold both Deny and Warn")


class BindingSpec(_Shape):
    policy_name: str
    param_ref: ParamRef | None = None
    match_resources: MatchResources | None = None
    validation_actions: list[str] = Field(default_factory=list)

    def api_server_rules(self) -> None:
        dns_subdomain(self.policy_name, "policyName")
        _actions(self.validation_actions)


class ValidatingAdmissionPolicyBinding(_Shape):
    api_version: Literal["admissionregistration.k8s.io/v1"]
    kind: Literal["ValidatingAdmissionPolicyBinding"]
    metadata: ObjectMeta
    spec: BindingSpec


class Evaluation(_Shape):
    class _Enabled(_Shape):
        enabled: bool | None = None

    admission: _Enabled | None = None
    background: _Enabled | None = None
    # any string, as in Kyverno's CRD (Envoy, HTTP, ...): the importer says which it judges
    mode: str | None = None


class Autogen(_Shape):
    class _Controllers(_Shape):
        controllers: list[str] = Field(default_factory=list)

    class _Vap(_Shape):
        enabled: bool | None = None

    pod_controllers: _Controllers | None = None
    validating_admission_policy: _Vap | None = None


class WebhookConfiguration(_Shape):
    """Kyverno's webhook settings: its CRD defines the timeout only."""

    timeout_seconds: int | None = None


class KyvernoSpec(PolicySpec):
    """A Kyverno ValidatingPolicy's spec: the VAP's, without params, with Kyverno's fields."""

    param_kind: None = None
    validation_actions: list[Action] = Field(default_factory=list)
    evaluation: Evaluation | None = None
    autogen: Autogen | None = None
    webhook_configuration: WebhookConfiguration | None = None

    def api_server_rules(self) -> None:
        super().api_server_rules()
        if not self.validations:
            raise ValueError("a ValidatingPolicy needs validations")
        if self.validation_actions:
            _actions(self.validation_actions)


class KyvernoValidatingPolicy(_Shape):
    api_version: Literal["policies.kyverno.io/v1"]
    kind: Literal["ValidatingPolicy"]
    metadata: ObjectMeta
    spec: KyvernoSpec


_MODELS: dict[str, type[BaseModel]] = {
    "ValidatingAdmissionPolicy": ValidatingAdmissionPolicy,
    "ValidatingAdmissionPolicyBinding": ValidatingAdmissionPolicyBinding,
    "ValidatingPolicy": KyvernoValidatingPolicy,
}


def problems(document: dict[str, Any]) -> list[str]:
    """Every problem the API server (or Kyverno) would find in ``document``; [] when valid.
    A document of another kind (a params object) is not checked here."""
    model = _MODELS.get(str(document.get("kind")))
    if model is None:
        return []
    try:
        model.model_validate(document)
    except ValidationError as exc:
        kind = document.get("kind")
        return [
            f"{kind} {_sentence(error)}" if error["loc"] else _sentence(error)
            for error in exc.errors()
        ]
    return []
