"""A null field of an object is absent, as the API server reads objects through their
structural schema (k8s.io/apiserver/pkg/cel/common/values.go)."""

from __future__ import annotations

from schemas.probe import ProposedProbe
from workers.core.probes.program import ProbeProgram, without_nulls

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
        "object.spec.containers.all(c, !has(c.securityContext) || "
        "!c.securityContext.privileged)",
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
