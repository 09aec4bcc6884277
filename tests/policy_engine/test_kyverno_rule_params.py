"""A Kyverno ClusterPolicy rule's params (``validate.cel.paramKind`` / ``paramRef``), read from
the target cluster on every run as Kyverno reads them: by name or selector, in a namespace or
in the judged object's own; a named object the target lacks, or none selected with Deny, is
Kyverno's rule error (no verdict, for the objects the rule would judge only); none selected
otherwise admits; with several selected, the first listed under which a precondition does
not hold skips the object."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from schemas.verdict import VerdictKind
from tests.cli_support import run_cli as run
from tests.params_support import deployments, limits, snapshot
from workers.policy_engine.policies.documents import documents_from_text
from workers.policy_engine.policies.importer import import_documents
from workers.policy_engine.policies.run import run_policies
from workers.policy_engine.probes.export import NotExportable, export_policy_documents

REPLICAS = {"policy": "replicas"}  # every params object here carries it

POLICY = """
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: max-replicas}
spec:
  validationFailureAction: Enforce
  rules:
    - name: replicas
      match:
        any:
          - resources: {kinds: [Deployment]}
      validate:
        cel:
          paramKind: {apiVersion: v1, kind: ConfigMap}
          paramRef: PARAM_REF
          expressions:
            - expression: "object.spec.replicas <= int(params.data.maxReplicas)"
              messageExpression: "'more than ' + params.data.maxReplicas + ' replicas'"
