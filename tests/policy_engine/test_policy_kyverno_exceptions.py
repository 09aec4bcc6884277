"""Kyverno PolicyExceptions are imported with the policy they exempt objects from and applied
as Kyverno applies them: an exempt object is not reported as violating (Kyverno reports it
``skip``). ``policies.kyverno.io`` exceptions by their match conditions, for a
ValidatingPolicy; ``kyverno.io/v2`` exceptions by their match, for the ClusterPolicy rules
they name (pod-controller rules by their own names). What an exception asks that assay
cannot apply refuses the policy, with the reason; what Kyverno does not apply to stored
objects is reported, never dropped unsaid."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from assay.testing.fake_apiserver import FakeApiServer
from assay.testing.fake_cluster import FakeCluster
from tests.cli_support import run_cli as run
from tests.kyverno_support import deployment
from workers.policy_engine.policies.documents import documents_from_text
from workers.policy_engine.policies.importer import import_documents
from workers.policy_engine.policies.kyverno_exceptions import Acceptance
from workers.policy_engine.probes.export import NotExportable, export_policy_documents

TEAM_LABEL = """
apiVersion: policies.kyverno.io/v1
kind: ValidatingPolicy
metadata: {name: team-label}
spec:
  validationActions: [Audit]
  matchConstraints:
    resourceRules:
      - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}
  validations:
    - expression: "'team' in object.metadata.?labels.orValue({})"
      message: pods carry a team label
"""

TEAM_LABEL_EXCEPTION = """
apiVersion: policies.kyverno.io/v1
kind: PolicyException
metadata: {name: system-pods, namespace: kyverno}
spec:
  policyRefs: [{name: team-label, kind: ValidatingPolicy}]
  matchConditions:
    - name: in-kube-system
      expression: "object.metadata.namespace == 'kube-system'"
    - name: marked
      # a comment the conditions are joined around
      expression: "object.metadata.?labels[?'tier'].orValue('') == 'control-plane' // ends here"
"""

RULES = """
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: no-latest}
spec:
  validationFailureAction: Audit
  background: true
  rules:
    - name: pinned-images
      match: {any: [{resources: {kinds: [Pod]}}]}
      validate:
        allowExistingViolations: true
        cel:
          expressions:
            - expression: "object.spec.containers.all(c, !c.image.endsWith(':latest'))"
              message: images are pinned
"""

RULES_EXCEPTION = """
apiVersion: kyverno.io/v2
kind: PolicyException
metadata: {name: sandbox, namespace: kyverno}
spec:
  exceptions:
    - policyName: no-latest
      ruleNames: [pinned-images, "autogen-*"]
  match:
    any:
      - resources:
          kinds: [Pod, Deployment]
          namespaces: [sandbox]
