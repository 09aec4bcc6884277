"""The sensitivity check accepts probes that depend on the objects through a size, a
membership or a threshold, in Kubernetes CEL (optional reads, ``x in (list)``), and still
refuses constants (issue 31). In-process, over hand-written objects."""

from __future__ import annotations

from typing import Any

import pytest

from schemas.probe import ProposedProbe
from workers.policy_engine.probes.program import ProbeProgram
from workers.policy_engine.probes.sensitivity import check_sensitivity, mentioned

PODS = [
    {"apiVersion": "v1", "kind": "Pod",
     "metadata": {"name": f"web-{i}", "namespace": "shop", "uid": f"u{i}"},
     "spec": {"containers": [{"name": "web", "image": "registry.shop.example/web:1"}],
              "volumes": [{"name": "cfg", "configMap": {"name": "cfg"}}]}}
    for i in range(3)
]  # fmt: skip
ROLES = [
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
     "metadata": {"name": "reader", "namespace": "shop", "uid": "r1"},
     "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]}
]  # fmt: skip

LABELLED = [
    {"apiVersion": "v1", "kind": "Pod",
     "metadata": {"name": f"api-{i}", "namespace": "shop", "uid": f"l{i}",
                  "labels": {"app": "api", "team": "shop"}},
     "spec": {"containers": [{"name": "api", "image": "registry.shop.example/api:2"},
                             {"name": "log", "image": "registry.shop.example/log:1"}]}}
    for i in range(2)
]  # fmt: skip

ACCEPTED = [
    ("size threshold", PODS, "size(object.spec.containers) <= 4"),
    ("RBAC verbs", ROLES, "object.rules.all(r, !('*' in r.verbs))"),
    ("membership in parentheses", ROLES, "object.rules.all(r, !('*' in (r.verbs)))"),
    ("volume allowlist, optional", PODS,
     "object.spec.?volumes.orValue([]).all(v, has(v.configMap) || has(v.emptyDir))"),
    ("image allowlist", PODS,
     "object.spec.containers.all(c, c.image in (['registry.shop.example/web:1']))"),
    ("optional label", PODS, "object.?metadata.?labels.?app.orValue('') == ''"),
    ("optional list size", PODS, "size(object.spec.?initContainers.orValue([])) == 0"),
    ("optional field presence", PODS,
     "object.spec.volumes.all(v, v.?hostPath.hasValue() == false)"),
    # two-variable comprehensions: the value of a map, the element of a list
    ("map values", LABELLED, "object.metadata.labels.all(k, v, v != 'forbidden')"),
    ("map keys and values", LABELLED,
     "object.metadata.labels.exists(k, v, k == 'team' && v == 'shop')"),
    ("list elements with their index", LABELLED,
     "object.spec.containers.all(i, c, c.image.startsWith('registry.shop.example/'))"),
    ("first element by index", LABELLED,
     "object.spec.containers.exists(i, c, i == 0 && c.name == 'api')"),
    ("exactly one", LABELLED, "object.spec.containers.existsOne(i, c, c.name == 'log')"),
    ("exactly one, cel-go's other name", LABELLED,
     "object.spec.containers.exists_one(i, c, c.name == 'log')"),
    ("transformed list", LABELLED,
     "object.spec.containers.transformList(i, c, c.image)"
     ".all(m, m.startsWith('registry.shop.example/'))"),
    ("transformed map", LABELLED,
     "object.metadata.labels.transformMap(k, v, size(v)).all(k, k != 'owner')"),
]  # fmt: skip
CONSTANTS = [
    ("size tautology", PODS, "size(object.spec.containers) >= 0"),
    ("self comparison", PODS, "object.metadata.name == object.metadata.name"),
    ("or true", PODS, "has(object.metadata) || true"),
    ("optional or true", PODS, "object.?spec.?nodeName.hasValue() || true"),
    ("two variables, always true", LABELLED, "object.spec.containers.all(i, c, true)"),
    ("two variables, self comparison", LABELLED, "object.metadata.labels.all(k, v, v == v)"),
    ("two variables, index only", LABELLED, "object.spec.containers.all(i, c, i >= 0)"),
]


def _check(objects: list[dict[str, Any]], expression: str) -> bool:
    probe = ProposedProbe.model_validate(
        {"lookups": [{"tool": "get", "args": {"kind": objects[0]["kind"], "namespace": "shop"}}],
         "scope": "each_object", "expression": expression}
    )  # fmt: skip
    program = ProbeProgram(probe)
    value = all(program.judge({"object": obj}).passed for obj in objects)
    return check_sensitivity(probe, [objects], value).sensitive


@pytest.mark.parametrize(("name", "objects", "expression"), ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_depends_through_size_membership_or_threshold(
    name: str, objects: list[dict[str, Any]], expression: str
) -> None:
    assert _check(objects, expression)


@pytest.mark.parametrize(
    ("name", "objects", "expression"), CONSTANTS, ids=[c[0] for c in CONSTANTS]
)
def test_constants_are_still_refused(
    name: str, objects: list[dict[str, Any]], expression: str
) -> None:
    assert not _check(objects, expression)


def test_paths_resolve_through_two_variable_comprehensions() -> None:
    found = mentioned(
        "object.spec.containers.all(i, c, c.image.startsWith('r/') && i < 3)"
        " && object.metadata.labels.all(k, v, v != '')"
    )
    tested = {target.text(): test for target, test in found.tests.items()}
    assert tested["object.spec.containers[*value].image"] == ("startsWith", "r/")
    assert tested["object.metadata.labels[*value]"] == ("!=", "")
    assert not any(t.text().endswith(".i") or t.text() == "i" for t in found.targets)
