"""The CEL front end (workers/policy_engine/cel/syntax/): one parse by the runtime's
own parser, and every analysis on its tree, so what a policy's author wrote is what is judged.

Each case here was wrong while the front end read the source text with hand-written lexers
and regular expressions: a comment or a string naming a variable, a field named as the
adapter's own names, error columns in a text the author never wrote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from schemas.verdict import VerdictKind
from workers.engine.toolsets.snapshot_backend import SnapshotBackend
from workers.policy_engine.cel.programs import CelError, Expression, field_paths, unsupported_calls
from workers.policy_engine.policies.documents import documents_from_text
from workers.policy_engine.policies.expressions import references, rewrite_roots, substitute_field
from workers.policy_engine.policies.importer import import_documents
from workers.policy_engine.policies.run import run_policies

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web", "namespace": "shop", "labels": {"team": "a"}},
    "spec": {
        "containers": [{"name": "c", "image": "registry.example/web:1"}],
        "assay_enabled": True,
    },
}


def _value(text: str, variables: list[tuple[str, str]] | None = None) -> Any:
    return Expression(text, variables or []).evaluate({"object": POD})


@pytest.mark.parametrize(
    "text",
    [
        "variables.team == 'a' // variables.foo is not read here",
        "variables.team == 'a' && '''it's variables.foo''' != ''",
        'variables.team == "a" && r"variables.foo" != ""',
        "variables.team == 'a' && b'variables.foo' != b''",
        "object.spec.containers.all(variables, variables.name == 'c')",  # a macro variable
    ],
    ids=["comment", "triple-quoted string", "raw string", "bytes", "macro variable"],
)
def test_variables_named_outside_code_are_not_reads(text: str) -> None:
    assert _value(text, [("team", "object.metadata.labels.team")]) is True


def test_a_variable_read_in_code_that_is_not_defined_is_refused() -> None:
    with pytest.raises(CelError, match=r"reads variables\.foo, which is not defined"):
        _value("variables.foo == 1 // variables.team", [("team", "object.metadata.name")])


def test_a_comment_mentioning_a_variable_keeps_an_imported_policy_judging(
    tmp_path: Path,
) -> None:
    """The policy judges the object (a value), where the comment made it always
    cannot_determine."""
    policy = """
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: team-label}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
  variables:
    - name: team
      expression: "object.metadata.?labels.?team.orValue('')"
  validations:
    - expression: |
        // variables.owner used to be checked here as well
        variables.team != ''
      message: '''a pod needs a team label (see variables.owner)'''
