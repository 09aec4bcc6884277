"""A ValidatingAdmissionPolicy's params as Kubernetes reads them: a binding's paramRef to a
policy without paramKind is ignored (the rest of the files still imports); a paramRef that
names no object in the files reads the params from the target cluster on each run (by name
or selector, in a namespace or in the judged object's own), with parameterNotFoundAction
Allow or Deny honoured."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

from assay.testing.fake_apiserver import FakeApiServer
from assay.testing.fake_cluster import FakeCluster
from schemas.request import ContextTarget
from schemas.settings import load_settings
from schemas.verdict import VerdictKind
from tests.cli_support import run_cli as run
from tests.params_support import deployments, limits, snapshot
from workers.engine.toolsets.live_backend import LiveBackend
from workers.policy_engine.policies.documents import documents_from_text
from workers.policy_engine.policies.importer import import_documents
from workers.policy_engine.policies.run import run_policies

POLICY = """
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: max-replicas}
spec:
  failurePolicy: Fail
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
      - {apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}
  validations:
    - expression: "object.spec.replicas <= int(params.data.maxReplicas)"
      messageExpression: "'more than ' + params.data.maxReplicas + ' replicas'"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: max-replicas}
spec:
  policyName: max-replicas
  validationActions: [Deny]
  paramRef: PARAM_REF
"""


def _text(param_ref: str) -> str:
    return POLICY.replace("PARAM_REF", param_ref)


def test_a_param_ref_to_a_policy_without_param_kind_is_ignored() -> None:
    text = _text("{name: settings, namespace: policy-config, parameterNotFoundAction: Deny}")
    text = text.replace("  paramKind: {apiVersion: v1, kind: ConfigMap}\n", "")
    text = text.replace("int(params.data.maxReplicas)", "10").replace(
        "'more than ' + params.data.maxReplicas + ' replicas'", "'too many replicas'"
    )
    text += "---\n" + yaml.safe_dump(limits("settings", "policy-config", 3))
    policies, refusals = import_documents(documents_from_text(text, "bundle.yaml"))
    assert refusals == []
    assert [p.name for p in policies] == ["max-replicas"]
    assert policies[0].params is None and policies[0].param_source is None


def test_params_named_by_the_binding_are_read_from_the_target_through_probe_test(
    capsys: pytest.CaptureFixture[str],
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("ASSAY_REDIS_URL", redis_url)
    monkeypatch.setenv("ASSAY_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    Path("policy.yaml").write_text(
        _text("{name: limits, namespace: policy-config, parameterNotFoundAction: Deny}")
    )
    code, out, err = run(capsys, "probe", "import", "policy.yaml")
    assert code == 0, out + err
    assert "params from the target (ConfigMap limits in policy-config; none found: Deny)" in out
    snapshot(tmp_path / "strict", limits("limits", "policy-config", 5), *deployments())
    snapshot(tmp_path / "loose", limits("limits", "policy-config", 50), *deployments())
    snapshot(tmp_path / "none", *deployments())

    code, out, _ = run(capsys, "probe", "test", "policy:max-replicas", "--snapshot", "strict")
    assert code == 1 and "(3 judged, 2 violate it)" in out and "more than 5 replicas" in out
    code, out, _ = run(capsys, "probe", "test", "policy:max-replicas", "--snapshot", "loose")
    assert code == 0, out
    # no params object on the target and Deny: the failure policy (Fail) refuses every one
    code, out, _ = run(capsys, "probe", "test", "policy:max-replicas", "--snapshot", "none")
    assert code == 1 and "(3 judged, 3 violate it)" in out
    assert "no params found for policy binding with `Deny` parameterNotFoundAction" in out


def test_allow_admits_when_no_params_object_is_found(tmp_path: Path) -> None:
    policies, refusals = import_documents(
        documents_from_text(
            _text("{name: limits, namespace: policy-config, parameterNotFoundAction: Allow}"),
            "p.yaml",
        )
    )
    assert refusals == []
    (result,), _ = run_policies(policies, snapshot(tmp_path / "a", *deployments()))
    assert result.verdict == VerdictKind.TRUE and result.judged_total == 0


def test_a_selector_without_namespace_reads_each_objects_own_namespace(tmp_path: Path) -> None:
    ref = "{selector: {matchLabels: {policy: replicas}}, parameterNotFoundAction: Allow}"
    policies, refusals = import_documents(documents_from_text(_text(ref), "p.yaml"))
    assert refusals == []
    backend = snapshot(
        tmp_path / "a",
        limits("shop-limits", "shop", 5, {"policy": "replicas"}),
        limits("shop-other", "shop", 50),  # not selected
        *deployments(),  # lab holds no params: Allow admits its Deployments
    )
    (result,), _ = run_policies(policies, backend)
    assert result.verdict == VerdictKind.FALSE
    assert [v.name for v in result.violations] == ["large"]
    assert result.judged_total == 2

    # every params object selected must admit the object (evaluated with each)
    backend = snapshot(
        tmp_path / "b",
        limits("shop-limits", "shop", 5, {"policy": "replicas"}),
        limits("shop-strict", "shop", 1, {"policy": "replicas"}),
        *deployments(),
    )
    (result,), _ = run_policies(policies, backend)
    assert sorted(v.name for v in result.violations) == ["large", "small"]  # each once
    assert result.violations_total == 2 and result.judged_total == 2
    assert len(result.probes) == 1


def test_params_of_a_kind_the_target_does_not_serve_give_no_verdict(tmp_path: Path) -> None:
    text = _text("{name: limits, parameterNotFoundAction: Deny}").replace(
        "paramKind: {apiVersion: v1, kind: ConfigMap}",
        "paramKind: {apiVersion: example.com/v1, kind: ReplicaLimit}",
    )
    policies, refusals = import_documents(documents_from_text(text, "p.yaml"))
    assert refusals == []
    (result,), _ = run_policies(policies, snapshot(tmp_path / "a", *deployments()))
    assert result.verdict == VerdictKind.CANNOT_DETERMINE
    assert "ReplicaLimit (example.com/v1) is not served by the target" in (result.reason or "")


def test_a_live_cluster_serves_params_from_one_listing_per_tick(tmp_path: Path) -> None:
    ref = "{name: limits, namespace: policy-config, parameterNotFoundAction: Deny}"
    policies, _ = import_documents(documents_from_text(_text(ref), "p.yaml"))
    many = [policies[0].model_copy(update={"name": f"max-{n}"}) for n in range(5)]
    snapshot(tmp_path / "cluster", limits("limits", "policy-config", 5), *deployments())
    with FakeApiServer([FakeCluster.from_snapshot(tmp_path / "cluster", name="c")]) as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        settings = load_settings(kubeconfig=str(kubeconfig), kube_qps=1000)
        backend = LiveBackend.from_target(ContextTarget(context="c"), settings)
        server.clear_requests()
        results, _ = run_policies(many, backend)
        assert {r.verdict for r in results} == {VerdictKind.FALSE}
        assert all(sorted(v.name for v in r.violations) == ["huge", "large"] for r in results)
        listed = Counter(
            r.path for r in server.requests if r.path.rstrip("/").endswith("/configmaps")
        )
        assert list(listed.values()) == [1], listed