"""


def _pod(name: str, namespace: str, image: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"containers": [{"name": "app", "image": image}]},
    }


def _deployment(name: str, namespace: str, image: str) -> dict[str, Any]:
    return deployment(name, namespace, {"containers": [{"name": "app", "image": image}]})


OBJECTS = [
    _pod("apiserver", "kube-system", "k8s.example/apiserver:1.30", {"tier": "control-plane"}),
    _pod("dns", "kube-system", "k8s.example/dns:1", {}),
    _pod("shop", "shop", "registry.example.com/shop:latest", {"team": "shop"}),
    _pod("toy", "sandbox", "registry.example.com/toy:latest", {"team": "lab"}),
    _deployment("toy-web", "sandbox", "registry.example.com/web:latest"),
    _deployment("web", "shop", "registry.example.com/web:latest"),
]


def _cluster(folder: Path) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for number, obj in enumerate(OBJECTS):
        (folder / f"{number}.json").write_text(json.dumps(obj))
    return folder


@pytest.fixture
def store(redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("ASSAY_REDIS_URL", redis_url)
    monkeypatch.setenv("ASSAY_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    _cluster(tmp_path / "cluster")
    return tmp_path


@pytest.mark.integration
def test_a_validating_policy_exception_exempts_what_its_conditions_match(
    capsys: pytest.CaptureFixture[str], store: Path
) -> None:
    (store / "policy.yaml").write_text(TEAM_LABEL)
    (store / "exception.yaml").write_text(TEAM_LABEL_EXCEPTION)
    code, out, err = run(capsys, "probe", "import", "policy.yaml", "exception.yaml")
    assert code == 0, out + err
    assert "CronJob, 1 PolicyException\n" in out and "refused" not in out + err
    code, out, _ = run(capsys, "probe", "show", "policy:team-label")
    assert code == 0 and "exempt by PolicyException kyverno/system-pods when: (" in out, out
    code, out, _ = run(capsys, "probe", "test", "policy:team-label", "--snapshot", "cluster")
    assert code == 1, out
    # the control-plane pod of kube-system is exempt (both conditions); dns is not
    assert "Pod kube-system/dns: pods carry a team label" in out
    assert "apiserver" not in out
    # judged: dns, shop, toy and the two deployments (autogen); apiserver skipped
    assert "(5 judged, 3 violate it)" in out, out


@pytest.mark.integration
def test_a_cluster_policy_exception_exempts_the_rules_it_names_by_its_match(
    capsys: pytest.CaptureFixture[str], store: Path
) -> None:
    (store / "policy.yaml").write_text(RULES + "---\n" + RULES_EXCEPTION)
    code, out, err = run(capsys, "probe", "import", "policy.yaml")
    assert code == 0, out + err
    code, out, _ = run(capsys, "probe", "show", "policy:no-latest")
    assert code == 0 and out.count("exempt by PolicyException kyverno/sandbox") == 3, out
    code, out, _ = run(capsys, "probe", "test", "policy:no-latest", "--snapshot", "cluster")
    assert code == 1, out
    assert "Pod shop/shop: images are pinned" in out
    assert "Deployment shop/web: images are pinned" in out  # autogen-pinned-images
    assert "sandbox" not in out  # the pod and the deployment of sandbox: exempt


def test_exceptions_apply_on_the_test_api_server(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`assay policy translate` runs the imported policy on a live target: the exempt objects
    are judged by neither side of the proof, and the export is refused (it would drop the
    exception), with the reason."""
    folder = _cluster(tmp_path / "cluster")
    (tmp_path / "policy.yaml").write_text(RULES + "---\n" + RULES_EXCEPTION)
    monkeypatch.chdir(tmp_path)
    with FakeApiServer([FakeCluster.from_snapshot(folder, name="eu")]) as server:
        monkeypatch.setenv("ASSAY_KUBECONFIG", str(server.write_kubeconfig(tmp_path / "kc")))
        code, out, err = run(capsys, "policy", "translate", "policy.yaml", "--context", "eu")
    text = " ".join((out + err).split())
    assert code != 0, text
    assert "imported with Kyverno PolicyExceptions, which an export does not carry" in text


def test_an_exception_dropped_would_have_reported_the_exempt_objects(tmp_path: Path) -> None:
    """Kyverno's own behaviour, both ways: the same files without the exception report the
    exempt objects (so the exception is what spares them)."""
    from workers.engine.toolsets.snapshot_backend import SnapshotBackend
    from workers.policy_engine.policies.run import run_policies

    backend = SnapshotBackend(_cluster(tmp_path / "cluster"))
    with_it, refusals = import_documents(
        documents_from_text(TEAM_LABEL + "---\n" + TEAM_LABEL_EXCEPTION, "p.yaml")
    )
    without, _ = import_documents(documents_from_text(TEAM_LABEL, "p.yaml"))
    assert refusals == []
    (exempted,), _ = run_policies(with_it, backend)
    (plain,), _ = run_policies(without, backend)
    assert sorted(v.name for v in plain.violations) == ["apiserver", "dns", "toy-web", "web"]
    assert sorted(v.name for v in exempted.violations) == ["dns", "toy-web", "web"]
    with pytest.raises(NotExportable, match="PolicyExceptions"):
        export_policy_documents(with_it[0], "kyverno")


def _exception(spec: dict[str, Any], group: str = "kyverno.io/v2") -> str:
    return yaml.safe_dump(
        {
            "apiVersion": group,
            "kind": "PolicyException",
            "metadata": {"name": "odd", "namespace": "kyverno"},
            "spec": spec,
        }
    )


_RULE_REF = {"exceptions": [{"policyName": "no-latest", "ruleNames": ["pinned-images"]}]}
_ANY_POD = {"any": [{"resources": {"kinds": ["Pod"]}}]}
_VP_REF = {"policyRefs": [{"name": "team-label", "kind": "ValidatingPolicy"}]}

_BY_ADMINS = "request.userInfo.groups.exists(g, g == 'admins')"

