"""Kubernetes names, label keys and values and label selectors, read as the API server reads
them (cases modelled on apimachinery's tests of name validation and of the label selector
parser), and the same selector refused at every door: lookups, export, import, the
admission-document check and CEL's format library."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from schemas.kubernetes_metadata import (
    LabelSelector,
    SelectorError,
    dns1035_label_errors,
    dns1123_label_errors,
    dns1123_subdomain_errors,
    label_value_errors,
    qualified_name_errors,
)
from workers.engine.toolsets.backend import BackendError
from workers.engine.toolsets.selectors import label_matcher
from workers.policy_engine.admission_schema import problems
from workers.policy_engine.policies.documents import documents_from_text
from workers.policy_engine.policies.importer import import_documents
from workers.policy_engine.probes.export_draft import NotExportable, selector_from_text

# -- names --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("check", "value", "valid"),
    [
        (dns1123_label_errors, "a" * 63, True),
        (dns1123_label_errors, "a" * 64, False),
        (dns1123_label_errors, "0-web", True),
        (dns1123_label_errors, "-web", False),
        (dns1123_label_errors, "web-", False),
        (dns1123_label_errors, "Web", False),
        (dns1123_label_errors, "a.b", False),
        (dns1123_label_errors, "web\n", False),
        (dns1123_label_errors, "", False),
        (dns1123_subdomain_errors, "a.b-c.d", True),
        (dns1123_subdomain_errors, ".".join(["a" * 63] * 4)[:253], True),
        (dns1123_subdomain_errors, "a" * 254, False),
        (dns1123_subdomain_errors, "a..b", False),
        (dns1123_subdomain_errors, "a.-b", False),
        (dns1035_label_errors, "web-1", True),
        (dns1035_label_errors, "1web", False),
        (qualified_name_errors, "app", True),
        (qualified_name_errors, "example.com/My_App.v1", True),
        (qualified_name_errors, "a/b/c", False),
        (qualified_name_errors, "/app", False),
        (qualified_name_errors, "example.com/", False),
        (qualified_name_errors, "Example.com/app", False),
        (qualified_name_errors, "-app", False),
        (qualified_name_errors, "app_", False),
        (qualified_name_errors, "x" * 63, True),
        (qualified_name_errors, "x" * 64, False),
        (label_value_errors, "", True),
        (label_value_errors, "web_1.v-2", True),
        (label_value_errors, "-web", False),
        (label_value_errors, "web.", False),
        (label_value_errors, "a/b", False),
        (label_value_errors, "v" * 63, True),
        (label_value_errors, "v" * 64, False),
    ],
)
def test_names_follow_the_api_servers_rules(check: Any, value: str, valid: bool) -> None:
    assert (check(value) == []) is valid, check(value)


def test_a_name_too_long_and_badly_formed_reports_both() -> None:
    assert len(dns1123_label_errors("-" * 64)) == 2
    assert qualified_name_errors("a/b/c") == [
        "must be a name, optionally with a DNS subdomain prefix and '/'"
    ]


# -- the text form ----------------------------------------------------------------------------


def _matches(selector: str, labels: dict[str, str]) -> bool:
    """The selector's answer, the same from :meth:`matches` and from the lookups' matcher."""
    parsed = LabelSelector.from_text(selector)
    answer = parsed.matches(labels)
    assert parsed.matcher()(labels) is answer
    assert label_matcher(selector)({"metadata": {"labels": labels}}) is answer
    return answer


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("app=web", {"app": "web"}, True),
        ("app==web", {"app": "api"}, False),
        ("app!=web", {}, True),  # != and notin match objects without the label
        ("app notin (web)", {}, True),
        ("app in (web)", {}, False),
        ("app", {"app": ""}, True),
        ("!app", {"app": ""}, False),
        ("app=", {"app": ""}, True),  # the empty value
        ("app in ()", {"app": ""}, True),  # an empty set is the empty value
        ("app in (web,)", {"app": ""}, True),
        ("x in (foo,,baz),y,z notin ()", {"x": "", "y": "1", "z": "q"}, True),
        ("  app = web ,\ttier in ( a , b )", {"app": "web", "tier": "b"}, True),
        ("a=b,a=c", {"a": "b"}, False),  # two values asked of one key select nothing
        ("in in (in, notin)", {"in": "notin"}, True),  # keywords as key and values
        ("", {}, True),
        ("   ", {"x": "y"}, True),
    ],
)
def test_the_text_form_matches_as_the_api_server_does(
    selector: str, labels: dict[str, str], expected: bool
) -> None:
    assert _matches(selector, labels) is expected


@pytest.mark.parametrize(
    ("selector", "why"),
    [
        ("app=-web", "is not a label value"),
        ("a/b/c=x", "is not a qualified name"),
        ("Bad.Prefix/app", "is not a qualified name"),
        ("app=" + "v" * 64, "is not a label value"),
        ("app=web,", "after ','"),
        (",app=web", "where a label key belongs"),
        ("app=web,,tier=db", "after ','"),
        ("!app=web", "where ',' or the end belongs"),
        ("app=web=x", "where ',' or the end belongs"),
        ("app in (a b)", "where ',', ')' or a value belongs"),
        ("app in a", "where '(' belongs"),
        ("app in (a", "where ',', ')' or a value belongs"),
        ("app>1", "no counterpart"),
        ("a b", "where one of =, ==, !=, in, notin belongs"),
        ("!!app", "where a label key belongs"),
    ],
)
def test_the_text_form_refuses_what_the_api_server_refuses(selector: str, why: str) -> None:
    with pytest.raises(SelectorError, match=re.escape(why)):
        LabelSelector.from_text(selector)


# -- the API's object form ----------------------------------------------------------------------


def test_text_and_object_forms_say_the_same() -> None:
    parsed = LabelSelector.from_text("app=web,tier!=db,env in (prod,dev),canary,!legacy")
    api = parsed.to_api()
    assert api == {
        "matchLabels": {"app": "web"},
        "matchExpressions": [
            {"key": "tier", "operator": "NotIn", "values": ["db"]},
            {"key": "env", "operator": "In", "values": ["dev", "prod"]},
            {"key": "canary", "operator": "Exists"},
            {"key": "legacy", "operator": "DoesNotExist"},
        ],
    }
    assert LabelSelector.from_api(api) == parsed
    assert LabelSelector.from_api({}).empty and LabelSelector.from_api({}).to_api() == {}


@pytest.mark.parametrize(
    ("data", "why"),
    [
        ({"matchLabels": {"app": "-web"}}, "is not a label value"),
        ({"matchLabels": {"a/b/c": "x"}}, "is not a qualified name"),
        ({"matchExpressions": [{"key": "a", "operator": "In"}]}, "needs values"),
        ({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}, "no values"),
        ({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}, "'Gt'"),
        ({"matchExpressions": [{"operator": "Exists"}]}, "without a key"),
        ({"matchExpressions": [{"key": "k" * 400, "operator": "Exists"}]}, "qualified name"),
        ({"matchLabel": {"a": "b"}}, "fields a label selector does not"),
        (["app=web"], "is not a mapping"),
    ],
)
def test_the_object_form_refuses_what_the_api_server_refuses(data: Any, why: str) -> None:
    with pytest.raises(SelectorError, match=re.escape(why)):
        LabelSelector.from_api(data)


# -- every door ---------------------------------------------------------------------------------

BAD_SELECTORS = ["app=-web", "a/b/c=x"]


@pytest.mark.parametrize("selector", BAD_SELECTORS)
def test_a_lookup_refuses_a_bad_selector(selector: str) -> None:
    with pytest.raises(BackendError) as caught:
        label_matcher(selector)
    assert caught.value.code == "bad_request"
    assert "cannot parse label selector" in caught.value.message


@pytest.mark.parametrize("selector", BAD_SELECTORS)
def test_export_refuses_a_bad_selector(selector: str) -> None:
    with pytest.raises(NotExportable, match="cannot be read"):
        selector_from_text(selector)


_POLICY = """
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: replicas
spec:
  matchConstraints:
    resourceRules:
      - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}
    objectSelector: {matchLabels: {%s}}
  validations:
    - expression: "object.spec.replicas >= 2"
  failurePolicy: Fail
"""
BAD_LABELS = [("app: -web", "label value"), ("a/b/c: x", "qualif")]


@pytest.mark.parametrize(("labels", "why"), BAD_LABELS)
def test_import_refuses_a_bad_selector(labels: str, why: str) -> None:
    policies, refusals = import_documents(documents_from_text(_POLICY % labels, "p.yaml"))
    assert policies == [] and len(refusals) == 1
    assert why in refusals[0].reason
    good, refused = import_documents(documents_from_text(_POLICY % "app: web", "p.yaml"))
    assert len(good) == 1 and refused == []


@pytest.mark.parametrize(("labels", "why"), BAD_LABELS)
def test_the_admission_check_refuses_a_bad_selector(labels: str, why: str) -> None:
    assert problems(yaml.safe_load(_POLICY % "app: web")) == []
    found = problems(yaml.safe_load(_POLICY % labels))
    assert any(why in problem for problem in found), found
