"""Labelled suites read in the layouts of public policy libraries' own tests: Kyverno's
chainsaw conformance tests (admission answers and background reports) and a
ValidatingAdmissionPolicy library with ``tests.json`` (kubescape's layout). The bench
(bench/bench_cel.py) reads the real libraries from fetched mirrors; these small suites,
written for assay, pin what a label means in each layout."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from assay.testing.policy_corpus import (
    disagreement_class,
    evaluate,
    read_library,
    refusal_class,
)
from assay.testing.vap_library_suite import set_field

SUITES = Path(__file__).resolve().parents[1] / "fixtures" / "policy_suites"


def test_chainsaw_labels_are_the_clusters_answers_and_its_reports() -> None:
    reading = read_library(SUITES / "chainsaw")
    labels = [(f.policy, str(f.obj["metadata"]["name"]), f.label) for f in reading.fixtures]
    assert labels == [
        ("replicas-floor", "two-replicas", "admitted"),
        ("replicas-floor", "one-replica", "denied"),  # ($error != null): true
        ("replicas-floor", "no-replicas", "denied"),  # the refusal's message expected
        # created after its refusal: a create, since a refused object never existed
        ("replicas-floor", "one-replica", "admitted"),
        ("team-label", "two-replicas", "fail"),  # the background report's result
    ]
    # applying an object the test already made is an update request: not a stored object's
    assert reading.skipped["a chainsaw step that updates an object (an update request)"] == 1
    # the Namespace the test made is in the cluster each object is judged on
    denied = next(f for f in reading.fixtures if f.obj["metadata"]["name"] == "one-replica")
    assert [n["metadata"]["name"] for n in denied.namespaces] == ["shop"]
    figures = evaluate(reading.fixtures, reading.skipped)
    assert [j.value for j in figures.judgements] == [f.allowed for f in reading.fixtures]
    assert figures.disagreements == []


def test_vap_library_cases_apply_their_field_changes_binding_and_params() -> None:
    reading = read_library(SUITES / "vap_library")
    by_case = {f.source.split("#")[1]: f for f in reading.fixtures}
    assert {k: (f.label, f.allowed) for k, f in by_case.items()} == {
        "0 an allowed registry": ("pass", True),
        "1 the template's image (no registry)": ("fail", False),
        "2 a second container from elsewhere": ("fail", False),
        "3 params that allow docker.io": ("pass", True),
        "4 warned only": ("warn", False),  # admitted with the policy's warning: it failed
    }
    second = by_case["2 a second container from elsewhere"].obj
    images = [c["image"] for c in second["spec"]["containers"]]
    assert images == ["registry.example.org/web:1", "docker.io/side"]
    figures = evaluate(reading.fixtures, reading.skipped)
    assert [j.value for j in figures.judgements] == [True, False, False, True, False]


def test_a_field_change_makes_what_its_path_needs() -> None:
    obj: dict = {"spec": {"containers": [{"name": "a"}]}}
    set_field(obj, "spec.containers.[0].securityContext.runAsUser=1000")
    set_field(obj, "spec.volumes.[1].name=v")
    set_field(obj, 'metadata.labels={"a": "b"}')
    set_field(obj, "spec.hostNetwork=true")
    assert obj == {
        "spec": {
            "containers": [{"name": "a", "securityContext": {"runAsUser": 1000}}],
            "volumes": [None, {"name": "v"}],
            "hostNetwork": True,
        },
        "metadata": {"labels": {"a": "b"}},
    }
    with pytest.raises(ValueError):
        set_field(obj, "spec.hostNetwork.[0]=1")


def test_refusals_say_whether_a_stored_cluster_holds_what_they_name() -> None:
    assert refusal_class(
        "it reads namespaceObject, which assay does not serve to probes yet"
    ).startswith("stored cluster holds it (a gap)")
    assert refusal_class(
        "it reads request.userInfo, part of an admission request, which a stored object "
        "comes without"
    ).startswith("lives in the admission request")
    namespace = refusal_class(
        "it reads request.namespace, part of an admission request, which a stored object "
        "comes without"
    )
    assert namespace.endswith("request.namespace")
    update_only = refusal_class(
        "it reads oldObject and judges only UPDATE requests: the object before the update "
        "lives in the admission request, and a stored object comes without one"
    )
    assert update_only.startswith("lives in the admission request")


def test_a_policy_exception_among_the_files_is_named_as_a_possible_cause(tmp_path: Path) -> None:
    reading = read_library(SUITES / "chainsaw")
    judgement = evaluate(reading.fixtures[:1]).judgements[0]
    assert disagreement_class(judgement) == ""
    exception = tmp_path / "exception.yaml"
    exception.write_text(
        "apiVersion: policies.kyverno.io/v1\nkind: PolicyException\n"
        "metadata: {name: spare}\nspec: {policyRefs: [{name: replicas-floor}]}\n"
    )
    fixture = replace(
        judgement.fixture, policy_files=(*judgement.fixture.policy_files, str(exception))
    )
    assert "PolicyException" in disagreement_class(replace(judgement, fixture=fixture))


def test_the_bench_reads_a_bare_mirror_at_its_head(tmp_path: Path) -> None:
    work = tmp_path / "work"
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    target = work / "suites"
    subprocess.run(["cp", "-r", str(SUITES / "vap_library"), str(target)], check=True)
    git = ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "suites"], check=True)
    bare = tmp_path / "mirror.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
    bench = Path(__file__).resolve().parents[2] / "bench" / "bench_cel.py"
    out = subprocess.run(
        [sys.executable, str(bench), "--library", f"{bare}:suites"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert "labelled pairs: 5, agree: 5, disagree: 0, refused: 0" in out


def test_a_kyverno_cli_test_gives_its_namespaces_params_and_default_as_a_cluster_holds_them() -> (
    None
):
    """A Kyverno CLI test's values file gives its Namespaces (whole, or by their labels), its
    paramResources are objects of the cluster (read from it as the API server reads a
    binding's params), an object in `default`, which the test does not describe, lives in a
    Namespace every cluster holds, and a written `hostPort: 0` is gone as from any stored Pod:
    each label is then the engine's answer on the same data."""
    reading = read_library(SUITES / "kyverno_cli")
    figures = evaluate(reading.fixtures, reading.skipped)
    judged = {
        (f.policy, str(f.obj["metadata"]["name"])): (f.label, j.value)
        for f, j in zip(reading.fixtures, figures.judgements, strict=True)
    }
    assert judged == {
        ("replicas-within-limits", "small"): ("pass", True),
        ("replicas-within-limits", "small-a"): ("pass", True),
        ("replicas-within-limits", "big-a"): ("fail", False),
        ("replicas-within-limits", "big-b"): ("skip", True),  # its Namespace is not selected
        ("namespace-named", "small"): ("pass", True),
        # written with hostPort: 0, which the API server drops when it stores the Pod
        ("host-ports-in-range", "zero-host-port"): ("pass", True),
        # its Namespace given whole by the values file, annotation included
        ("replicas-under-namespace-cap", "mid-c"): ("pass", True),
    }
    assert figures.disagreements == []


def test_the_clusters_other_objects_live_in_namespaces_it_holds(tmp_path: Path) -> None:
    """An object the test made earlier (a Pod in `earlier`, a Namespace the test never
    describes) is in the cluster a policy over every Pod reads: its Namespace is there too,
    as in any cluster that admitted it, so `namespaceObject` is served for it as well."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\n"
        "metadata: {name: named-namespace}\nspec:\n  failurePolicy: Fail\n"
        "  matchConstraints:\n    resourceRules:\n"
        "      - {apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [pods]}\n"
        "  validations:\n    - expression: namespaceObject.metadata.name != ''\n---\n"
        "apiVersion: admissionregistration.k8s.io/v1\n"
        "kind: ValidatingAdmissionPolicyBinding\nmetadata: {name: named-namespace}\n"
        "spec: {policyName: named-namespace, validationActions: [Deny]}\n"
    )
    reading = read_library(SUITES / "chainsaw")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "new", "namespace": "shop"}}
    earlier = {**pod, "metadata": {"name": "old", "namespace": "earlier"}}
    fixture = replace(
        reading.fixtures[0],
        policy_files=(str(policy),),
        policy="named-namespace",
        rule=None,
        obj=pod,
        context=(earlier,),
    )
    (judgement,) = evaluate([fixture]).judgements
    assert judgement.value is True, judgement.reason


_SPARING_SHOP = """apiVersion: policies.kyverno.io/v1
kind: PolicyException
metadata: {name: spare-shop, namespace: shop}
spec:
  policyRefs: [{name: replicas-floor, kind: ValidatingPolicy}]
  matchConditions: [{name: shop, expression: "object.metadata.namespace == 'shop'"}]
"""
_DENIED_DESPITE_IT = """apiVersion: chainsaw.kyverno.io/v1alpha1
kind: Test
metadata: {name: exception-ignored}
spec:
  steps:
    - try: [{create: {file: exception.yaml}}, {create: {file: policy.yaml}}]
    - try:
        - create:
            file: one-replica.yaml
            expect: [{check: {($error != null): true}}]
"""
_WORKFLOW = """jobs:
  off:
    steps: [{uses: ./run, with: {kyverno-configs: default, tests-path: exceptions-off}}]
  on:
    steps: [{uses: ./run, with: {kyverno-configs: "default,standard", tests-path: exceptions-on}}]
  elsewhere:
    steps: [{uses: ./run, with: {kyverno-configs: shop, tests-path: exceptions-shop}}]
  unsettled:
    strategy: {matrix: {kyverno-configs: [default, standard]}}
    steps:
      - {uses: ./run, with: {kyverno-configs: "${{ matrix.kyverno-configs }}", tests-path: both}}
"""


def _kyverno_repository(root: Path) -> Path:
    """A checkout in the layout of Kyverno's: its conformance workflow, its chart's values
    (exceptions off), install configurations, and one chainsaw test in each of four folders
    whose exception Kyverno's configuration applies or not."""
    (root / ".github" / "workflows").mkdir(parents=True)
    (root / ".github" / "workflows" / "tests-conformance.yaml").write_text(_WORKFLOW)
    (root / "charts" / "kyverno").mkdir(parents=True)
    (root / "charts" / "kyverno" / "values.yaml").write_text(
        "features:\n  policyExceptions: {enabled: false, namespace: ''}\n"
    )
    for name, values in (
        ("default", "features: {}\n"),
        ("standard", "features:\n  policyExceptions: {enabled: true, namespace: '*'}\n"),
        ("shop", "features:\n  policyExceptions: {enabled: true, namespace: kyverno}\n"),
    ):
        (root / "scripts" / "config" / name).mkdir(parents=True)
        (root / "scripts" / "config" / name / "kyverno.yaml").write_text(values)
    chainsaw = root / "test" / "conformance" / "chainsaw"
    source = SUITES / "chainsaw" / "replicas-floor"
    for folder in ("exceptions-off", "exceptions-on", "exceptions-shop", "both"):
        test = chainsaw / folder / "ignored"
        test.mkdir(parents=True)
        (test / "chainsaw-test.yaml").write_text(_DENIED_DESPITE_IT)
        # the suite's policy, denying as kyverno/policies' tests switch theirs to
        (test / "policy.yaml").write_text(
            (source / "policy.yaml").read_text().replace("[Audit]", "[Deny]")
        )
        (test / "exception.yaml").write_text(_SPARING_SHOP)
        (test / "one-replica.yaml").write_text((source / "one-replica.yaml").read_text())
    return chainsaw


def test_a_conformance_label_is_judged_with_the_exceptions_its_kyverno_applied(
    tmp_path: Path,
) -> None:
    """Kyverno's conformance workflow installs each folder's Kyverno from its chart's values
    and the named configurations: a folder run with PolicyExceptions off (the chart's
    default) labels an excepted object denied, and assay, judging with that configuration,
    agrees; where the configuration turns them on (or a matrix leaves it unsettled: assay's
    default) the exception spares the object."""
    from assay.testing.kyverno_configuration import exceptions_by_folder
    from workers.policy_engine.policies.kyverno_exceptions import Acceptance

    chainsaw = _kyverno_repository(tmp_path / "kyverno")
    assert exceptions_by_folder(tmp_path / "kyverno") == {
        "exceptions-off": Acceptance(enabled=False, namespace=""),
        "exceptions-on": Acceptance(enabled=True, namespace="*"),
        "exceptions-shop": Acceptance(enabled=True, namespace="kyverno"),
    }
    reading = read_library(chainsaw)
    figures = evaluate(reading.fixtures, reading.skipped)
    said = {j.fixture.source.split("/")[-3]: j.value for j in figures.judgements}
    assert all(j.fixture.label == "denied" for j in figures.judgements)
    assert said == {
        "exceptions-off": False,
        "exceptions-on": True,
        "exceptions-shop": False,
        "both": True,
    }


def test_global_context_entries_are_what_the_stored_cluster_holds() -> None:
    """A GlobalContextEntry a chainsaw step creates is in the cluster the later objects are
    judged on (not among the policy's files), and a Kyverno CLI test's mock of one is what
    the stored cluster would hold: a service's answer (inline data) becomes an entry that
    calls one, refused as outside the cluster; a mock that reshapes its objects is left out."""
    reading = read_library(SUITES / "global_context")
    by_name = {str(f.obj["metadata"]["name"]): f for f in reading.fixtures}
    assert sorted(by_name) == ["app", "ops-pod", "web-pod"]
    web = by_name["web-pod"]
    assert [o["kind"] for o in web.context] == ["ConfigMap", "GlobalContextEntry"]
    assert all("gctxentry" not in file for file in web.policy_files)
    assert reading.skipped["a test whose globalContextEntries mock no stored cluster"] == 1
    figures = evaluate(reading.fixtures, reading.skipped)
    judged = {j.fixture.obj["metadata"]["name"]: (j.value, j.reason) for j in figures.judgements}
    assert judged["web-pod"] == (True, "") and judged["ops-pod"] == (False, "")
    value, reason = judged["app"]
    assert value is None and "lives outside the cluster (an API call)" in reason
    assert refusal_class(reason) == (
        "lives in the admission request or outside the cluster: an API call"
    )


_TIER_POLICY = """apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: tier-allowed}
spec:
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: [v1]
        operations: [CREATE, UPDATE]
        resources: [pods]
  validations:
    - expression: >-
        resource.Get('example.com/v1', 'tiers', '',
        object.metadata.labels.tier).spec.allowed
"""
_TIER_CRD = """apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: tiers.example.com}
spec:
  group: example.com
  scope: Cluster
  names: {kind: Tier, plural: tiers, singular: tier, listKind: TierList}
  versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object}}}]
"""
_TIER_CLUSTER = """apiVersion: cli.kyverno.io/v1alpha1
kind: ClusterResource
metadata: {name: cluster}
spec:
  crds: [crds/tier.yaml]
  resources:
    - {apiVersion: example.com/v1, kind: Tier, metadata: {name: gold}, spec: {allowed: true}}
    - {apiVersion: example.com/v1, kind: Tier, metadata: {name: lead}, spec: {allowed: false}}
"""
_TIER_TEST = """apiVersion: cli.kyverno.io/v1alpha1
kind: Test
metadata: {name: tiers}
policies: [policy.yaml]
resources: [pods.yaml]
clusterResources: [cluster.yaml]
results:
  - {isValidatingPolicy: true, kind: Pod, policy: tier-allowed, resources: [gold-pod], result: pass}
  - {isValidatingPolicy: true, kind: Pod, policy: tier-allowed, resources: [lead-pod], result: fail}
"""


def test_a_kyverno_cli_tests_cluster_resources_are_objects_the_cluster_holds(
    tmp_path: Path,
) -> None:
    """The Kyverno CLI's ClusterResource wrapper lists the objects (and, by file, the
    CustomResourceDefinitions) of the cluster a policy's resource.Get reads: each is an
    object of the stored cluster, a cluster-scoped custom kind read without a namespace."""
    (tmp_path / "crds").mkdir()
    (tmp_path / "crds" / "tier.yaml").write_text(_TIER_CRD)
    (tmp_path / "policy.yaml").write_text(_TIER_POLICY)
    (tmp_path / "cluster.yaml").write_text(_TIER_CLUSTER)
    (tmp_path / "kyverno-test.yaml").write_text(_TIER_TEST)
    (tmp_path / "pods.yaml").write_text(
        "\n---\n".join(
            f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {t}-pod, namespace: default, "
            f"labels: {{tier: {t}}}}}\nspec: {{containers: [{{name: c, image: x}}]}}\n"
            for t in ("gold", "lead")
        )
    )
    reading = read_library(tmp_path)
    figures = evaluate(reading.fixtures, reading.skipped)
    judged = {j.fixture.name: (j.fixture.label, j.value) for j in figures.judgements}
    assert judged == {
        "Pod default/gold-pod": ("pass", True),
        "Pod default/lead-pod": ("fail", False),
    }, [j.reason for j in figures.judgements]


@pytest.mark.parametrize(
    ("image", "policy"),
    [
        ("nginx", "Always"),
        ("nginx:latest", "Always"),
        ("registry.example.com:5000/team/app", "Always"),
        ("registry.example.com:5000/team/app:1.2", "IfNotPresent"),
        ("nginx@sha256:" + "a" * 64, "IfNotPresent"),
        ("nginx:latest@sha256:" + "a" * 64, "Always"),
    ],
)
def test_a_stored_containers_pull_policy_is_the_api_servers_default(
    image: str, policy: str
) -> None:
    from assay.testing.api_server_defaults import with_defaults

    container = {"name": "c", "image": image}
    pod = with_defaults({"kind": "Pod", "spec": {"containers": [container]}})
    cron = with_defaults(
        {
            "kind": "CronJob",
            "spec": {
                "jobTemplate": {"spec": {"template": {"spec": {"initContainers": [container]}}}}
            },
        }
    )
    assert pod["spec"]["containers"][0]["imagePullPolicy"] == policy
    template = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert template["initContainers"][0]["imagePullPolicy"] == policy
    assert "imagePullPolicy" not in container  # a copy: the written fixture is kept
    written = {"kind": "Pod", "spec": {"containers": [{**container, "imagePullPolicy": "Never"}]}}
    assert with_defaults(written) == written
    assert with_defaults({"kind": "StorageClass"}) == {
        "kind": "StorageClass",
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    }


def test_a_chainsaw_label_is_judged_on_the_object_as_the_api_server_stored_it() -> None:
    """Kyverno judged a chainsaw test's objects as the cluster stored them, defaults filled in:
    a policy reading imagePullPolicy agrees with the label, where the written object (a Kyverno
    CLI test's, which no API server stores) lacks it."""
    reading = read_library(SUITES / "chainsaw")
    fixture = next(f for f in reading.fixtures if f.obj["metadata"]["name"] == "two-replicas")
    policy = Path(fixture.policy_files[0])
    pulled = policy.read_text().replace(
        "object.spec.?replicas.orValue(1) >= 2",
        "object.spec.template.spec.containers.all(c, c.imagePullPolicy == 'Always')",
    )
    with tempfile.TemporaryDirectory() as folder:
        changed = Path(folder) / "policy.yaml"
        changed.write_text(pulled)
        stored = replace(fixture, policy_files=(str(changed),), label="pass")
        (judged,) = evaluate([stored]).judgements
        assert judged.value is True, judged.reason  # nginx, no tag: Always
        (written,) = evaluate([replace(stored, defaulted=False)]).judgements
        assert written.value is None and "imagePullPolicy" in written.reason


def test_a_stored_template_always_has_its_metadata() -> None:
    from assay.testing.api_server_defaults import with_defaults

    job = {"spec": {"template": {"spec": {"containers": []}}}}
    cron = with_defaults({"kind": "CronJob", "spec": {"jobTemplate": job}})
    assert cron["spec"]["jobTemplate"]["metadata"] == {}
    assert cron["spec"]["jobTemplate"]["spec"]["template"]["metadata"] == {}
    labelled = {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": []}}
    deployment = with_defaults({"kind": "Deployment", "spec": {"template": labelled}})
    assert deployment["spec"]["template"]["metadata"] == {"labels": {"app": "web"}}


def test_a_chainsaw_namespace_carries_the_label_the_api_server_gives_every_one() -> None:
    """The test writes its Namespace without the name label; the cluster labels it with its
    name, and a policy reading namespaceObject's labels reads that one."""
    reading = read_library(SUITES / "chainsaw")
    fixture = next(f for f in reading.fixtures if f.obj["metadata"]["name"] == "two-replicas")
    written = fixture.namespaces[0]["metadata"].get("labels") or {}
    assert "kubernetes.io/metadata.name" not in written
    labelled = (
        Path(fixture.policy_files[0])
        .read_text()
        .replace(
            "object.spec.?replicas.orValue(1) >= 2",
            "namespaceObject.metadata.labels['kubernetes.io/metadata.name'] == 'shop'",
        )
    )
    with tempfile.TemporaryDirectory() as folder:
        changed = Path(folder) / "policy.yaml"
        changed.write_text(labelled)
        (judged,) = evaluate([replace(fixture, policy_files=(str(changed),))]).judgements
    assert judged.value is True, judged.reason