REFUSED = [
    (
        RULES,
        _exception({**_RULE_REF, "match": _ANY_POD, "conditions": {"any": [{"key": "x"}]}}),
        "JMESPath conditions",
    ),
    (
        RULES,
        _exception({**_RULE_REF, "match": _ANY_POD, "podSecurity": [{"controlName": "x"}]}),
        "Pod Security controls",
    ),
    (
        TEAM_LABEL,
        _exception({**_VP_REF, "expiresAt": "2999-01-01T00:00:00Z"}, "policies.kyverno.io/v1"),
        "a check would go on applying it after that",
    ),
    (
        TEAM_LABEL,
        _exception(
            {**_VP_REF, "matchConditions": [{"name": "admins", "expression": _BY_ADMINS}]},
            "policies.kyverno.io/v1",
        ),
        "it reads request.userInfo, which only an admission request holds",
    ),
]


@pytest.mark.parametrize(("policy", "exception", "reason"), REFUSED)
def test_an_exception_assay_cannot_apply_refuses_the_policy(
    policy: str, exception: str, reason: str
) -> None:
    imported, refusals = import_documents(documents_from_text(policy + "---\n" + exception, "p"))
    assert imported == []
    assert any(reason in r.reason and "PolicyException kyverno/odd" in r.reason for r in refusals)


NOT_APPLIED = [
    (
        RULES,
        _exception({**_RULE_REF, "match": _ANY_POD, "background": False}),
        "applies it at admission only",
    ),
    (
        TEAM_LABEL,
        _exception({**_VP_REF, "expiresAt": "2020-01-01T00:00:00Z"}, "policies.kyverno.io/v1"),
        "so Kyverno no longer applies it",
    ),
    (
        TEAM_LABEL,
        _exception({"policyRefs": [{"name": "elsewhere", "kind": "ValidatingPolicy"}]}, "p/v1"),
        "exempts objects from no policy imported from the files",
    ),
]


@pytest.mark.parametrize(("policy", "exception", "reason"), NOT_APPLIED)
def test_an_exception_kyverno_would_not_apply_is_reported_not_dropped(
    policy: str, exception: str, reason: str
) -> None:
    exception = exception.replace("apiVersion: p/v1", "apiVersion: policies.kyverno.io/v1")
    imported, refusals = import_documents(documents_from_text(policy + "---\n" + exception, "p"))
    assert len(imported) == 1
    assert [(r.kind, r.name) for r in refusals] == [("PolicyException", "odd")]
    assert reason in refusals[0].reason
    assert all(d.get("kind") != "PolicyException" for d in imported[0].documents)


def test_an_exception_of_a_long_name_in_a_long_namespace_is_applied(tmp_path: Path) -> None:
    """Names of up to 253 characters are Kubernetes' own; the exception is still applied."""
    from workers.engine.toolsets.snapshot_backend import SnapshotBackend
    from workers.policy_engine.policies.run import run_policies

    long = TEAM_LABEL_EXCEPTION.replace("name: system-pods,", f"name: {'system-pods-' * 20}x,")
    long = long.replace("namespace: kyverno}", f"namespace: {'k' * 63}}}")
    imported, refusals = import_documents(documents_from_text(TEAM_LABEL + "---\n" + long, "p"))
    assert refusals == [] and len(imported) == 1
    (result,), _ = run_policies(imported, SnapshotBackend(_cluster(tmp_path / "cluster")))
    assert sorted(v.name for v in result.violations) == ["dns", "toy-web", "web"]