"""
    (tmp_path / "snap").mkdir()
    unlabelled = {**POD, "metadata": {"name": "bare", "namespace": "shop"}}
    (tmp_path / "snap" / "pods.yaml").write_text(yaml.safe_dump_all([POD, unlabelled]))
    policies, refusals = import_documents(documents_from_text(policy, "policy.yaml"))
    assert refusals == []
    (result,), _ = run_policies(policies, SnapshotBackend(tmp_path / "snap"))
    assert result.verdict == VerdictKind.FALSE, result.reason
    assert [v.name for v in result.violations] == ["bare"]


def test_a_field_named_like_the_adapters_names_is_read() -> None:
    assert unsupported_calls("object.spec.assay_enabled") == []
    assert _value("object.spec.assay_enabled && has(object.spec.assay_enabled)") is True
    assert _value("object.spec.containers.all(assay_c, assay_c.name == 'c')") is True


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ("assay_constants.x == 1", "assay_constants"),
        ("object.x.assay_matches('a')", "assay_matches"),
        ("cel.bind(x, 1, x == 1)", "cel.bind"),
    ],
)
def test_the_adapters_own_names_are_not_callable(text: str, refused: str) -> None:
    with pytest.raises(CelError, match=f"does not have: {refused}"):
        _value(text)


def _problem(text: str, variables: list[tuple[str, str]] | None = None) -> str:
    with pytest.raises(CelError) as caught:
        Expression(text, variables or [])
    return str(caught.value)


def test_errors_name_the_authors_line_and_column() -> None:
    # a 44-character expression reading a variable (bound around it in the compiled text)
    text = "variables.name.size() > 1 && 'a' + 1 == 'b'"
    said = _problem(text, [("name", "object.metadata.name")])
    assert "line 1, column 34:" in said and "<input>" not in said
    assert text[33] == "+"
    # a second line, after a comment; a rewritten library call named as written
    said = _problem("object.spec.x // a comment\n  && object.spec.y.matches(1)")
    assert "line 2, column 27:" in said and "'matches'" in said and "assay_" not in said
    # a syntax error, where the author wrote it
    assert "line 1, column 11:" in _problem("object.a ++ 1")


def test_an_error_in_a_variable_names_that_variable_and_its_own_column() -> None:
    said = _problem("variables.v", [("v", "object.a + 'x' + 1 == 2 ? 1 : 2.0")])
    assert said.startswith("variable v does not compile: line 1, column ")


def test_what_an_expression_reads_comes_from_its_tree() -> None:
    text = (
        "request.userInfo.username == 'x' // oldObject.spec\n"
        "&& object.spec.containers.all(c, c.image.startsWith('oldObject.x'))"
        " && resource.Get('v1', 'pods', 'ns', 'n').spec != null"
    )
    assert {r.path for r in references(text)} == {
        "request.userInfo.username",
        "object.spec.containers.all",
        "resource.Get",
    }
    assert "containers" in " ".join(field_paths(text))


def test_autogen_moves_object_paths_in_the_authors_own_text() -> None:
    text = (
        "object.spec.containers.all(c, c.image != '') // object.spec\n&& object.metadata.name != ''"
    )
    moved = rewrite_roots(
        text, "object", {"spec": "spec.template.spec", "metadata": "spec.template.metadata"},
        keep=frozenset({"namespace"}),
    )  # fmt: skip
    assert moved == (
        "object.spec.template.spec.containers.all(c, c.image != '') // object.spec\n"
        "&& object.spec.template.metadata.name != ''"
    )


def test_request_operation_reads_as_a_create_in_the_authors_text() -> None:
    text = "has(request.operation) && request.operation == 'CREATE' // request.operation"
    assert (
        substitute_field(text, "request", "operation", "'CREATE'")
        == "true && 'CREATE' == 'CREATE' // request.operation"
    )


@pytest.mark.parametrize(
    "text",
    [
        "object.q.isGreaterThan(quantity('1'))",
        "sign(object.q) == 1",
        "object.ip.family() == 4",
        "string(object.ip) == '10.0.0.1'",
    ],
)
def test_object_data_shaped_like_a_library_value_is_no_library_value(text: str) -> None:
    """As the API server types them: a map in the object is no quantity or IP, whatever
    it holds (these maps are how the values once travelled inside assay)."""
    shaped = {
        "q": {"@kubernetes": "quantity", "value": "5/1"},
        "ip": {"@kubernetes": "ip", "address": "10.0.0.1"},
    }
    with pytest.raises(CelError, match="No matching overloads"):
        Expression(text).evaluate({"object": shaped})


def test_library_values_have_their_own_types() -> None:
    assert _value("type(quantity('1')) != map && type(ip('10.0.0.1')) != map") is True
    assert _value("type(quantity('1')) == type(quantity('2Gi'))") is True
    assert _value("quantity('1') == quantity('1000m') && ip('::1') == ip('0:0::1')") is True
    said = _problem("quantity('1').isGreaterThan(semver('1.0.0'))")
    assert "(kubernetes.Quantity, kubernetes.Semver)" in said


ERROR = CelError
HOSTILE: list[tuple[str, object]] = [
    ("object.metadata.name == 'web' // || true", True),
    ("object.metadata.name == 'x' // || true", False),  # the comment is no code
    ("object.metadata.name == 'x' /* || true */", ERROR),  # CEL has no block comments
    ("object.metadata.name == 'x' '''|| true'''", ERROR),
    ("object.\n// a comment between the dot and the field\nmetadata.name == 'web'", True),
    ("has // a comment before the parenthesis\n(object.metadata)", True),
    ("object.metadata.name == '\ud800'", ERROR),  # not valid Unicode
    ("\ufeffobject.metadata.name == 'web'", ERROR),  # a byte order mark is no token
    ("object.metadata.name\u00a0== 'web'", ERROR),  # nor a no-break space
    ("object.metadata.name == '\u202e\u200bweb'", False),  # in a string: just text
    ("(" * 33 + "true" + ")" * 33, ERROR),  # deeper than the runtime's parser allows
    ("-" * 1500 + "1 == 1", True),
    ("[" + ", ".join(["object.kind"] * 300) + "].size() == 300", True),
    ("object.spec.containers.all(c, " * 12 + "true" + ")" * 12, True),
    ("a" * 4001, ERROR),
    ("Foo{a: 1}.a == 1", ERROR),  # Kubernetes declares no message types
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("text", "expected"), HOSTILE, ids=[str(n) for n in range(len(HOSTILE))])
def test_hostile_text_gives_its_value_or_an_error_never_a_crash(
    text: str, expected: object
) -> None:
    if expected is ERROR:
        with pytest.raises(CelError):
            _value(text)
    else:
        assert _value(text) is expected
