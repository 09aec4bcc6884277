"""Imported policies run on a target: which objects each judges, the verdict and the
offending objects with the policy's messages, and a set's listings shared per tick (on the
example snapshots, and through the real kubernetes client against the test API server)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from assay.testing.fake_apiserver import FakeApiServer
from assay.testing.fake_cluster import FakeCluster
from schemas.policy import ImportedPolicy
from schemas.request import ContextTarget, SnapshotTarget
from schemas.settings import load_settings
from schemas.verdict import VerdictKind
from workers.engine.toolsets.factory import backend_for
from workers.engine.toolsets.live_backend import LiveBackend
from workers.engine.toolsets.snapshot_backend import SnapshotBackend
from workers.policy_engine.policies.documents import documents_from_text, read_files
from workers.policy_engine.policies.importer import import_documents
from workers.policy_engine.policies.run import run_policies

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples" / "policies").glob("*.yaml"))


def _policies(text: str) -> list[ImportedPolicy]:
    policies, refusals = import_documents(documents_from_text(text, "test.yaml"))
    assert refusals == []
    return policies


def _example_policies() -> dict[str, ImportedPolicy]:
    policies, refusals = import_documents(read_files(EXAMPLES))
    assert refusals == []
    return {p.name: p for p in policies}


def _snapshot(folder: Path, *objects: dict[str, Any]) -> SnapshotBackend:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "objects.yaml").write_text(yaml.safe_dump_all(objects))
    return SnapshotBackend(folder)


def _pod(
    name: str, namespace: str, labels: dict[str, str] | None = None, user: int = 1000
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {
            "containers": [{"name": "c", "image": "x", "securityContext": {"runAsUser": user}}]
        },
    }


def _namespace(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


@pytest.mark.parametrize(
    ("snapshot", "expected"),
    [
        (
            "prod-eu",
            {
                "run-as-non-root": "true",
                "trusted-registries": "true",
                "prod-workloads-labelled": "true",
            },
        ),
        (
            "staging-us",
            {
                "run-as-non-root": "true",
                "trusted-registries": "true",
                "prod-workloads-labelled": "false",
            },
        ),
        (
            "dev-ap",
            {
                "run-as-non-root": "false",
                "trusted-registries": "false",
                "prod-workloads-labelled": "true",
            },
        ),
    ],
)
def test_the_example_policies_judge_every_object_of_the_example_snapshots(
    snapshot: str, expected: dict[str, str]
) -> None:
    policies = _example_policies()
    backend = backend_for(
        SnapshotTarget(path=str(ROOT / "examples/snapshots" / snapshot)), load_settings()
    )
    results, shared = run_policies(list(policies.values()), backend)
    assert {r.policy: r.verdict.value for r in results} == expected
    by_name = {r.policy: r for r in results}
    if snapshot == "dev-ap":  # the one offender is named, with the policy's own message
        root = by_name["run-as-non-root"]
        assert {(v.kind, v.namespace, v.name, v.message) for v in root.violations} == {
            ("Pod", "dev", "debug-tools-d4c8b9f7a-pz8vn", "runs as root (runAsUser 0): shell"),
            ("Deployment", "dev", "debug-tools", "runs as root (runAsUser 0): shell"),
        }
        registries = by_name["trusted-registries"]
        assert [(v.name, v.message) for v in registries.violations] == [
            ("debug-tools", "containers shell pull from an untrusted registry")
        ]
        assert registries.judged_total == 3  # the snapshot's three Deployments, each judged
    # every listing once: the Deployments both the VAP and the Gatekeeper constraint read
    # (in prod, served from the cluster-wide listing) are listed one time
    assert shared.requests == 7


def test_namespace_selectors_read_the_targets_namespaces_once(tmp_path: Path) -> None:
    policy = """
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: non-root-in-restricted}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
    namespaceSelector: {matchLabels: {security: restricted}}
  validations:
    - expression: "object.spec.containers.all(c, c.securityContext.runAsUser != 0)"
      message: "a container runs as root"