@pytest.mark.integration
def test_exempt_objects_are_reported_skip_as_kyverno_reports_them(
    capsys: pytest.CaptureFixture[str],
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """`assay report` after a tick of the set: an exempt object has a `skip` result naming
    its exception (Kyverno's report of a background scan), the others pass or fail."""
    from schemas.request import SnapshotTarget
    from tests.report_support import import_set, policy_fleet, run_set

    fleet = policy_fleet(redis_url, monkeypatch, tmp_path)
    # kube-system is left out of reports (Kyverno's default resource filters): platform
    folder = tmp_path / "snaps" / "lab"
    folder.mkdir(parents=True)
    objects = json.dumps(OBJECTS).replace("kube-system", "platform")
    (folder / "objects.json").write_text(json.dumps({"kind": "List", "items": json.loads(objects)}))
    exception = TEAM_LABEL_EXCEPTION.replace("kube-system", "platform")
    (tmp_path / "policies.yaml").write_text(
        "\n---\n".join((TEAM_LABEL, exception, RULES, RULES_EXCEPTION))
    )
    import_set(capsys, tmp_path / "policies.yaml", name="lab")
    run_set(fleet, SnapshotTarget(path="snaps/lab"), name="lab")
    code, out, err = run(capsys, "report", "--target", "snapshot:lab")
    assert code == 0, err
    found = {
        (r["policy"], r.get("rule", ""), r["resources"][0]["name"]): (r["result"], r["message"])
        for document in yaml.safe_load_all(out)
        if document
        for r in document["results"]
    }
    skip = "rule is skipped due to policy exception "
    assert found[("team-label", "exception", "apiserver")] == (
        "skip",
        "rule is skipped due to policy exception: kyverno/system-pods",
    )
    assert found[("team-label", "", "dns")][0] == "fail"
    assert found[("no-latest", "pinned-images", "toy")] == ("skip", skip + "kyverno/sandbox")
    assert found[("no-latest", "autogen-pinned-images", "toy-web")] == (
        "skip",
        skip + "kyverno/sandbox",
    )
    assert found[("no-latest", "pinned-images", "shop")][0] == "fail"
    assert found[("no-latest", "pinned-images", "apiserver")][0] == "pass"


@pytest.mark.parametrize(
    ("accepted", "applied"),
    [
        (Acceptance(), True),
        (Acceptance(namespace="kyverno"), True),
        (Acceptance(enabled=False), False),
        (Acceptance(namespace="policies"), False),
        (Acceptance(namespace=""), False),
    ],
    ids=["default", "its-namespace", "switched-off", "another-namespace", "no-namespace"],
)
def test_exceptions_apply_only_as_the_kyverno_configuration_says(
    tmp_path: Path, accepted: Acceptance, applied: bool
) -> None:
    """Kyverno applies PolicyExceptions only when its features.policyExceptions is enabled,
    and then only those of the namespace it names ('*': any). An exception left out is
    reported with that reason, and the policy judges without it."""
    from workers.engine.toolsets.snapshot_backend import SnapshotBackend
    from workers.policy_engine.policies.run import run_policies

    text = TEAM_LABEL + "---\n" + TEAM_LABEL_EXCEPTION + "---\n" + RULES + "---\n" + RULES_EXCEPTION
    policies, refusals = import_documents(
        documents_from_text(text, "p.yaml"), exceptions_accepted=accepted
    )
    results, _ = run_policies(policies, SnapshotBackend(_cluster(tmp_path / "cluster")))
    violating = {r.policy: sorted(v.name for v in r.violations) for r in results}
    if applied:
        assert refusals == []
        assert violating == {"team-label": ["dns", "toy-web", "web"], "no-latest": ["shop", "web"]}
    else:
        assert [(r.name, r.kind) for r in refusals] == [
            ("system-pods", "PolicyException"),
            ("sandbox", "PolicyException"),
        ]
        assert all("not applied" in r.reason for r in refusals), refusals
        assert violating == {
            "team-label": ["apiserver", "dns", "toy-web", "web"],
            "no-latest": ["shop", "toy", "toy-web", "web"],
        }


@pytest.mark.integration
def test_the_import_command_and_its_setting_switch_exceptions_off(
    capsys: pytest.CaptureFixture[str], store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (store / "policy.yaml").write_text(RULES + "---\n" + RULES_EXCEPTION)
    code, out, err = run(capsys, "probe", "import", "policy.yaml", "--no-exceptions", "--dry-run")
    assert code == 65, out + err
    assert "refused PolicyException sandbox" in out and "switched off" in out, out
    monkeypatch.setenv("ASSAY_KYVERNO_POLICY_EXCEPTIONS_NAMESPACE", "policies")
    code, out, err = run(capsys, "probe", "import", "policy.yaml")
    assert code == 65 and "accepted only from 'policies'" in out, out + err
    code, out, _ = run(capsys, "probe", "test", "policy:no-latest", "--snapshot", "cluster")
    assert "Pod sandbox/toy: images are pinned" in out, out  # judged: no exception applied
    code, out, err = run(capsys, "probe", "import", "policy.yaml", "--exceptions-namespace", "*")
    assert code == 0 and "refused" not in out, out + err
    code, out, _ = run(capsys, "probe", "test", "policy:no-latest", "--snapshot", "cluster")
    assert code == 1 and "sandbox" not in out, out
    code, out, err = run(capsys, "probe", "import", "policy.yaml", "--exceptions-namespace", "A B")
    assert code == 64 and "NAMESPACE (got 'A B')" in out + err, out + err
