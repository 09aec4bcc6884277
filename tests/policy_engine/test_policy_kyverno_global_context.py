"""Kyverno's global context and ``resource.ToGVR`` judged as Kyverno would: a
GlobalContextEntry's projection runs its JMESPath as Kyverno's Go JMESPath answers; an entry
the policy's files do not define is the target's own; an entry that calls a service is
refused as living outside the cluster; ``ToGVR`` answers from the target's kinds."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from assay.testing.fake_apiserver import FakeApiServer
from assay.testing.fake_cluster import FakeCluster
from schemas.request import ContextTarget
from schemas.settings import load_settings
from schemas.verdict import VerdictKind
from tests.kyverno_support import pod, policy_text, snapshot_of
from workers.engine.toolsets.live_backend import LiveBackend
from workers.engine.toolsets.snapshot_backend import SnapshotBackend
from workers.policy_engine.policies import cluster_reads
from workers.policy_engine.policies.documents import documents_from_text
from workers.policy_engine.policies.importer import import_documents
from workers.policy_engine.policies.kyverno_jmespath import ProjectionError, problem, search
from workers.policy_engine.policies.run import run_policies

# Audited, and judging pods only (no pod-controller rules)
AUDIT_PODS = "  validationActions: [Audit]\n  autogen: {podControllers: {controllers: []}}\n"
POLICY = policy_text(
    "owners", "pods", '  validations:\n    - expression: "EXPRESSION"\n', spec=AUDIT_PODS
)

ENTRY = """
---
apiVersion: kyverno.io/v2alpha1
kind: GlobalContextEntry
metadata: {name: teams}
spec:
  kubernetesResource: {version: v1, resource: configmaps, namespace: platform}
  projections:
    - {name: count, jmesPath: "length(@)"}
    - {name: names, jmesPath: "[].metadata.name"}
