"""The committed OpenAPI document: no drift from the code, and the running API honours it.

The schemathesis run is bounded (a fixed seed, a few dozen cases per operation,
one worker) and checks that no generated request, valid or not, gets a 500,
an undocumented status, a wrong content type or a body that breaks the
documented schema.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from assay import api as api_module
from assay.api import OPENAPI_PATH, render_openapi
from assay.redis_process import RedisProcess
from tests.api_support import ROOT, WRITE_TOKEN, ApiServer

SCHEMATHESIS_CHECKS = (
    "not_a_server_error,status_code_conformance,content_type_conformance,"
    "response_schema_conformance,response_headers_conformance"
)


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


@pytest.fixture
def api(redis_server: RedisProcess, tmp_path: Path) -> Iterator[ApiServer]:
    server = ApiServer(
        redis_server.url, tmp_path / "api.log", settings={"ASSAY_KEY_PREFIX": "fuzz"}
    ).start()
    yield server
    server.stop()


@pytest.mark.integration
@pytest.mark.timeout(400)
def test_schemathesis_finds_no_server_error_and_no_schema_violation(
    api: ApiServer, tmp_path: Path
) -> None:
    binary = Path(sys.executable).parent / "schemathesis"
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
            SCHEMATHESIS_CHECKS,
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
            "--report",
            "junit",
            "--report-dir",
            str(tmp_path / "report"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=360,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-8000:]
    assert "passed" in output and "generated" in output
    internal = [line for line in api.log_lines() if line.get("event") == "api_internal_error"]
    assert internal == [], internal[:1]