"""
    backend = _snapshot(
        tmp_path / "a",
        _namespace("locked", {"security": "restricted"}),
        _namespace("open", {}),
        _pod("root-locked", "locked", user=0),
        _pod("root-open", "open", user=0),
        _pod("fine-locked", "locked"),
    )
    (result,), shared = run_policies(_policies(policy), backend)
    assert result.verdict == VerdictKind.FALSE
    assert [v.name for v in result.violations] == ["root-locked"]
    assert result.judged_total == 2  # the two pods in the restricted namespace
    assert shared.requests == 2  # pods, and the namespaces for their labels

    # a namespace whose labels the target does not hold cannot be decided: no verdict
    backend = _snapshot(tmp_path / "b", _pod("root-unknown", "elsewhere", user=0))
    (result,), _ = run_policies(_policies(policy), backend)
    assert result.verdict == VerdictKind.CANNOT_DETERMINE
    assert "needs the labels of namespace 'elsewhere'" in (result.reason or "")


def test_exact_namespaces_are_listed_alone_and_names_by_pattern_are_filtered(
    tmp_path: Path,
) -> None:
    policy = """
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: team-pods, annotations: {pod-policies.kyverno.io/autogen-controllers: none}}
spec:
  rules:
    - name: labelled
      match: {any: [{resources: {kinds: [Pod], namespaces: [team-a], names: ["web-*"]}}]}
      validate:
        cel:
          expressions:
            - {expression: "'team' in object.metadata.labels", message: "no team label"}
"""
    backend = _snapshot(
        tmp_path,
        _pod("web-1", "team-a", {"team": "a"}),
        _pod("web-2", "team-a"),
        _pod("db-1", "team-a"),
        _pod("web-3", "team-b"),
    )
    (result,), shared = run_policies(_policies(policy), backend)
    assert (result.verdict, [v.name for v in result.violations]) == (VerdictKind.FALSE, ["web-2"])
    assert result.judged_total == 2 and shared.requests == 1
    assert result.probes[0].namespace == "team-a"  # listed in its one namespace


def test_a_policy_on_kinds_the_target_does_not_serve_gives_no_verdict(tmp_path: Path) -> None:
    policy = """
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: certificates}
spec:
  matchConstraints:
    resourceRules:
      - apiGroups: [cert-manager.io]
        apiVersions: [v1]
        operations: [CREATE]
        resources: [certificates]
  validations: [{expression: "object.spec.duration != '1h'"}]
"""
    (result,), _ = run_policies(_policies(policy), _snapshot(tmp_path, _pod("p", "a")))
    assert result.verdict == VerdictKind.CANNOT_DETERMINE
    assert "none of the kinds it judges is served" in (result.reason or "")
    assert result.kinds_not_served == ["certificates.cert-manager.io"]


def test_nothing_to_judge_passes_and_a_failing_probe_never_does(tmp_path: Path) -> None:
    policy = """
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: replicas}
spec:
  autogen: {podControllers: {controllers: []}}
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
      - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}
  validations: [{expression: "object.spec.replicas >= 2", message: "fewer than 2 replicas"}]
"""
    # no Deployment and no Pod: nothing violates it (admission semantics)
    empty = _snapshot(tmp_path / "empty", _namespace("a", {}))
    (result,), _ = run_policies(_policies(policy), empty)
    assert (result.verdict, result.judged_total) == (VerdictKind.TRUE, 0)
    # a Pod has no spec.replicas: that probe errors; the policy is not true
    broken = _snapshot(tmp_path / "pod", _pod("p", "a"))
    (result,), _ = run_policies(_policies(policy), broken)
    assert result.verdict == VerdictKind.CANNOT_DETERMINE and "rule replicas over Pod" in (
        result.reason or ""
    )
    # ... but an object found violating it is evidence, whatever another probe did
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "a"},
        "spec": {"replicas": 1},
    }
    both = _snapshot(tmp_path / "both", _pod("p", "a"), deployment)
    (result,), _ = run_policies(_policies(policy), both)
    assert result.verdict == VerdictKind.FALSE
    assert [(v.name, v.message) for v in result.violations] == [("d", "fewer than 2 replicas")]


def test_an_object_that_makes_a_policy_too_costly_never_lets_it_pass(tmp_path: Path) -> None:
    """A hostile object sized to push a validation over the cost bound: the probe cannot run,
    and the policy gives no verdict (never the pass of an object that was not judged)."""
    policy = """
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: disjoint-lists}
spec:
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  validations:
    - expression: "!sets.intersects(object.data.a.split(','), object.data.b.split(','))"