"""


def _pod(name: str, team: str) -> dict[str, Any]:
    return pod(name, "shop", "registry.example.com/app:1", {"team": team})


def _configmap(name: str, namespace: str = "platform") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"replicas": "2"},
    }


def _entry(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kyverno.io/v2alpha1",
        "kind": "GlobalContextEntry",
        "metadata": {"name": name},
        "spec": spec,
    }


# Kyverno's GlobalContextEntry "teams" as the target stores it: the ConfigMaps of platform
STORED_TEAMS = _entry(
    "teams",
    {
        "kubernetesResource": {"version": "v1", "resource": "configmaps", "namespace": "platform"},
        "projections": [{"name": "names", "jmesPath": "[].metadata.name"}],
    },
)


def _run(expression: str, backend: SnapshotBackend, extra: str = "") -> Any:
    text = POLICY.replace("EXPRESSION", expression) + extra
    imported, refusals = import_documents(documents_from_text(text, "policy.yaml"))
    assert refusals == [] and len(imported) == 1, refusals
    (result,), _ = run_policies(imported, backend)
    return result


def test_a_projection_is_its_jmespath_over_the_objects_the_entry_lists(tmp_path: Path) -> None:
    backend = snapshot_of(
        tmp_path / "c", _configmap("web"), _configmap("db"), _configmap("x", "elsewhere"),
        _pod("a", "web"), _pod("b", "batch"),
    )  # fmt: skip
    names = "object.metadata.labels.team in globalContext.Get('teams', 'names')"
    result = _run(names, backend, ENTRY)
    assert result.verdict == VerdictKind.FALSE, result
    assert [v.name for v in result.violations] == ["b"]
    # length(@) is a Go float64: a CEL double, equal to the int 2 as Kyverno's CEL says
    count = (
        "globalContext.Get('teams', 'count') == 2 "
        "&& type(globalContext.Get('teams', 'count')) == double"
    )
    assert _run(count, backend, ENTRY).verdict == VerdictKind.TRUE
    # a projection the entry does not define fails, as Kyverno's Get does: no verdict
    missing = _run("globalContext.Get('teams', 'nothing') == null", backend, ENTRY)
    assert missing.verdict == VerdictKind.CANNOT_DETERMINE
    assert "projection 'nothing' not found" in (missing.reason or "")


def test_an_entry_the_files_do_not_define_is_read_from_the_target(tmp_path: Path) -> None:
    remote = _entry("remote", {"apiCall": {"urlPath": "/api/v1/namespaces"}})
    objects = [_configmap("web"), _pod("a", "web"), _pod("b", "batch")]
    backend = snapshot_of(tmp_path / "c", STORED_TEAMS, remote, *objects)
    names = "object.metadata.labels.team in globalContext.Get('teams', 'names')"
    result = _run(names, backend)
    assert [v.name for v in result.violations] == ["b"], result
    whole = "globalContext.Get('teams', '').map(c, c.metadata.name) == ['web']"
    assert _run(whole, backend).verdict == VerdictKind.TRUE
    # an entry neither the files nor the target hold is null, as in Kyverno
    assert _run("globalContext.Get('nowhere', 'names') == null", backend).verdict == (
        VerdictKind.TRUE
    )
    # a target without Kyverno's GlobalContextEntries holds none
    bare = snapshot_of(tmp_path / "bare", *objects)
    assert _run("globalContext.Get('teams', '') == null", bare).verdict == VerdictKind.TRUE
    # the target's entry that calls a service: no verdict, and the reason says where it lives
    outside = _run("globalContext.Get('remote', '') != null", backend)
    assert outside.verdict == VerdictKind.CANNOT_DETERMINE
    assert "lives outside the cluster (an API call)" in (outside.reason or "")


REFUSED = [
    ("apiCall: {urlPath: /api/v1/namespaces}", "lives outside the cluster (an API call)"),
    (
        "kubernetesResource: {version: v1, resource: configmaps}\n"
        "  projections: [{name: up, jmesPath: '[].metadata.name | to_upper(@)'}]",
        "calls to_upper(), one of Kyverno's own JMESPath functions",
    ),
    (
        "kubernetesResource: {version: v1, resource: configmaps}\n"
        "  projections: [{name: total, jmesPath: 'sum([].spec.replicas)'}]",
        "calls sum()",
    ),
]


@pytest.mark.parametrize(("spec", "reason"), REFUSED)
def test_an_entry_of_the_files_outside_the_cluster_or_kyverno_only_is_refused(
    spec: str, reason: str
) -> None:
    text = POLICY.replace("EXPRESSION", "globalContext.Get('teams', '') != null") + (
        f"\n---\napiVersion: kyverno.io/v2alpha1\nkind: GlobalContextEntry\n"
        f"metadata: {{name: teams}}\nspec:\n  {spec}\n"
    )
    imported, refusals = import_documents(documents_from_text(text, "policy.yaml"))
    assert imported == []
    assert reason in refusals[0].reason, refusals


def test_jmespath_answers_as_kyvernos_go_jmespath() -> None:
    objects = [
        {"metadata": {"name": "a"}, "spec": {"replicas": 2, "least": 2, "ratio": 0.5}},
        {"metadata": {"name": "b"}, "spec": {"replicas": 3, "least": 2, "ratio": 1.5}},
    ]
    assert search("length(@)", objects) == 2.0 and isinstance(search("length(@)", objects), float)
    # an object's integer is Go's int64: never equal to a written number, never ordered
    assert search("[?spec.replicas == `2`].metadata.name", objects) == []
    assert search("[?spec.replicas > `1`].metadata.name", objects) == []
    assert search("[?spec.replicas == spec.least].metadata.name", objects) == ["a"]
    # a float of the object is a number as written ones are
    assert search("[?spec.ratio > `1`].metadata.name", objects) == ["b"]
    assert search("contains([].spec.replicas, `2`)", objects) is False
    assert search("to_string([0].spec)", objects) == '{"least":2,"ratio":0.5,"replicas":2}'
    assert search("to_string(length(@))", objects) == "2"
    assert search("to_number('2.5')", objects) == 2.5
    assert search("to_number('1e400')", objects) is None  # past float64: Go gives null
    assert math.isnan(search("avg(`[]`)", objects))  # Go divides 0 by 0
    for failing in ("abs([0].spec.replicas)", "max([].spec.replicas)", "length(missing)"):
        with pytest.raises(ProjectionError):
            search(failing, objects)
    assert problem("[].metadata.name") is None
    assert "to_upper()" in (problem("[].metadata.name | to_upper(@)") or "")
    assert "does not parse" in (problem("[?") or "")


def test_to_gvr_answers_from_the_targets_kinds(tmp_path: Path) -> None:
    widget = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "shop"},
    }
    backend = snapshot_of(
        tmp_path / "c", _configmap("web"), _pod("a", "web"), _pod("b", "batch"), widget
    )
    get = (
        "resource.Get(resource.ToGVR('v1', 'ConfigMap'), 'platform', "
        "object.metadata.labels.team).metadata.name == object.metadata.labels.team"
    )
    result = _run(get, backend)
    assert result.verdict == VerdictKind.CANNOT_DETERMINE  # 'batch' is not found, as in Kyverno
    assert "configmaps 'batch' not found" in (result.reason or "")
    listed = "size(resource.List(resource.ToGVR('example.com/v1', 'Widget'), 'shop').items) == 1"
    assert _run(listed, backend).verdict == VerdictKind.TRUE
    labelled = (
        "size(resource.List(resource.toGVR('v1', 'Pod'), 'shop', {'team': 'web'}).items) == 1"
    )
    assert _run(labelled, backend).verdict == VerdictKind.TRUE
    unserved = _run("resource.ToGVR('example.com/v1', 'Gadget') != null", backend)
    assert unserved.verdict == VerdictKind.CANNOT_DETERMINE
    assert "no matches for kind 'Gadget'" in (unserved.reason or "")


def test_a_live_targets_entry_is_read_once_a_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a live cluster (the test API server) the entry is read from Kyverno's
    GlobalContextEntries, and its objects and the entries are each listed once for the
    whole run, however many pods read the projection."""
    pods = [_pod(f"p{n}", "web" if n % 2 else "ops") for n in range(6)]
    folder = tmp_path / "c"
    snapshot_of(folder, STORED_TEAMS, _configmap("web"), *pods)
    text = POLICY.replace(
        "EXPRESSION", "object.metadata.labels.team in globalContext.Get('teams', 'names')"
    )
    imported, refusals = import_documents(documents_from_text(text, "policy.yaml"))
    assert refusals == []
    with FakeApiServer([FakeCluster.from_snapshot(folder, name="live")]) as server:
        monkeypatch.setenv("ASSAY_KUBECONFIG", str(server.write_kubeconfig(tmp_path / "kc")))
        backend = LiveBackend.from_target(ContextTarget(context="live"), load_settings())
        server.clear_requests()
        (result,), _ = run_policies(imported, backend)
        listed = [r.path.rstrip("/").split("/")[-1] for r in server.requests]
    assert sorted(v.name for v in result.violations) == ["p0", "p2", "p4"], result
    assert listed.count("globalcontextentries") == 1 and listed.count("configmaps") == 1, listed


