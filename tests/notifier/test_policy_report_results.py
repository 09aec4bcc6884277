"""Imported policies in PolicyReports, object by object, against what the engines report.

A policy set (tests/fixtures/policy-reports/policies.yaml: a Kyverno ClusterPolicy with two
rules, a Kyverno ValidatingPolicy, a ValidatingAdmissionPolicy with its binding, a
Gatekeeper constraint) is imported with `assay probe import` and run as the worker runs it
(``evaluate_policy_request``; each policy's verdict recorded as its own run in a real
redis-server) over snapshot folders and over the test API server. `assay report` prints
the reports; every document is validated against the wgpolicyk8s.io/v1alpha2 and
openreports.io/v1alpha1 schemas, and the results are compared, object by object and field
by field, with what Kyverno's background scan reports for the same cluster
(kyverno-background-scan.yaml) and what Gatekeeper's audit records (gatekeeper-audit.yaml).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from notifier.policy_reports import MAX_RESULTS, report_name
from schemas.request import ContextTarget, SnapshotTarget
from tests.cli_support import run_cli as run
from tests.report_support import (
    POLICY_FIXTURE,
    POLICY_SET,
    Fleet,
    import_set,
    policy_fleet,
    record,
    run_set,
    validate_report,
)

KYVERNO_FORMATS = {"kyverno-clusterpolicy", "kyverno-validatingpolicy", "vap"}


@pytest.fixture
def fleet(redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Fleet:
    return policy_fleet(redis_url, monkeypatch, tmp_path)


def report(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, Any]]:
    code, out, err = run(capsys, "report", *args)
    assert code == 0, err
    documents = [d for d in yaml.safe_load_all(out) if d is not None]
    api = "openreports" if "--openreports" in args else "wgpolicyk8s"
    for document in documents:
        validate_report(document, api)
    return documents


def results(documents: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(report, result) for every result, each checked to sit in its object's report."""
    out = []
    for document in documents:
        for result in document["results"]:
            resource = (result.get("resources") or [{}])[0]
            assert document["metadata"].get("namespace") == resource.get("namespace"), result
            out.append((document, result))
    return out


def scope_key(reference: dict[str, Any]) -> tuple[str, ...]:
    return tuple(
        reference.get(field, "") for field in ("apiVersion", "kind", "namespace", "name", "uid")
    )


def compared(result: dict[str, Any]) -> dict[str, Any]:
    """The fields both engines fill in the same way (source, timestamp and the properties
    other than the binding and the process are each engine's own)."""
    return {
        "result": result["result"],
        "message": result.get("message"),
        "scored": result["scored"],
        "category": result.get("category"),
        "severity": result.get("severity"),
        "binding": result.get("properties", {}).get("binding"),
        "process": result.get("properties", {}).get("process"),
    }


def kyverno_expected() -> dict[tuple[Any, ...], dict[str, Any]]:
    """What Kyverno's background scan reports, keyed (policy, rule, the resource)."""
    expected = {}
    scan = (POLICY_FIXTURE / "kyverno-background-scan.yaml").read_text()
    for document in yaml.safe_load_all(scan):
        assert document["metadata"]["name"] == document["scope"]["uid"]  # one per resource
        for result in document["results"]:
            key = (result["policy"], result.get("rule", ""), scope_key(document["scope"]))
            expected[key] = compared(result)
    return expected


def ours(documents: list[dict[str, Any]], formats: set[str]) -> dict[tuple[Any, ...], Any]:
    found: dict[tuple[Any, ...], Any] = {}
    for _, result in results(documents):
        if result["properties"].get("format") not in formats:
            continue
        assert result["source"] == "assay"
        (resource,) = result["resources"]
        key = (result["policy"], result.get("rule", ""), scope_key(resource))
        assert key not in found, f"two results for {key}"
        found[key] = compared(result)
    return found