"""
    hostile = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "wide", "namespace": "a"},
        "data": {
            # 20,000 x 20,000 pairs: seconds the runtime could not be interrupted in
            "a": ",".join(f"a{i}" for i in range(20_000)),
            "b": ",".join(f"b{i}" for i in range(20_000)),
        },
    }
    (result,), _ = run_policies(_policies(policy), _snapshot(tmp_path, hostile))
    assert result.verdict == VerdictKind.CANNOT_DETERMINE, result
    assert "too costly" in (result.reason or "")


def test_request_operation_reads_create_so_update_exemptions_do_not_hide_objects(
    tmp_path: Path,
) -> None:
    template = """
apiVersion: templates.gatekeeper.sh/v1
kind: ConstraintTemplate
metadata: {name: nohostnet}
spec:
  crd: {spec: {names: {kind: NoHostNet}}}
  targets:
    - target: admission.k8s.gatekeeper.sh
      code:
        - engine: K8sNativeValidation
          source:
            validations:
              - expression: >-
                  (has(request.operation) && request.operation == "UPDATE") ||
                  !variables.anyObject.spec.?hostNetwork.orValue(false)
                message: host network
---
apiVersion: constraints.gatekeeper.sh/v1beta1
kind: NoHostNet
metadata: {name: no-host-network}
spec: {match: {kinds: [{apiGroups: [""], kinds: [Pod]}]}}
"""
    host = _pod("host", "a")
    host["spec"]["hostNetwork"] = True
    (result,), _ = run_policies(_policies(template), _snapshot(tmp_path, host, _pod("plain", "a")))
    assert result.verdict == VerdictKind.FALSE and [v.name for v in result.violations] == ["host"]


# -- a set over a live cluster: one list per (kind, namespace) per tick -----------------------


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[FakeApiServer, Path]]:
    clusters = [
        FakeCluster.from_snapshot(ROOT / "examples/snapshots" / name, name=name)
        for name in ("prod-eu", "dev-ap")
    ]
    with FakeApiServer(clusters) as server:
        yield server, server.write_kubeconfig(tmp_path / "kubeconfig")


def test_a_set_shares_its_listings_on_a_live_cluster(live: tuple[FakeApiServer, Path]) -> None:
    server, kubeconfig = live
    policies = list(_example_policies().values())
    many = [p.model_copy(update={"name": f"{p.name}-{n}"}) for n in range(20) for p in policies]
    settings = load_settings(kubeconfig=str(kubeconfig), kube_qps=1000)
    backend = LiveBackend.from_target(ContextTarget(context="dev-ap"), settings)
    server.clear_requests()
    results, shared = run_policies(many, backend)
    verdicts = Counter(r.verdict.value for r in results)
    assert verdicts == {"false": 40, "true": 20}  # 60 policies, as the three examples say
    lists = [
        r
        for r in server.requests
        if r.cluster == "dev-ap"
        and "/openapi" not in r.path
        and r.path.rstrip("/").split("/")[-1]
        in ("pods", "deployments", "daemonsets", "statefulsets", "replicasets", "jobs", "cronjobs")
    ]
    collections = Counter(r.path for r in lists)
    assert collections and max(collections.values()) == 1, collections
    assert shared.requests == len(collections) == 7
    assert json.dumps(sorted(collections)).count("/namespaces/") == 0  # each cluster-wide, once


@pytest.mark.parametrize(
    "answer",
    ["status", "no-items", "items-not-a-list"],
)
def test_a_listing_answered_with_no_list_is_never_an_empty_pass(
    live: tuple[FakeApiServer, Path], answer: str
) -> None:
    """An API server (an aggregated API, a proxy in front) that answers a list with 200 and a
    Status, or an object without its items, has listed nothing: under admission semantics an
    empty listing passes, so it must be a failed lookup, not an empty one."""
    server, kubeconfig = live
    lists = r"/(pods|deployments|daemonsets|statefulsets|replicasets|jobs|cronjobs)$"
    if answer == "status":
        server.add_fault(lists, 200, message="a proxy's error page, as a 200")
    else:
        body = {"kind": "PodList", "apiVersion": "v1", "metadata": {}}
        if answer == "items-not-a-list":
            body["items"] = {"a": 1}
        server.add_fault(lists, 200, body=body)
    settings = load_settings(kubeconfig=str(kubeconfig), kube_qps=1000)
    backend = LiveBackend.from_target(ContextTarget(context="dev-ap"), settings)
    results, _ = run_policies(list(_example_policies().values()), backend)
    assert {r.verdict for r in results} == {VerdictKind.CANNOT_DETERMINE}, results
    assert all("no list of objects" in (r.reason or "") for r in results)


def test_a_kind_in_an_api_group_whose_discovery_failed_is_not_read_as_absent(
    live: tuple[FakeApiServer, Path],
) -> None:
    """cert-manager's API answers 503 to discovery (its webhook or an aggregated API down):
    its Certificates are unknown, not absent, and the policy judging them gives no verdict
    (it was false on the Certificates, and would have read true on the Pods alone)."""
    server, kubeconfig = live
    policy = """
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: no-dns-names}
spec:
  autogen: {podControllers: {controllers: []}}
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
      - apiGroups: [cert-manager.io]
        apiVersions: [v1]
        operations: [CREATE]
        resources: [certificates]
  validations: [{expression: "!has(object.spec.dnsNames)"}]
