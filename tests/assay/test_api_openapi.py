"""The committed OpenAPI document: no drift from the code, and the running API honours it.

The schemathesis run is bounded (a fixed seed, 25 cases per operation, one worker;
about 40 s) and runs every check it has on every operation: no 500, no undocumented
status, content type, header or body; every request the document calls valid is
accepted and every other one refused; a 405's Allow lists the path's methods; auth is
not ignored; a deleted schedule is gone. tests/assay/test_api_contract.py names the rules
one by one, in process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from assay import api as api_module
from assay.api import OPENAPI_PATH, render_openapi
from assay.redis_process import RedisProcess
from tests.api_fuzz_hooks import KUBECONFIG
from tests.api_support import ROOT, WRITE_TOKEN, ApiServer

# Which answers each check expects. A body over the size limit is refused with 413 (documented
# on every write) before anything reads it, so 413 is a rejection too. A valid request may be
# answered 404 or 409 (schemathesis's defaults) for what only the server's state can judge:
# a snapshot outside its roots, a context glob matching none of its contexts, a model no
# provider routes or no worker holds a key for, and for apply's documents a name another
# document or source holds, a policy not stored (docs/api.md, "Errors"). Nothing else: every
# rule the server checks on a request is in the document.
SCHEMATHESIS_CONFIG = """
[checks.negative_data_rejection]
expected-statuses = [400, 401, 403, 404, 405, 406, 409, 413, 415, 422, 428, 429, "5xx"]
"""
SEEDED_CHECK = "fuzz-seeded-check"


def test_committed_openapi_matches_the_code() -> None:
    assert OPENAPI_PATH.read_text() == render_openapi(), (
        "assay/openapi.json is stale: run `python -m assay.api --write-openapi`"
    )


def test_the_drift_check_fails_on_a_stale_file_and_write_repairs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = tmp_path / "openapi.json"
    stale.write_text(OPENAPI_PATH.read_text().replace('"title": "assay"', '"title": "old"'))
    monkeypatch.setattr(api_module, "OPENAPI_PATH", stale)
    assert api_module.main(["--check-openapi"]) == 1
    assert "--write-openapi" in capsys.readouterr().err
    assert api_module.main(["--write-openapi"]) == 0
    assert api_module.main(["--check-openapi"]) == 0
    assert stale.read_text() == OPENAPI_PATH.read_text()


def test_the_committed_check_command_passes() -> None:
    ok = subprocess.run(
        [sys.executable, "-m", "assay.api", "--check-openapi"], cwd=ROOT, capture_output=True
    )
    assert ok.returncode == 0, ok.stderr


def test_every_v1_operation_documents_its_errors_with_the_error_body() -> None:
    document = json.loads(OPENAPI_PATH.read_text())
    for path, operations in document["paths"].items():
        if not path.startswith("/v1/"):
            continue
        for method, operation in operations.items():
            responses = operation["responses"]
            assert "401" in responses, f"{method} {path} does not document 401"
            assert "422" in responses, f"{method} {path} does not document 422"
            schema = responses["401"]["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/ErrorBody"}
            assert operation["security"] == [{"bearer": []}], f"{method} {path} has no auth"


def test_every_link_names_an_operation_of_the_document() -> None:
    document = json.loads(OPENAPI_PATH.read_text())
    operations = {
        operation["operationId"]
        for item in document["paths"].values()
        for operation in item.values()
    }
    linked = [
        link["operationId"]
        for item in document["paths"].values()
        for operation in item.values()
        for response in operation["responses"].values()
        for link in response.get("links", {}).values()
    ]
    assert linked and set(linked) <= operations, set(linked) - operations


def _seed_a_check_with_a_verdict_and_a_probe(redis_url: str, prefix: str) -> None:
    """So the stateful phase finds a check (through GET /v1/checks and its links) whose
    verdict, history and probe exist: their 200 answers are checked against the schema too."""
    from schemas.probe import ProbeLookup, ProbeOutcome, ProbeRun, ProposedProbe
    from schemas.settings import load_settings
    from schemas.verdict import VerdictKind
    from tests.fleet_support import finished_report, snapshot_request
    from workers.fleet.probe_store import ProbeStore
    from workers.fleet.redis_client import connect
    from workers.fleet.store import VerdictStore

    client = connect(redis_url)
    store = VerdictStore.from_settings(
        load_settings(redis_url=redis_url, key_prefix=prefix), client
    )
    request = snapshot_request(check_id=SEEDED_CHECK)
    store.register_run(request)
    store.record_verdict(finished_report(request, VerdictKind.TRUE))
    probe = ProposedProbe(
        lookups=[ProbeLookup(tool="get", args={"kind": "Deployment", "namespace": "prod"})],
        expression="object.status.readyReplicas >= 2",
        scope="each_object",
    )
    outcome = ProbeOutcome(
        status="accepted", reason="seeded", probe=probe, run=ProbeRun(verdict=VerdictKind.TRUE)
    )
    ProbeStore(client, prefix=prefix).save_compiled(
        SEEDED_CHECK, request.run_id, outcome, VerdictKind.TRUE, predicate=request.text,
        profile="fast",
    )  # fmt: skip
    client.close()


def _seed_the_example_policies(redis_url: str, prefix: str) -> None:
    """So GET /v1/policies and its links lead the stateful phase to stored policies, and the
    example of a set's name (`baseline`) names a stored set: no generated import stores one,
    policies being YAML text the fuzzer does not write."""
    from tests.api_fuzz_hooks import POLICIES
    from workers.fleet.policy_store import PolicyStore, import_into
    from workers.fleet.redis_client import connect
    from workers.policy_engine.policies.documents import documents_from_text

    client = connect(redis_url)
    text = "\n---\n".join(p.read_text() for p in sorted(POLICIES.glob("*.yaml")))
    report, _ = import_into(
        PolicyStore(client, prefix=prefix), documents_from_text(text, "examples"),
        policy_set="baseline",  # the example of the set name in the document
    )  # fmt: skip
    assert report.imported and not report.refused, report
    client.close()


@pytest.fixture
def api(redis_server: RedisProcess, tmp_path: Path) -> Iterator[ApiServer]:
    """The API over a private redis-server, with a kubeconfig of two contexts (a drawn glob
    may match them), one seeded check and the example policies."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    _seed_a_check_with_a_verdict_and_a_probe(redis_server.url, "fuzz")
    _seed_the_example_policies(redis_server.url, "fuzz")
    server = ApiServer(
        redis_server.url,
        tmp_path / "api.log",
        settings={"ASSAY_KEY_PREFIX": "fuzz", "ASSAY_KUBECONFIG": str(kubeconfig)},
    ).start()
    yield server
    server.stop()


