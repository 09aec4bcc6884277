"""The policyreport sink writes reports into each target cluster with credentials of its own.

The cluster is the project's test API server with report writes turned on: it takes
server-side apply and DELETE of the report kinds only, and only with the writer's
token, which may read nothing; the readers' token still cannot write. The notifier
runs in-process on a real redis-server; verdicts are recorded through the store.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from assay.testing.fake_apiserver import FakeApiServer
from assay.testing.fake_cluster import FakeCluster
from tests.alerting_support import notifier_running, settings_for
from tests.live_support import write_cluster
from tests.report_support import later, probe_outcome, record, validate_report
from workers.engine.logs import configure_logging
from workers.fleet.store import VerdictStore

REPLICAS = "every Deployment has at least 2 ready replicas"
WG = "/apis/wgpolicyk8s.io/v1alpha2"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[FakeApiServer]:
    east = write_cluster(tmp_path, "east", ready=3)
    west = write_cluster(tmp_path, "west", ready=0)
    clusters = [FakeCluster.from_snapshot(east), FakeCluster.from_snapshot(west)]
    with FakeApiServer(clusters, report_writes=True) as running:
        yield running


def call(
    server: FakeApiServer,
    path: str,
    *,
    method: str,
    token: str,
    body: Any = None,
    apply: bool = True,
) -> int:
    request = urllib.request.Request(server.cluster_url("east") + path, method=method)
    request.add_header("Authorization", f"Bearer {token}")
    if body is not None:
        request.data = json.dumps(body).encode()
        kind = "application/apply-patch+yaml" if apply else "application/merge-patch+json"
        request.add_header("Content-Type", kind)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


READER, WRITER = "assay-test-token-east", "assay-test-report-writer-east"
REPORT = {
    "apiVersion": "wgpolicyk8s.io/v1alpha2",
    "kind": "PolicyReport",
    "metadata": {"name": "assay-checks", "namespace": "prod"},
}
REPORT_PATH = f"{WG}/namespaces/prod/policyreports/assay-checks?fieldManager=assay"


def test_the_test_server_takes_report_writes_from_the_writer_only(server: FakeApiServer) -> None:
    assert call(server, REPORT_PATH, method="PATCH", token=READER, body=REPORT) == 403
    assert call(server, "/api/v1/namespaces/prod/pods", method="GET", token=WRITER) == 403
    assert call(server, f"{WG}/clusterpolicyreports/x", method="GET", token=WRITER) == 403
    deployment = "/apis/apps/v1/namespaces/prod/deployments/web?fieldManager=assay"
    assert call(server, deployment, method="PATCH", token=WRITER, body=REPORT) == 405
    assert call(server, REPORT_PATH, method="PUT", token=WRITER, body=REPORT) == 405
    assert call(server, REPORT_PATH, method="PATCH", token=WRITER, body=REPORT, apply=False) == 415
    assert server.reports == {}
    assert call(server, REPORT_PATH, method="PATCH", token=WRITER, body=REPORT) == 200
    assert server.reports[("east", "wgpolicyk8s.io", "policyreports", "prod", "assay-checks")]
    assert call(server, REPORT_PATH, method="DELETE", token=WRITER) == 200
    assert call(server, REPORT_PATH, method="DELETE", token=WRITER) == 404
    assert server.reports == {}


def test_without_report_writes_every_write_is_still_refused(tmp_path: Path) -> None:
    cluster = FakeCluster.from_snapshot(write_cluster(tmp_path, "east", ready=3))
    with FakeApiServer([cluster]) as plain:
        assert call(plain, REPORT_PATH, method="PATCH", token=WRITER, body=REPORT) == 405
        assert call(plain, REPORT_PATH, method="PATCH", token=READER, body=REPORT) == 405
        assert plain.reports == {}


def reports_of(server: FakeApiServer, cluster: str) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (plural, namespace): body
        for (name, _group, plural, namespace, _n), body in dict(server.reports).items()
        if name == cluster
    }


def wait_for(condition: Any, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_the_sink_keeps_each_clusters_reports_up_to_date(
    server: FakeApiServer, redis_url: str, tmp_path: Path
) -> None:
    readers = server.write_kubeconfig(tmp_path / "readers.yaml")
    writer = server.write_kubeconfig(tmp_path / "writer.yaml", writer=True)
    settings = settings_for(
        redis_url,
        {"reports": {"type": "policyreport", "kubeconfig": str(writer), "resync_seconds": 3600}},
        kubeconfig=str(readers),  # the evaluations' credentials: the sink must not use them
    )
    configure_logging(settings)  # to this test's stderr, not a closed one of an earlier test
    store = VerdictStore.from_settings(settings)
    deployments = [("Deployment", "api", "prod"), ("Deployment", "worker", "shop")]
    record(
        store,
        REPLICAS,
        "false",
        context="east",
        check_id="replicas.east",
        outcome=probe_outcome(deployments, [("Deployment", "worker", "shop")]),
    )
    record(store, "every Node is Ready", "true", context="west", check_id="nodes.west")
    record(store, "no pod runs as root", "true", context="snapshot:offline")  # no cluster
    server.clear_requests()

    with notifier_running(settings):
        # first verdicts are not changes: the start-up resync writes them
        wait_for(lambda: len(server.reports) == 3, "the first reports")
        east = reports_of(server, "east")
        assert set(east) == {("policyreports", "prod"), ("policyreports", "shop")}
        shop = east[("policyreports", "shop")]
        assert [r["result"] for r in shop["results"]] == ["fail"]
        assert set(reports_of(server, "west")) == {("clusterpolicyreports", "")}
        for body in server.reports.values():
            validate_report(body)

        # the check turns true and its objects are all in prod now: prod is rewritten,
        # shop's report (no results left) is deleted
        record(
            store,
            REPLICAS,
            "true",
            context="east",
            check_id="replicas.east",
            outcome=probe_outcome(
                [("Deployment", "api", "prod"), ("Deployment", "web", "prod")], []
            ),
            at=later(5),
        )
        wait_for(
            lambda: ("policyreports", "shop") not in reports_of(server, "east"),
            "shop's report to go",
        )
        prod = reports_of(server, "east")[("policyreports", "prod")]
        assert sorted(r["result"] for r in prod["results"]) == ["pass", "pass"]
        assert prod["summary"]["pass"] == 2 and prod["summary"]["fail"] == 0
        validate_report(prod)

    # every request the sink made carried the writer's token and was a write; the
    # readers' token was never used, and the writer never read
    made = list(server.requests)
    assert made, "the sink wrote nothing"
    assert all(r.writer and not r.authorized for r in made), [r.url for r in made if not r.writer]
    assert {r.method for r in made} == {"PATCH", "DELETE"}
    assert all(r.path.split("/apis/")[1].split("/")[0] == "wgpolicyk8s.io" for r in made)


def test_a_sink_given_the_readers_credentials_cannot_write(
    server: FakeApiServer, redis_url: str, tmp_path: Path
) -> None:
    from notifier.policy_report_writer import ReportWriter
    from notifier.sinks import DeliveryError
    from schemas.notify import PolicyReportSink

    readers = server.write_kubeconfig(tmp_path / "readers.yaml")
    writer = ReportWriter(PolicyReportSink(type="policyreport", kubeconfig=str(readers)))
    document = {**REPORT, "summary": {"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 0}}
    with pytest.raises(DeliveryError) as refused:
        writer.apply("east", document)
    assert refused.value.status == 403 and not refused.value.retryable
    assert server.reports == {}
    with pytest.raises(DeliveryError, match="writes PolicyReport and ClusterPolicyReport only"):
        writer.apply("east", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})


def test_which_cluster_each_target_is_written_to() -> None:
    from notifier.policy_report_writer import ReportWriter
    from schemas.notify import PolicyReportSink

    in_cluster = ReportWriter(PolicyReportSink(type="policyreport"))
    assert in_cluster.context_for("in-cluster") == "in-cluster"
    assert in_cluster.context_for("prod-eu") is None  # no kubeconfig: nothing else
    remote = ReportWriter(
        PolicyReportSink(
            type="policyreport", kubeconfig="/k", contexts={"snapshot:prod-eu": "prod-eu-w"}
        )
    )
    assert remote.context_for("prod-eu") == "prod-eu"
    assert remote.context_for("snapshot:staging-us") is None  # a folder, no cluster
    assert remote.context_for("snapshot:prod-eu") == "prod-eu-w"


# --- imported policies, object by object, next to another engine's reports ---------------------


KYVERNO = {
    # a report Kyverno's background scan wrote for one object (named by its uid)
    "apiVersion": "wgpolicyk8s.io/v1alpha2",
    "kind": "PolicyReport",
    "metadata": {
        "name": "5e7a1c2d-3b4f-4a6e-8c9d-000000000012",
        "namespace": "shop",
        "labels": {"app.kubernetes.io/managed-by": "kyverno"},
    },
    "scope": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "cart", "namespace": "shop"},
    "results": [{"policy": "require-labels", "rule": "deployment-tier", "result": "fail"}],
}


def as_kyverno(
    server: FakeApiServer, method: str, namespace: str, name: str, body: Any = None
) -> int:
    """A write to cluster shop-eu as Kyverno makes it (server-side apply with its own field
    manager), or a DELETE."""
    path = f"{WG}/namespaces/{namespace}/policyreports/{name}?fieldManager=kyverno"
    request = urllib.request.Request(server.cluster_url("shop-eu") + path, method=method)
    request.add_header("Authorization", "Bearer assay-test-report-writer-shop-eu")
    if body is not None:
        request.add_header("Content-Type", "application/apply-patch+yaml")
        request.data = json.dumps(body).encode()
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def owned_by(server: FakeApiServer, manager: str) -> dict[tuple[str, ...], dict[str, Any]]:
    return {k: v for k, v in server.reports.items() if server.report_managers[k] == manager}


def as_printed(body: dict[str, Any]) -> dict[str, Any]:
    """A report as written, without the uid the server gave it: as `assay report` prints it."""
    return {**body, "metadata": {k: v for k, v in body["metadata"].items() if k != "uid"}}


def test_the_sink_writes_what_assay_report_prints_and_never_another_engines_reports(
    capsys: pytest.CaptureFixture[str],
    redis_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import yaml

    from notifier.policy_report_sink import ReportSync
    from notifier.policy_report_writer import ReportWriter
    from notifier.policy_reports import report_name
    from schemas.notify import PolicyReportSink
    from schemas.request import ContextTarget
    from tests.cli_support import run_cli
    from tests.report_support import POLICY_FIXTURE, import_set, policy_fleet, run_set
    from workers.fleet.notify_feed import SinkFeed

    fleet = policy_fleet(redis_url, monkeypatch, tmp_path)
    configure_logging(fleet.settings)  # to stderr, not the stdout the CLI's output is read from
    cluster = FakeCluster.from_snapshot(tmp_path / "snaps" / "shop-eu", name="shop-eu")
    with FakeApiServer([cluster], report_writes=True) as server:
        readers = str(server.write_kubeconfig(tmp_path / "readers.yaml"))
        writer = str(server.write_kubeconfig(tmp_path / "writer.yaml", writer=True))
        config = PolicyReportSink(type="policyreport", kubeconfig=writer)
        feed = SinkFeed(fleet.store, "reports", "test")
        sync = ReportSync("reports", config, fleet.store, ReportWriter(config), feed)
        import_set(capsys, POLICY_FIXTURE / "policies.yaml")
        fleet.settings = fleet.settings.model_copy(update={"kubeconfig": readers})
        run_set(fleet, ContextTarget(context="shop-eu", kubeconfig=readers))
        # Kyverno is installed too: its report of the cart Deployment, and one it wrote
        # under the very name assay's report in namespace dev has
        ours = report_name("shop-eu")
        assert as_kyverno(server, "PATCH", "shop", KYVERNO["metadata"]["name"], KYVERNO) == 200
        squatter = {
            **KYVERNO,
            "metadata": {**KYVERNO["metadata"], "name": ours, "namespace": "dev"},
        }
        assert as_kyverno(server, "PATCH", "dev", ours, squatter) == 200
        kyvernos = owned_by(server, "kyverno")

        assert sync.resync() == 2  # the cluster report and shop's; dev's name is Kyverno's
        code, out, err = run_cli(capsys, "report", "--target", "shop-eu")
        assert code == 0, err
        printed = list(yaml.safe_load_all(out))
        assert [d["metadata"].get("namespace") for d in printed] == [None, "dev", "shop"]
        mine = [as_printed(body) for _, body in sorted(owned_by(server, "assay").items())]
        assert mine == [printed[0], printed[2]]  # the same documents, from one builder
        assert owned_by(server, "kyverno") == kyvernos  # never written into
        assert all(r.method == "PATCH" for r in server.requests if r.writer)

        # a policy dropped: its results leave the reports at the next write
        code, _, err = run_cli(capsys, "probe", "drop", "policy:trusted-registries")
        assert code == 0, err
        sync.resync()
        policies = {r["policy"] for b in owned_by(server, "assay").values() for r in b["results"]}
        assert policies == {"require-labels", "run-as-non-root", "shop-tier-labelled"}

        # someone deletes assay's shop report and Kyverno makes one under its name; then the
        # set is dropped: nothing is left to report, so assay deletes what it wrote and still
        # owns (the cluster report), and leaves the report that took its name alone
        assert as_kyverno(server, "DELETE", "shop", ours) == 200
        assert (
            as_kyverno(
                server,
                "PATCH",
                "shop",
                ours,
                {**squatter, "metadata": {**squatter["metadata"], "namespace": "shop"}},
            )
            == 200
        )
        kyvernos = owned_by(server, "kyverno")
        code, _, err = run_cli(capsys, "probe", "drop", "policy-set:reports")
        assert code == 0, err
        assert sync.resync() == 0
        assert owned_by(server, "assay") == {}
        assert owned_by(server, "kyverno") == kyvernos and len(kyvernos) == 3
        assert feed.written_reports() == {}


def test_reports_an_earlier_version_wrote_are_replaced_and_deleted(
    server: FakeApiServer, redis_url: str, tmp_path: Path
) -> None:
    """Before reports were named by target, every report was `assay-checks` and the sink
    remembered namespaces only: the first write under the new names deletes those."""
    from notifier.policy_report_sink import ReportSync
    from notifier.policy_report_writer import ReportWriter
    from notifier.policy_reports import report_name
    from schemas.notify import PolicyReportSink
    from workers.fleet.notify_feed import SinkFeed

    writer = server.write_kubeconfig(tmp_path / "writer.yaml", writer=True)
    settings = settings_for(redis_url, {})
    configure_logging(settings)
    store = VerdictStore.from_settings(settings)
    deployments = [("Deployment", "api", "prod"), ("Deployment", "worker", "shop")]
    record(store, REPLICAS, "true", context="east", outcome=probe_outcome(deployments, []))
    old = {**REPORT, "metadata": {"name": "assay-checks", "namespace": "shop"}}
    path = f"{WG}/namespaces/shop/policyreports/assay-checks?fieldManager=assay"
    assert call(server, path, method="PATCH", token=WRITER, body=old) == 200
    feed = SinkFeed(store, "reports", "test")
    store.client.hset(store.key("notify", "reports", "reports"), "east", json.dumps(["shop"]))
    config = PolicyReportSink(type="policyreport", kubeconfig=str(writer))
    assert ReportSync("reports", config, store, ReportWriter(config), feed).resync() == 2
    assert sorted((k[2], k[3], k[4]) for k in server.reports) == [
        ("policyreports", "prod", report_name("east")),
        ("policyreports", "shop", report_name("east")),
    ]
    remembered = feed.written_reports()["east"]
    assert {(r.namespace, r.name) for r in remembered} == {
        ("prod", report_name("east")),
        ("shop", report_name("east")),
    }
    assert all(r.uid for r in remembered)