@pytest.mark.parametrize(("background", "searches"), [("true", 1), ("false", 6)])
def test_a_projection_runs_once_a_run_or_once_an_object_at_admission(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, background: str, searches: int
) -> None:
    """Kyverno computes a projection when the entry's objects change: one value for the
    background scan (here once a run); a policy run only at admission reads the cluster
    without the judged object, so its projection is run for each object."""
    calls: list[str] = []
    real = cluster_reads.search

    def counted(query: str, data: Any) -> Any:
        calls.append(query)
        return real(query, data)

    monkeypatch.setattr(cluster_reads, "search", counted)
    backend = snapshot_of(
        tmp_path / "c", _configmap("web"), *[_pod(f"p{n}", "web") for n in range(6)]
    )
    text = POLICY.replace(
        "EXPRESSION", "object.metadata.labels.team in globalContext.Get('teams', 'names')"
    ).replace(
        "  validationActions: [Audit]",
        f"  validationActions: [Audit]\n  evaluation: {{background: {{enabled: {background}}}}}",
    )
    imported, refusals = import_documents(documents_from_text(text + ENTRY, "policy.yaml"))
    assert refusals == []
    (result,), _ = run_policies(imported, backend)
    assert result.verdict == VerdictKind.TRUE, result
    assert len(calls) == searches


def test_a_namespaced_policy_reads_its_own_namespace_through_to_gvr(tmp_path: Path) -> None:
    policy = policy_text(
        "own-teams, namespace: shop",
        "pods",
        """  validations:
    - expression: >-
        resource.List(resource.ToGVR('v1', 'ConfigMap'), {'team': 'yes'}).items.exists(c,
          c.metadata.name == object.metadata.labels.team)
        && resource.get(resource.toGVR('v1', 'ConfigMap'), 'web').metadata.name == 'web'
""",
        kind="NamespacedValidatingPolicy",
        spec=AUDIT_PODS,
    )
    web = _configmap("web", "shop")
    web["metadata"]["labels"] = {"team": "yes"}
    backend = snapshot_of(tmp_path / "c", web, _pod("a", "web"), _pod("b", "ops"))
    imported, refusals = import_documents(documents_from_text(policy, "policy.yaml"))
    assert refusals == []
    (result,), _ = run_policies(imported, backend)
    assert [v.name for v in result.violations] == ["b"], result


def test_a_projection_that_repeats_itself_is_refused_as_too_costly(tmp_path: Path) -> None:
    """``@ | [@, @] | [@, @] ...`` holds little and writes out to billions of values: the
    run is refused as too costly (never a value, never a hang), and so is its text."""
    doubling = "@" + " | [@, @]" * 30
    with pytest.raises(ProjectionError, match="more than 1,000,000 values"):
        search(f"to_string({doubling})", [{"a": 1}])
    entry = ENTRY.replace('jmesPath: "length(@)"', f'jmesPath: "{doubling}"')
    backend = snapshot_of(tmp_path / "c", _configmap("web"), _pod("a", "web"))
    result = _run("size(globalContext.Get('teams', 'count')) > 0", backend, entry)
    assert result.verdict == VerdictKind.CANNOT_DETERMINE
    assert "too costly" in (result.reason or "") and "1,000,000 values" in (result.reason or "")