def test_a_policy_set_over_snapshots_reports_each_judged_object_as_kyverno_does(
    capsys: pytest.CaptureFixture[str], fleet: Fleet
) -> None:
    import_set(capsys, POLICY_FIXTURE / "policies.yaml")
    for name in ("shop-eu", "shop-us"):
        outcome = run_set(fleet, SnapshotTarget(path=f"snaps/{name}"))
        assert len(outcome.children) == 4, outcome.report.verdict

    documents = report(capsys, "--target", "snapshot:shop-eu")
    report(capsys, "--target", "snapshot:shop-eu", "--openreports")  # validates too
    # Kyverno's background scan, result by result: the same (policy, rule, object) set, so
    # no result dropped and no pass for an object the policy did not judge (dev/debug, which
    # its match condition leaves out; anything in kube-system, which Kyverno's default
    # resource filters skip), and the same result, message, scored, category, severity
    assert ours(documents, KYVERNO_FORMATS) == kyverno_expected()

    # Gatekeeper's audit: the same violations, and results only for what the constraint
    # matches (Deployments in shop)
    audit = yaml.safe_load((POLICY_FIXTURE / "gatekeeper-audit.yaml").read_text())
    gatekeeper = [r for _, r in results(documents) if r["properties"]["format"] == "gatekeeper"]
    violations = {
        (
            r["resources"][0]["kind"],
            r["resources"][0]["namespace"],
            r["resources"][0]["name"],
            r["message"],
        )
        for r in gatekeeper
        if r["result"] == "fail"
    }
    assert violations == {
        (v["kind"], v["namespace"], v["name"], v["message"]) for v in audit["status"]["violations"]
    }
    assert sorted((r["resources"][0]["name"], r["result"]) for r in gatekeeper) == [
        ("cart", "fail"),
        ("web", "pass"),
    ]
    assert {(r["policy"], r["rule"], r["severity"]) for r in gatekeeper} == {
        ("shop-tier-labelled", "assaytierlabel", "low")  # the constraint's annotation
    }
    assert all(
        "category" not in r and "message" not in r for r in gatekeeper if r["result"] == "pass"
    )

    # the set's own check has no result of its own: its policies report, each as its check
    assert {r["properties"]["format"] for _, r in results(documents)} == {
        "kyverno-clusterpolicy",
        "kyverno-validatingpolicy",
        "vap",
        "gatekeeper",
    }
    # one name per (target, namespace); the other target's reports are its own
    assert {d["metadata"]["name"] for d in documents} == {report_name("snapshot:shop-eu")}
    assert sorted((d["kind"], d["metadata"].get("namespace")) for d in documents) == [
        ("ClusterPolicyReport", None),
        ("PolicyReport", "dev"),
        ("PolicyReport", "shop"),
    ]
    everything = report(capsys)
    names = {
        d["metadata"]["annotations"]["assay.dev/target"]: d["metadata"]["name"] for d in everything
    }
    assert names == {
        "snapshot:shop-eu": report_name("snapshot:shop-eu"),
        "snapshot:shop-us": report_name("snapshot:shop-us"),
    }
    us = [r for d, r in results(everything) if d["metadata"]["name"] == names["snapshot:shop-us"]]
    cart = {(r["policy"], r["result"]) for r in us if r["resources"][0]["name"] == "cart"}
    assert cart == {
        ("require-labels", "pass"),
        ("trusted-registries", "pass"),
        ("shop-tier-labelled", "pass"),
    }

    # JUnit: one case per check (4 policies and the set, on 2 targets); false: on shop-eu
    # all four and the set, on shop-us require-labels (Namespace dev), run-as-non-root (the
    # cart Pod) and the set
    code, out, err = run(capsys, "report", "--format", "junit")
    assert code == 1, err
    import xml.etree.ElementTree as ET

    root = ET.fromstring(out)
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("10", "8", "0")


def test_the_same_policies_over_the_test_api_server_report_the_same_objects(
    capsys: pytest.CaptureFixture[str], fleet: Fleet
) -> None:
    from assay.testing.fake_apiserver import FakeApiServer
    from assay.testing.fake_cluster import FakeCluster

    import_set(capsys, POLICY_FIXTURE / "policies.yaml")
    cluster = FakeCluster.from_snapshot(fleet.root / "snaps" / "shop-eu", name="shop-eu")
    with FakeApiServer([cluster]) as server:
        kubeconfig = server.write_kubeconfig(fleet.root / "kubeconfig")
        fleet.settings = fleet.settings.model_copy(update={"kubeconfig": str(kubeconfig)})
        run_set(fleet, ContextTarget(context="shop-eu", kubeconfig=str(kubeconfig)))
        run_set(fleet, SnapshotTarget(path="snaps/shop-eu"))
        assert all(r.method == "GET" for r in server.requests)
    live = report(capsys, "--target", "shop-eu")
    assert ours(live, KYVERNO_FORMATS) == kyverno_expected()
    snapshot = report(capsys, "--target", "snapshot:shop-eu")
    everything = {"gatekeeper", *KYVERNO_FORMATS}
    assert ours(live, everything) == ours(snapshot, everything)


def test_namespace_exclusions_default_to_kyvernos_and_are_the_callers_to_change(
    capsys: pytest.CaptureFixture[str], fleet: Fleet
) -> None:
    import_set(capsys, POLICY_FIXTURE / "policies.yaml")
    run_set(fleet, SnapshotTarget(path="snaps/shop-eu"))

    def about(documents: list[dict[str, Any]]) -> set[tuple[str, str]]:
        return {
            (r["resources"][0].get("namespace", "-"), r["resources"][0]["name"])
            for _, r in results(documents)
        }

    default = about(report(capsys, "--target", "snapshot:shop-eu"))
    assert not {ns for ns, _ in default} & {"kube-system"}
    assert ("-", "kube-system") not in default  # the Namespace object of that name too
    everything = about(report(capsys, "--target", "snapshot:shop-eu", "--exclude-namespaces", ""))
    assert everything - default == {
        ("kube-system", "coredns"),
        ("kube-system", "kube-proxy-x1"),
        ("-", "kube-system"),
    }
    no_shop = about(
        report(capsys, "--target", "snapshot:shop-eu", "--exclude-namespaces", "sh*,kube-*")
    )
    assert {ns for ns, _ in no_shop} == {"dev", "-"} and ("-", "shop") not in no_shop