"""


def _text(param_ref: str) -> str:
    return POLICY.replace("PARAM_REF", param_ref)


def _import(text: str) -> list[Any]:
    policies, refusals = import_documents(documents_from_text(text, "p.yaml"))
    assert refusals == []
    return policies


def test_a_rules_params_are_read_from_the_target_through_probe_import_and_test(
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
    assert "params from the target (ConfigMap limits in policy-config; none found: error)" in out
    snapshot(tmp_path / "strict", limits("limits", "policy-config", 5, REPLICAS), *deployments())
    snapshot(tmp_path / "loose", limits("limits", "policy-config", 50, REPLICAS), *deployments())
    snapshot(tmp_path / "none", *deployments())

    code, out, _ = run(capsys, "probe", "test", "policy:max-replicas", "--snapshot", "strict")
    assert code == 1 and "(3 judged, 2 violate it)" in out and "more than 5 replicas" in out
    code, out, _ = run(capsys, "probe", "test", "policy:max-replicas", "--snapshot", "loose")
    assert code == 0, out
    # the named object is missing: Kyverno reports the rule as an error, so no verdict
    code, out, _ = run(capsys, "probe", "test", "policy:max-replicas", "--snapshot", "none")
    assert code == 3, out
    assert "ConfigMap (v1) 'limits' is not on the target in namespace policy-config" in out


def test_a_missing_named_object_leaves_only_the_objects_it_would_judge_without_a_verdict(
    tmp_path: Path,
) -> None:
    """Per-namespace params: a namespace without them errs for its objects only; with no
    object there, the rest is judged (Kyverno errs for a rule it evaluates, not for others)."""
    policies = _import(_text("{name: limits, parameterNotFoundAction: Allow}"))
    backend = snapshot(tmp_path / "a", limits("limits", "shop", 5, REPLICAS), *deployments())
    (result,), _ = run_policies(policies, backend)
    assert result.verdict == VerdictKind.CANNOT_DETERMINE  # Allow changes nothing for a name
    assert "judging Deployment lab/huge" in (result.reason or "")
    shop_only = [d for d in deployments() if d["metadata"]["namespace"] == "shop"]
    backend = snapshot(tmp_path / "b", limits("limits", "shop", 5, REPLICAS), *shop_only)
    (result,), _ = run_policies(policies, backend)
    assert result.verdict == VerdictKind.FALSE
    assert [v.name for v in result.violations] == ["large"]


def test_a_selector_admits_where_none_is_found_unless_it_says_deny(tmp_path: Path) -> None:
    allow = _import(_text("{selector: {matchLabels: {policy: replicas}}}"))
    backend = snapshot(tmp_path / "a", limits("shop-limits", "shop", 5, REPLICAS), *deployments())
    (result,), _ = run_policies(allow, backend)
    assert result.verdict == VerdictKind.FALSE  # lab holds none: its Deployment is admitted
    assert [v.name for v in result.violations] == ["large"] and result.judged_total == 2

    deny = _import(
        _text("{selector: {matchLabels: {policy: replicas}}, parameterNotFoundAction: Deny}")
    )
    (result,), _ = run_policies(deny, backend)
    assert result.verdict == VerdictKind.CANNOT_DETERMINE
    assert "selects no ConfigMap (v1) on the target in the judged object's namespace" in (
        result.reason or ""
    )


def test_with_several_params_the_first_listed_whose_precondition_fails_skips_the_object(
    tmp_path: Path,
) -> None:
    text = _text("{selector: {matchLabels: {policy: replicas}}}").replace(
        "      validate:",
        "      celPreconditions:\n"
        "        - name: not-exempt\n"
        "          expression: \"params.data.?exempt.orValue('') != object.metadata.name\"\n"
        "      validate:",
    )
    policies = _import(text)
    # in shop, a-limits (listed first) exempts large: skipped, whatever b-limits says
    backend = snapshot(
        tmp_path / "a",
        limits("b-limits", "shop", 1, REPLICAS),
        limits("a-limits", "shop", 5, REPLICAS, {"exempt": "large"}),
        *deployments()[:2],
    )
    (result,), _ = run_policies(policies, backend)
    assert result.verdict == VerdictKind.FALSE
    assert [v.name for v in result.violations] == ["small"]  # 2 > 1 under b-limits
    assert result.judged_total == 1
    assert "more than 1 replicas" in result.violations[0].message


def test_params_read_without_both_param_kind_and_param_ref_are_refused() -> None:
    text = _text("{name: limits}").replace("          paramRef: {name: limits}\n", "")
    _, refusals = import_documents(documents_from_text(text, "p.yaml"))
    assert len(refusals) == 1 and "reads params" in refusals[0].reason


def test_the_vap_export_binds_the_params_only_where_the_api_server_reads_them_alike() -> None:
    (policy,) = _import(
        _text("{name: limits, namespace: policy-config, parameterNotFoundAction: Deny}")
    )
    vap, binding = export_policy_documents(policy, "vap")
    assert vap["spec"]["paramKind"] == {"apiVersion": "v1", "kind": "ConfigMap"}
    assert binding["spec"]["paramRef"] == {
        "name": "limits",
        "namespace": "policy-config",
        "parameterNotFoundAction": "Deny",
    }
    # a missing named object is Kyverno's error whatever the action; Allow would admit
    (policy,) = _import(_text("{name: limits, parameterNotFoundAction: Allow}"))
    with pytest.raises(NotExportable, match="reports a missing one as an error"):
        export_policy_documents(policy, "vap")
    # none selected admits in both: Allow written out where Kyverno's is unset
    (policy,) = _import(_text("{selector: {matchLabels: {policy: replicas}}}"))
    _, binding = export_policy_documents(policy, "vap")
    assert binding["spec"]["paramRef"]["parameterNotFoundAction"] == "Allow"
    # a precondition reading selected params: Kyverno's first listed decides a skip
    text = _text("{selector: {matchLabels: {policy: replicas}}}").replace(
        "      validate:",
        "      celPreconditions:\n"
        "        - {name: is-on, expression: \"params.data.?off.orValue('') != 'yes'\"}\n"
        "      validate:",
    )
    (policy,) = _import(text)
    with pytest.raises(NotExportable, match="the first listed exempts"):
        export_policy_documents(policy, "vap")
    with pytest.raises(NotExportable, match="has no params"):
        export_policy_documents(
            _import(_text("{name: limits, parameterNotFoundAction: Deny}"))[0], "kyverno"
        )


def test_a_param_ref_with_neither_name_nor_selector_selects_nothing(tmp_path: Path) -> None:
    """Kyverno lists nothing for it: no rule runs (Allow or unset), or its error (Deny)."""
    backend = snapshot(tmp_path / "a", limits("limits", "shop", 1, REPLICAS), *deployments())
    (result,), _ = run_policies(_import(_text("{namespace: shop}")), backend)
    assert result.verdict == VerdictKind.TRUE and result.judged_total == 0
    (result,), _ = run_policies(_import(_text("{parameterNotFoundAction: Deny}")), backend)
    assert result.verdict == VerdictKind.CANNOT_DETERMINE
