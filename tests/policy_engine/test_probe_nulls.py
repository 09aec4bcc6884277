"""A null field of an object is absent, as the API server reads objects through their
structural schema (k8s.io/apiserver/pkg/cel/common/values.go)."""

from __future__ import annotations

from schemas.probe import ProbeOrigin, ProposedProbe
from workers.policy_engine.probes.program import ProbeProgram, without_nulls

POD = {
    "metadata": {"name": "web", "annotations": None},
    "spec": {"containers": [{"name": "a", "securityContext": None, "env": [None]}]},
}


def _probe(expression: str) -> ProposedProbe:
    return ProposedProbe.model_validate(
        {
            "lookups": [{"tool": "get", "args": {"kind": "Pod"}}],
            "scope": "each_object",
            "expression": expression,
            "when_true": "true",
            "when_false": "false",
        }
    )


def test_null_fields_are_absent() -> None:
    for expression in (
        "!has(object.metadata.annotations)",
        "object.metadata.?annotations[?'team'].orValue('') == ''",
        "object.spec.containers.all(c, !has(c.securityContext) || !c.securityContext.privileged)",
        "object.spec.containers.all(c, c.?securityContext.?privileged.orValue(false) == false)",
    ):
        assert ProbeProgram(_probe(expression)).judge({"object": POD}).passed, expression


def test_without_nulls_keeps_list_elements_and_unchanged_objects() -> None:
    assert without_nulls(POD) == {
        "metadata": {"name": "web"},
        "spec": {"containers": [{"name": "a", "env": [None]}]},
    }
    plain = {"metadata": {"name": "web"}, "spec": {"containers": [{"name": "a"}]}}
    assert without_nulls(plain) is plain


def test_kyverno_and_gatekeeper_policies_read_a_null_as_null() -> None:
    """Their engines evaluate the object as JSON (no structural schema): `rules: null` is
    null there, and their labelled tests rely on it (`object.rules == null || ...`)."""
    role = {"metadata": {"name": "r"}, "rules": None}
    for fmt, expected in (("kyverno-validatingpolicy", True), ("gatekeeper", True)):
        origin = ProbeOrigin(format=fmt, name="p", source="-")
        probe = _probe("object.rules == null").model_copy(
            update={"origin": origin, "empty_result": "pass"}
        )
        assert ProbeProgram(probe).judge({"object": role}).passed is expected
    vap = _probe("!has(object.rules)").model_copy(
        update={"origin": ProbeOrigin(format="vap", name="p", source="-"), "empty_result": "pass"}
    )
    assert ProbeProgram(vap).judge({"object": role}).passed


def _message_probe(message_expression: str) -> ProposedProbe:
    return ProposedProbe.model_validate(
        {
            "lookups": [{"tool": "get", "args": {"kind": "Pod"}}],
            "scope": "each_object",
            "validations": [{"expression": "false", "message": "static",
                             "message_expression": message_expression}],
            "empty_result": "pass",
            "origin": {"format": "vap", "name": "p", "source": "-"},
        }
    )  # fmt: skip


def test_a_message_is_the_api_servers_or_the_static_one() -> None:
    """Red team 2: a message expression giving an object's 1 MB annotation was the
    finding's message whole. As the API server (MaxEvaluatedMessageExpressionSizeBytes):
    one over 5,120 bytes, or with a line break, gives the static message."""
    obj = {"metadata": {"annotations": {"a": "x" * 1_000_000, "b": "one\ntwo", "c": "ok"}}}
    for key, expected in (("a", "static"), ("b", "static"), ("c", "ok")):
        program = ProbeProgram(_message_probe(f"object.metadata.annotations['{key}']"))
        assert program.judge({"object": obj}).message == expected
