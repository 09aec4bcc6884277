"""`assay report --format policyreport|junit` and `--format junit` of check and batch.

Reports are built from verdicts recorded through the store's own path (a real
redis-server), printed by the real CLI, and every document is validated against the
schema the tests hold for its API (tests/fixtures/report-schemas), every JUnit
document against tests/fixtures/junit.xsd.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from notifier.policy_reports import report_name
from schemas.settings import load_settings
from schemas.verdict import VerdictKind
from tests.cli_support import run_cli as run
from tests.report_support import (
    AT,
    probe_outcome,
    record,
    validate_junit,
    validate_report,
)
from workers.fleet.store import VerdictStore

REPLICAS = "every Deployment in namespace prod has at least 2 ready replicas"
NODES = "every Node is Ready"
ROOT_PODS = "no pod runs as root"
VAGUE = "the cluster is fine"
QUESTION = "which pods restart most?"


@pytest.fixture
def store(redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> VerdictStore:
    monkeypatch.setenv("ASSAY_REDIS_URL", redis_url)
    monkeypatch.setenv("ASSAY_DATA_DIR", str(tmp_path / "data"))
    return VerdictStore.from_settings(load_settings(redis_url=redis_url))


def fleet_of_verdicts(store: VerdictStore) -> None:
    """Two targets: a probe over objects in two namespaces, a cluster-scoped probe, a model
    verdict, a cannot_determine, a poorly_posed, and a query (which reports leave out)."""
    deployments = [
        ("Deployment", "api", "prod"),
        ("Deployment", "web", "prod"),
        ("Deployment", "worker", "shop"),
    ]
    record(
        store,
        REPLICAS,
        "false",
        check_id="replicas.prod-eu",
        declared_by="schedule/replicas",
        outcome=probe_outcome(deployments, [("Deployment", "web", "prod")]),
        explanation="Deployment prod/web has 1 of 2 replicas ready.",
    )
    record(
        store,
        NODES,
        "true",
        check_id="nodes",
        declared_by="check/nodes",
        outcome=probe_outcome([("Node", "n1", None), ("Node", "n2", None)], []),
    )
    record(store, ROOT_PODS, "true", explanation="no container runs as uid 0")
    record(store, "the cert is Ready", "cannot_determine", reason="deadline: 300 s passed")
    record(store, VAGUE, "poorly_posed", explanation="'fine' is not cluster state")
    record(store, QUESTION, "true", kind="query")
    record(store, REPLICAS, "true", context="staging-us", check_id="replicas.staging-us")


def by_kind(documents: list[dict[str, Any]]) -> dict[tuple[str, str | None], dict[str, Any]]:
    return {(d["kind"], d["metadata"].get("namespace")): d for d in documents}


def test_policy_reports_per_target_and_namespace_validate_and_say_what_happened(
    capsys: pytest.CaptureFixture[str], store: VerdictStore
) -> None:
    fleet_of_verdicts(store)
    code, out, err = run(capsys, "report", "--target", "prod-eu")
    assert code == 0, err
    documents = list(yaml.safe_load_all(out))
    for document in documents:
        validate_report(document)
    reports = by_kind(documents)
    # shop's only Deployment comes after the first failure: not judged, so no shop report
    assert set(reports) == {("ClusterPolicyReport", None), ("PolicyReport", "prod")}
    assert all(d["apiVersion"] == "wgpolicyk8s.io/v1alpha2" for d in documents)
    assert all(d["metadata"]["annotations"]["assay.dev/target"] == "prod-eu" for d in documents)

    # one result per object the probe judged: api passed, web failed, worker (after the
    # first failure) was not judged and is left out
    prod = reports[("PolicyReport", "prod")]
    judged = {r["resources"][0]["name"]: r["result"] for r in prod["results"]}
    assert judged == {"api": "pass", "web": "fail"}
    web = next(r for r in prod["results"] if r["resources"][0]["name"] == "web")
    assert web["policy"] == "replicas" and web["rule"] == "replicas.prod-eu"
    assert web["message"] == "Deployment prod/web has 1 of 2 replicas ready."
    assert web["resources"] == [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "name": "web",
            "namespace": "prod",
            "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, "Deployment/prod/web")),
        }
    ]
    assert web["timestamp"] == {"seconds": int(AT.timestamp()), "nanos": 250_000_000}
    assert web["properties"]["predicate"] == REPLICAS
    assert web["properties"]["source"] == "probe"
    assert web["properties"]["evidence.0"] == "step 0 get kind=Deployment namespace=prod: api   1/2"
    assert prod["summary"] == {"pass": 1, "fail": 1, "warn": 0, "error": 0, "skip": 0}

    cluster = reports[("ClusterPolicyReport", None)]
    results = {
        (r["policy"], r.get("resources", [{}])[0].get("name")): r for r in cluster["results"]
    }
    assert results[("nodes", "n1")]["result"] == "pass"
    assert results[("nodes", "n2")]["result"] == "pass"
    model_only = {
        r["properties"]["predicate"]: r for r in cluster["results"] if "resources" not in r
    }
    assert model_only[ROOT_PODS]["result"] == "pass"
    assert model_only["the cert is Ready"]["result"] == "error"
    assert model_only["the cert is Ready"]["properties"]["reason"] == "deadline: 300 s passed"
    assert model_only[VAGUE]["result"] == "skip"
    assert QUESTION not in model_only  # a query has no pass or fail
    assert model_only[ROOT_PODS]["policy"].startswith("chk-")  # undeclared: its check id


def test_every_target_and_the_openreports_api(
    capsys: pytest.CaptureFixture[str], store: VerdictStore
) -> None:
    fleet_of_verdicts(store)
    code, out, _ = run(capsys, "report", "--format", "policyreport", "--openreports")
    assert code == 0
    documents = list(yaml.safe_load_all(out))
    for document in documents:
        validate_report(document, "openreports")
        assert document["source"] == "assay"
    targets = {d["metadata"]["annotations"]["assay.dev/target"] for d in documents}
    assert targets == {"prod-eu", "staging-us"}
    kinds = {d["kind"] for d in documents}
    assert kinds == {"Report", "ClusterReport"}
    # one name per (target, namespace): two targets' cluster reports never share one
    identities = [
        (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in documents
    ]
    assert len(identities) == len(set(identities)) == len(documents)
    for document in documents:
        target = document["metadata"]["annotations"]["assay.dev/target"]
        assert document["metadata"]["name"] == report_name(target)
    assert report_name("prod-eu") != report_name("staging-us")
    assert report_name("snapshot:prod-eu") != report_name("snapshot-prod-eu")  # same slug


def test_the_report_schema_catches_what_a_cluster_would_refuse(store: VerdictStore) -> None:
    import jsonschema

    from notifier.policy_reports import documents, gather

    fleet_of_verdicts(store)
    (cluster, *_rest) = documents(gather(store, "prod-eu"), "prod-eu")
    validate_report(cluster)
    for broken in (
        {**cluster, "results": [{**cluster["results"][0], "result": "true"}]},
        {**cluster, "results": [{**cluster["results"][0], "timestamp": "2026-01-01"}]},
        {**cluster, "results": [{**cluster["results"][0], "properties": {"n": 1}}]},
        {**cluster, "results": [{k: v for k, v in cluster["results"][0].items() if k != "policy"}]},
        {**cluster, "metadata": {**cluster["metadata"], "namespace": "prod"}},
        {**cluster, "summary": {**cluster["summary"], "passed": 1}},
    ):
        with pytest.raises(jsonschema.ValidationError):
            validate_report(broken)


def test_more_results_than_kyvernos_chunk_size_make_more_reports(store: VerdictStore) -> None:
    from notifier.policy_reports import MAX_RESULTS, documents, gather

    deployments = [("Deployment", f"app-{n:04d}", "prod") for n in range(MAX_RESULTS + 1)]
    record(store, REPLICAS, "true", check_id="many", outcome=probe_outcome(deployments, []))
    reports = documents(gather(store, "prod-eu"), "prod-eu")
    name = report_name("prod-eu")
    assert [(d["metadata"]["name"], len(d["results"])) for d in reports] == [
        (name, MAX_RESULTS),
        (f"{name}-1", 1),
    ]
    for document in reports:
        validate_report(document)
        assert document["summary"]["pass"] == len(document["results"])


def test_a_check_someone_wrote_keeps_its_results_in_namespaces_policies_skip(
    capsys: pytest.CaptureFixture[str], store: VerdictStore
) -> None:
    pods = [("Pod", "coredns-1", "kube-system"), ("Pod", "kube-proxy-1", "kube-system")]
    record(
        store,
        "every Pod in kube-system is healthy",
        "false",
        outcome=probe_outcome(pods, [pods[1]]),
        explanation="Pod kube-system/kube-proxy-1 is not healthy.",
    )
    code, out, err = run(capsys, "report", "--target", "prod-eu")  # the default exclusions
    assert code == 0, err
    (kube,) = [d for d in yaml.safe_load_all(out) if d["metadata"].get("namespace")]
    assert kube["metadata"]["namespace"] == "kube-system"
    found = {(r["resources"][0]["name"], r["result"]) for r in kube["results"]}
    assert found == {("coredns-1", "pass"), ("kube-proxy-1", "fail")}


def test_report_for_an_unknown_target_and_bad_flags(
    capsys: pytest.CaptureFixture[str], store: VerdictStore
) -> None:
    fleet_of_verdicts(store)
    code, _, err = run(capsys, "report", "--target", "nowhere")
    assert code == 66 and "no check has a verdict on target 'nowhere'" in err
    code, _, err = run(capsys, "report", "--format", "sarif")
    assert code == 64 and "policyreport or junit" in err
    code, _, err = run(capsys, "report", "--format", "junit", "--openreports")
    assert code == 64
    code, _, err = run(capsys, "report", "--format", "junit", "--exclude-namespaces", "prod")
    assert code == 64 and "--exclude-namespaces goes with --format policyreport" in err


def test_no_verdict_at_all_is_no_report_and_never_exit_0(
    capsys: pytest.CaptureFixture[str], store: VerdictStore
) -> None:
    for output in ("policyreport", "junit"):
        code, out, err = run(capsys, "report", "--format", output)
        assert code == 66 and out == "" and "no check has a verdict" in err


# --- JUnit --------------------------------------------------------------------------------------


def totals(text: str) -> dict[str, str]:
    """The JUnit totals CI reads, from the ``<testsuites>`` root; the one ``<testsuite>``
    must say the same."""
    import xml.etree.ElementTree as ET

    root = ET.fromstring(text)
    (suite,) = root.findall("testsuite")
    keys = ("tests", "failures", "errors", "skipped")
    found = {key: root.get(key, "") for key in keys}
    assert {key: suite.get(key, "") for key in keys} == found
    assert len(suite.findall("testcase")) == int(found["tests"])
    for kind, key in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
        assert len(suite.findall(f"testcase/{kind}")) == int(found[key]), kind
    return found


def test_report_as_junit_one_case_per_check_and_target(
    capsys: pytest.CaptureFixture[str], store: VerdictStore
) -> None:
    import xml.etree.ElementTree as ET

    fleet_of_verdicts(store)
    code, out, err = run(capsys, "report", "--format", "junit")
    assert code == 1, err  # one check is false: CI must not pass
    validate_junit(out)
    # the query is not a test case; false is a failure; cannot_determine and poorly_posed
    # are errors
    assert totals(out) == {"tests": "6", "failures": "1", "errors": "2", "skipped": "0"}
    root = ET.fromstring(out)
    (suite,) = root.findall("testsuite")
    cases = {
        (c.get("classname"), c.get("name", "").split(": ", 1)[1]): c
        for c in suite.findall("testcase")
    }
    failed = cases[("assay.prod-eu", REPLICAS)]
    failure = failed.find("failure")
    assert failure is not None and failure.get("type") == "false"
    assert failure.get("message") == "Deployment prod/web has 1 of 2 replicas ready."
    out_text = failed.findtext("system-out") or ""
    assert "evidence:" in out_text and "step 0 get kind=Deployment namespace=prod" in out_text
    assert "api   1/2" in out_text
    cert = cases[("assay.prod-eu", "the cert is Ready")].find("error")
    assert cert is not None and cert.get("type") == "cannot_determine"
    assert cert.get("message") == "deadline: 300 s passed"
    vague = cases[("assay.prod-eu", VAGUE)].find("error")
    assert vague is not None and vague.get("type") == "poorly_posed"
    passed = cases[("assay.staging-us", REPLICAS)]
    assert passed.find("failure") is None and passed.find("error") is None
    assert failed.get("name", "").startswith("replicas: ")  # the declared name


def test_report_junit_exits_with_the_verdicts_code(
    capsys: pytest.CaptureFixture[str], store: VerdictStore
) -> None:
    fleet_of_verdicts(store)
    record(store, VAGUE, "poorly_posed", context="qa")
    record(store, "the cert is Ready", "cannot_determine", context="qa", reason="no access")
    record(store, "the cert is Ready", "cannot_determine", context="ops", reason="no access")
    expected = {
        # target: (exit code, totals)
        "staging-us": (0, {"tests": "1", "failures": "0", "errors": "0", "skipped": "0"}),
        "qa": (2, {"tests": "2", "failures": "0", "errors": "2", "skipped": "0"}),
        "ops": (3, {"tests": "1", "failures": "0", "errors": "1", "skipped": "0"}),
        "prod-eu": (1, {"tests": "5", "failures": "1", "errors": "2", "skipped": "0"}),
    }
    for target, (exit_code, counts) in expected.items():
        code, out, err = run(capsys, "report", "--format", "junit", "--target", target)
        assert code == exit_code, (target, err)
        validate_junit(out)
        assert totals(out) == counts, target
    # the PolicyReport documents say pass or fail themselves: printing them exits 0
    code, _, err = run(capsys, "report", "--target", "prod-eu")
    assert code == 0, err


def test_junit_text_is_clean_xml_whatever_the_model_wrote(store: VerdictStore) -> None:
    from assay import junit

    fleet_of_verdicts(store)
    verdict = store.latest_verdict("nodes")
    assert verdict is not None
    hostile = verdict.model_copy(
        update={
            "explanation": "ok\x00\x1b[31m <b>&amp; ]]> \ud800",
            "verdict": VerdictKind.FALSE,
            "exit_code": 1,
        }
    )
    text = junit.render([junit.case_of(hostile, "p\x07")])
    validate_junit(text)
    assert "\x00" not in text and "\x1b" not in text


def test_the_xsd_refuses_what_ci_would_not_read() -> None:
    import xmlschema

    good = (
        '<testsuites><testsuite name="s" tests="1"><testcase name="c">'
        '<failure message="m" type="false">t</failure></testcase></testsuite></testsuites>'
    )
    validate_junit(good)
    for bad in (
        good.replace('tests="1"', 'tests="one"'),
        good.replace('<testcase name="c">', "<testcase>"),
        good.replace("</failure>", "</failure><error/>"),
        good.replace("testsuites>", "suites>"),
    ):
        with pytest.raises(xmlschema.XMLSchemaValidationError):
            validate_junit(bad)


def test_check_prints_junit_and_keeps_its_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    import xml.etree.ElementTree as ET

    for snapshot, exit_code, failures in (("staging-us", 1, "1"), ("prod-eu", 0, "0")):
        code, out, err = run(
            capsys,
            "check",
            "--scripted",
            "examples/scripts/demo.yaml",
            "--snapshot",
            f"examples/snapshots/{snapshot}",
            REPLICAS,
            "--format",
            "junit",
        )
        assert code == exit_code, err
        validate_junit(out)
        assert totals(out) == {"tests": "1", "failures": failures, "errors": "0", "skipped": "0"}
        case = ET.fromstring(out).find("testsuite/testcase")
        assert case is not None and case.get("classname") == f"assay.snapshot:{snapshot}"
        assert (case.find("failure") is not None) == (exit_code == 1)
    code, _, err = run(
        capsys, "check", "--snapshot", "examples/snapshots/prod-eu", REPLICAS, "--format", "xml"
    )
    assert code == 64 and "--format" in err


def test_batch_results_as_junit(capsys: pytest.CaptureFixture[str], store: VerdictStore) -> None:
    import xml.etree.ElementTree as ET

    from tests.fleet_support import finished_report

    code, out, err = run(capsys, "batch", REPLICAS, "--snapshots", "examples/snapshots/*")
    assert code == 0, err
    batch_id = out.strip()
    requests = {}
    for result in store.batch_results(batch_id):
        request = store.run_request(result.run_id)
        assert request is not None
        requests[request.target.name.removeprefix("snapshot:")] = request

    def finish(name: str, verdict: str) -> None:  # as a worker would record it
        store.begin_delivery(requests[name])
        assert store.record_verdict(finished_report(requests[name], verdict))

    finish("prod-eu", "true")
    finish("staging-us", "false")  # dev-ap stays pending
    code, out, err = run(capsys, "batch", "results", batch_id, "--format", "junit")
    assert code == 75, err  # still running: one target has no verdict yet
    validate_junit(out)
    assert totals(out) == {"tests": "3", "failures": "1", "errors": "0", "skipped": "1"}
    suite = ET.fromstring(out).find("testsuite")
    assert suite is not None

    def outcome(case: ET.Element) -> str:
        for kind in ("failure", "error", "skipped"):
            if case.find(kind) is not None:
                return kind
        return "passed"

    assert {c.get("classname"): outcome(c) for c in suite.findall("testcase")} == {
        "assay.snapshot:prod-eu": "passed",
        "assay.snapshot:staging-us": "failure",
        "assay.snapshot:dev-ap": "skipped",
    }
    finish("dev-ap", "cannot_determine")
    for command in ("results", "status"):
        code, out, err = run(capsys, "batch", command, batch_id, "--format", "junit")
        assert code == 1, (command, err)  # done, and one target is false
        assert totals(out) == {"tests": "3", "failures": "1", "errors": "1", "skipped": "0"}
    code, _, err = run(
        capsys, "batch", REPLICAS, "--snapshots", "examples/snapshots/*", "--format", "junit"
    )
    assert code == 64 and "--wait" in err


def test_batch_junit_reads_its_rows_once_the_runs_verdicts_are_no_longer_kept(
    capsys: pytest.CaptureFixture[str], store: VerdictStore
) -> None:
    from tests.fleet_support import finished_report

    code, out, err = run(capsys, "batch", REPLICAS, "--snapshots", "examples/snapshots/*")
    assert code == 0, err
    batch_id = out.strip()
    outcomes = {"prod-eu": "true", "staging-us": "false", "dev-ap": "cannot_determine"}
    run_ids = []
    for result in store.batch_results(batch_id):
        request = store.run_request(result.run_id)
        assert request is not None
        store.begin_delivery(request)
        verdict = outcomes[request.target.name.removeprefix("snapshot:")]
        assert store.record_verdict(finished_report(request, verdict, explanation="row said"))
        run_ids.append(result.run_id)
    # long after: the runs' reports have expired and their entries left the histories
    store.client.delete(store.key("runs"), *(store.key("run", run_id) for run_id in run_ids))
    code, out, err = run(capsys, "batch", "results", batch_id, "--format", "junit")
    assert code == 1, err
    validate_junit(out)
    assert totals(out) == {"tests": "3", "failures": "1", "errors": "1", "skipped": "0"}
    assert 'message="row said" type="false"' in out
