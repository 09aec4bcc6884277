"""Imported policies through the real fleet: a redis-server, a `celery worker` process with no
model at all, an `assay scheduler` process and an `assay notify` process with a webhook sink.

`assay probe import` of a ValidatingAdmissionPolicy, a Kyverno ValidatingPolicy and a
Gatekeeper template, each run over the example snapshots as a batch, gives per-object
verdicts for 0 tokens; the set runs as one task per target, recording each policy's verdict
as its own check; and a schedule of the set alerts (a webhook) when a cluster changes."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from assay.client import Client
from schemas.request import default_check_id
from schemas.settings import load_settings
from schemas.verdict import VerdictKind
from tests.alerting_support import (
    Receiver,
    notifier_env,
    start_notifier,
    wait_for,
    wait_started,
    webhook,
)
from tests.cli_support import run_cli as run
from tests.fleet_support import ROOT, start_worker, stop_process, worker_env, worker_log_tail
from tests.report_support import validate_report
from tests.scheduler_support import start_scheduler
from workers.fleet.redis_client import connect
from workers.fleet.store import VerdictStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

FAST = {
    "scheduler_tick_seconds": "0.05",
    "scheduler_lease_seconds": "2",
    "min_interval_seconds": "1",
    "log_format": "json",
}


@pytest.fixture
def fleet(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[subprocess.Popen[bytes]]]:
    monkeypatch.setenv("ASSAY_REDIS_URL", redis_url)
    monkeypatch.setenv("ASSAY_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("ASSAY_MIN_INTERVAL_SECONDS", "1")
    monkeypatch.chdir(tmp_path)
    shutil.copytree(ROOT / "examples" / "snapshots", tmp_path / "snaps")
    shutil.copytree(ROOT / "examples" / "policies", tmp_path / "policies")
    env = worker_env(redis_url, log_format="json")  # no ASSAY_MODEL: no model in this fleet
    processes = [start_worker(env, tmp_path / "worker.log", concurrency=4)]
    yield processes
    for process in processes:
        stop_process(process)
    if processes[0].returncode not in (0, -15):
        print(worker_log_tail(tmp_path / "worker.log"))


def _policy_check(name: str, snapshot: str) -> str:
    return default_check_id("check", f"policy:{name}", f"snapshot:{snapshot}")


def test_imported_policies_run_as_batches_and_a_scheduled_set_alerts_on_a_change(
    capsys: pytest.CaptureFixture[str],
    redis_url: str,
    fleet: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    files = sorted(str(p) for p in Path("policies").glob("*.yaml"))
    code, out, err = run(capsys, "probe", "import", *files, "--set", "baseline")
    assert code == 0, err

    # each policy over the example snapshots as a batch: per-object verdicts, 0 tokens
    expected = {
        "trusted-registries": {"prod-eu": "true", "staging-us": "true", "dev-ap": "false"},
        "run-as-non-root": {"prod-eu": "true", "staging-us": "true", "dev-ap": "false"},
        "prod-workloads-labelled": {"prod-eu": "true", "staging-us": "false", "dev-ap": "true"},
    }
    with Client(load_settings(redis_url=redis_url)) as client:
        for name, by_target in expected.items():
            code, out, err = run(
                capsys, "batch", f"policy:{name}", "--snapshots", "snaps/*", "--wait", "--json"
            )
            assert code == 1, (name, out, err)  # false on one target
            for snapshot, verdict in by_target.items():
                latest = client.verdict(_policy_check(name, snapshot))
                assert latest is not None and latest.verdict.value == verdict, (name, snapshot)
                assert latest.usage.total_tokens == 0 and latest.model == "(policy)"
                assert latest.source == "probe"
        dev = client.verdict(_policy_check("run-as-non-root", "dev-ap"))
        assert dev is not None
        assert "- Deployment dev/debug-tools: runs as root (runAsUser 0): shell" in dev.explanation
        assert "- Pod dev/debug-tools-d4c8b9f7a-pz8vn: runs as root" in dev.explanation
        staging = client.verdict(_policy_check("prod-workloads-labelled", "staging-us"))
        assert (
            staging is not None
            and "Deployment prod/api: missing labels: tier" in staging.explanation
        )

        # the set as a batch: one run per target, each policy recorded as its own check
        code, out, err = run(
            capsys, "batch", "policy-set:baseline", "--snapshots", "snaps/*", "--wait", "--json"
        )
        assert code == 1, out
        code, out, _ = run(capsys, "batch", "results", "--json")
        results = yaml.safe_load(out)["results"]
        assert {r["target"]: r["verdict"] for r in results} == {
            "snapshot:prod-eu": "true",
            "snapshot:staging-us": "false",
            "snapshot:dev-ap": "false",
        }
        for name in expected:
            history = client.history(_policy_check(name, "dev-ap"), limit=5)
            assert len(history) == 2  # the policy's own batch run, then the set's

        # what the fleet's runs report: one result per object each policy judged, under
        # the policy's own name, in the object's namespace's report
        code, out, err = run(capsys, "report", "--target", "dev-ap")
        assert code == 0, err
        documents = list(yaml.safe_load_all(out))
        for document in documents:
            validate_report(document)
        found = [r for d in documents for r in d["results"]]
        assert {r["policy"] for r in found} <= set(expected) and found
        rooted = {
            (r["resources"][0]["kind"], r["resources"][0]["name"], r["message"])
            for r in found
            if r["policy"] == "run-as-non-root" and r["result"] == "fail"
        }
        assert ("Deployment", "debug-tools", "runs as root (runAsUser 0): shell") in rooted

    # a schedule of the set over prod-eu, a notifier with a webhook sink
    hooks = Receiver().start()
    try:
        store = VerdictStore.from_settings(
            load_settings(redis_url=redis_url), client=connect(redis_url)
        )
        env = notifier_env(redis_url, {"ops": webhook(f"{hooks.url}/ops")})
        fleet.append(start_notifier(env, tmp_path / "notifier.log"))
        wait_started(store, ["ops"], fleet[-1], tmp_path / "notifier.log")
        fleet.append(start_scheduler(worker_env(redis_url, **FAST), tmp_path / "scheduler.log"))
        code, _, err = run(
            capsys,
            "schedule",
            "add",
            "baseline-prod",
            "policy-set:baseline",
            "--every",
            "1s",
            "--snapshots",
            "snaps/prod-eu",
        )
        assert code == 0, err
        check = _policy_check("run-as-non-root", "prod-eu")
        with Client(load_settings(redis_url=redis_url)) as client:
            wait_for(lambda: len(client.history(check, limit=50)) >= 3, 60, "scheduled runs")
            # the cluster changes: a pod that runs as root appears in prod
            root_pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "rooted", "namespace": "prod"},
                "spec": {
                    "containers": [
                        {
                            "name": "sh",
                            "image": "registry.example.com/sh:1",
                            "securityContext": {"runAsUser": 0},
                        }
                    ]
                },
            }
            (tmp_path / "snaps" / "prod-eu" / "prod" / "rooted.yaml").write_text(
                yaml.safe_dump(root_pod)
            )
            wait_for(
                lambda: any(r.json()["data"]["check_id"] == check for r in hooks.on("/ops")),
                60,
                "the webhook to hear of the change",
            )
        changes = [
            r.json()["data"] for r in hooks.on("/ops") if r.json()["data"]["check_id"] == check
        ]
        change = changes[0]
        assert (change["from_verdict"], change["to_verdict"]) == ("true", "false")
        assert change["text"] == "policy:run-as-non-root" and change["source"] == "probe"
        assert "Pod prod/rooted: runs as root (runAsUser 0): sh" in change["explanation"]
        code, _, _ = run(capsys, "schedule", "pause", "baseline-prod")
        assert code == 0
    finally:
        hooks.stop()
    assert VerdictKind.FALSE.value == "false"