"""
    settings = load_settings(
        kubeconfig=str(kubeconfig),
        kube_qps=1000,
        discovery_ttl_seconds=0,
        kube_retry_deadline_seconds=0.5,
    )
    (result,), _ = run_policies(
        _policies(policy), LiveBackend.from_target(ContextTarget(context="prod-eu"), settings)
    )
    assert result.verdict == VerdictKind.FALSE  # the Certificates name DNS names
    server.add_fault(r"^/apis/cert-manager\.io/v1$", 503)
    (result,), _ = run_policies(
        _policies(policy), LiveBackend.from_target(ContextTarget(context="prod-eu"), settings)
    )
    assert result.verdict == VerdictKind.CANNOT_DETERMINE, result
    assert "cert-manager.io" in (result.reason or "") and "discovery" in (result.reason or "")


def test_a_secret_value_copied_into_another_object_never_reaches_a_message(
    tmp_path: Path,
) -> None:
    """The policy judges the ConfigMap as stored (its value is a URL, so it is violated),
    and what it says of it is scrubbed with the target's scrubber (runner.py): a Secret's
    value copied into the ConfigMap never reaches the message."""
    canary = "ASSAY-CANARY-policy-7f3a91c2"
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "db", "namespace": "a"},
        "stringData": {"password": canary},
    }
    leaked = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "env", "namespace": "a"},
        "data": {"DB_URL": f"postgres://app:{canary}@db"},
    }
    policy = """
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: no-urls}
spec:
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  validations:
    - expression: "!object.data.exists(k, object.data[k].contains('://'))"
      messageExpression: "'a URL in the data: ' + object.data.DB_URL"
"""
    _snapshot(tmp_path / "cluster", secret, leaked)
    with FakeApiServer([FakeCluster.from_snapshot(tmp_path / "cluster", name="c")]) as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        settings = load_settings(kubeconfig=str(kubeconfig), kube_qps=1000)
        backend = LiveBackend.from_target(ContextTarget(context="c"), settings)
        (result,), _ = run_policies(_policies(policy), backend)
    assert result.verdict == VerdictKind.FALSE
    (violation,) = result.violations
    assert violation.message.startswith("a URL in the data: postgres://app:")
    assert canary not in result.model_dump_json()


def test_a_constant_validation_is_violated_by_the_objects_its_match_selects(
    tmp_path: Path,
) -> None:
    """A policy whose validation reads no object (`false`: Jobs only from CronJobs, a removed
    API) is violated by every object its match selects and holds where there is none: its
    value depends on the cluster through what its lookups and match conditions select."""
    policy = """
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: jobs-from-schedules}
spec:
  matchConstraints:
    resourceRules:
      - {apiGroups: [batch], apiVersions: [v1], operations: [CREATE], resources: [jobs]}
  matchConditions:
    - name: not-scheduled
      expression: "!has(object.metadata.ownerReferences)"
  validations: [{expression: "false", message: "a Job must come from a CronJob"}]
"""

    def job(name: str, owned: bool) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "namespace": "a"}
        if owned:
            meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "CronJob",
                                        "name": "nightly", "uid": "u1"}]  # fmt: skip
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {}}

    cases = [((job("nightly-1", True),), VerdictKind.TRUE),
             ((job("nightly-1", True), job("by-hand", False)), VerdictKind.FALSE),
             ((_namespace("a", {}),), VerdictKind.TRUE)]  # fmt: skip
    for number, (objects, expected) in enumerate(cases):
        (result,), _ = run_policies(_policies(policy), _snapshot(tmp_path / str(number), *objects))
        assert result.verdict == expected, (number, result.reason)
    assert [v.name for v in result.violations] == [] and number == 2