@pytest.mark.integration
@pytest.mark.timeout(400)
def test_schemathesis_finds_no_difference_between_the_schema_and_the_server(
    api: ApiServer, tmp_path: Path
) -> None:
    """Every check schemathesis has, on every operation: no 500, only documented statuses,
    headers and bodies; every request the schema calls valid accepted and every other one
    refused; 405 answers whose Allow lists every method of the path; auth not ignored; a
    deleted schedule gone. Every request is drawn from the document alone (the hooks module
    only reads YAML streams); the run is bounded (a fixed seed, 25 cases per operation).
    """
    binary = Path(sys.executable).parent / "schemathesis"
    (tmp_path / "schemathesis.toml").write_text(SCHEMATHESIS_CONFIG)
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.api_fuzz_hooks", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [
            str(binary),
            "run",
            str(OPENAPI_PATH),
            "--url",
            api.url,
            "--header",
            f"Authorization: Bearer {WRITE_TOKEN}",
            "--checks",
            "all",
            "--max-examples",
            "25",
            "--seed",
            "20261122",
            "--workers",
            "1",
            "--phases",
            "examples,coverage,fuzzing,stateful",
            "--request-timeout",
            "15",
            "--suppress-health-check",
            "all",
            "--generation-database",
            "none",
            "--no-color",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=360,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-8000:]
    operations = sum(len(item) for item in json.loads(OPENAPI_PATH.read_text())["paths"].values())
    assert f"Tested: {operations}" in output and "generated" in output, output[-3000:]
    assert "Missing test data" not in output, output[-3000:]
    internal = [line for line in api.log_lines() if line.get("event") == "api_internal_error"]
    assert internal == [], internal[:1]