def test_reports_follow_what_is_stored(capsys: pytest.CaptureFixture[str], fleet: Fleet) -> None:
    import_set(capsys, POLICY_FIXTURE / "policies.yaml")
    run_set(fleet, SnapshotTarget(path="snaps/shop-eu"))
    record(
        fleet.store,
        "every Deployment has a tier label",
        "false",
        context="shop-eu",
        check_id="tiers",
        declared_by="check/tiers",
        labels={"assay.dev/category": "labels", "assay.dev/severity": "high"},
    )

    def policies() -> set[str]:
        code, out, err = run(capsys, "report")
        assert code in (0, 66), err
        return {r["policy"] for d in yaml.safe_load_all(out) if d for r in d["results"]}

    assert policies() == {
        "require-labels",
        "run-as-non-root",
        "trusted-registries",
        "shop-tier-labelled",
        "tiers",
    }
    tiers = next(
        r
        for d in yaml.safe_load_all(run(capsys, "report", "--target", "shop-eu")[1])
        for r in d["results"]
    )
    assert (tiers["category"], tiers["severity"]) == ("labels", "high")  # the Check's labels

    # the Check pruned (what `assay apply --prune` does to it): gone from the next report
    from workers.fleet.check_definitions import CheckDefinitionStore

    checks = CheckDefinitionStore(fleet.store.client, fleet.store.prefix)
    definition = checks.get("tiers")
    assert definition is not None
    checks.delete(definition)
    assert "tiers" not in policies()

    # a policy dropped
    code, _, err = run(capsys, "probe", "drop", "policy:trusted-registries")
    assert code == 0, err
    assert "trusted-registries" not in policies()

    # the set imported again without the ValidatingPolicy: its last results go, though the
    # policy is still stored and its check keeps its verdict
    kept = [
        d
        for d in yaml.safe_load_all((POLICY_FIXTURE / "policies.yaml").read_text())
        if d["kind"] != "ValidatingPolicy"
    ]
    (fleet.root / "kept.yaml").write_text(yaml.safe_dump_all(kept))
    import_set(capsys, fleet.root / "kept.yaml")
    assert policies() == {"require-labels", "trusted-registries", "shop-tier-labelled"}
    code, out, _ = run(capsys, "probe", "policies")
    assert "run-as-non-root" in out

    # the set dropped: nothing it ran is reported
    code, _, err = run(capsys, "probe", "drop", f"policy-set:{POLICY_SET}")
    assert code == 0, err
    assert policies() == set()


def test_a_large_report_is_split_under_the_api_servers_size_limit(
    capsys: pytest.CaptureFixture[str], fleet: Fleet
) -> None:
    from notifier.policy_reports import documents, gather

    # 1,100 Pods in one namespace, each failing with a long message: over a megabyte of
    # JSON in one namespace's results
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"pod-{n:04d}", "namespace": "batch", "uid": f"uid-{n:04d}"},
            "spec": {"containers": [{"name": "c", "image": "example/app:1"}]},
        }
        for n in range(1100)
    ]
    folder = fleet.root / "snaps" / "big"
    folder.mkdir(parents=True)
    (folder / "pods.yaml").write_text(yaml.dump_all(pods, Dumper=yaml.CSafeDumper))
    advice = "pin every image by its digest; " * 30  # as pinned-images.yaml says
    import_set(capsys, POLICY_FIXTURE / "pinned-images.yaml", name="big")
    run_set(fleet, SnapshotTarget(path="snaps/big"), name="big")
    reports = documents(gather(fleet.store, "snapshot:big"), "snapshot:big")  # what both print
    name = report_name("snapshot:big")
    assert [d["metadata"]["name"] for d in reports] == [name, f"{name}-1"]
    assert {d["metadata"]["namespace"] for d in reports} == {"batch"}
    names = [r["resources"][0]["name"] for d in reports for r in d["results"]]
    assert sorted(names) == [f"pod-{n:04d}" for n in range(1100)]  # each once, none dropped
    assert [d["summary"]["fail"] for d in reports] == [len(d["results"]) for d in reports]
    for document in reports:
        validate_report(document)
        assert all(
            r["message"] == f"{r['resources'][0]['name']}: {advice}" for r in document["results"]
        )
        # the bytes split it (under 1,000 results), well under etcd's 1.5 MiB per object
        assert len(document["results"]) < MAX_RESULTS
        assert len(json.dumps(document)) < 1_048_576
