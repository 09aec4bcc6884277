"""Secret values never leave the toolset: every tool, both backends, every place text ends up.

The canary cluster (tests/secret_canaries.py) plants fresh random Secret
values where a careless toolset would show them (env literals, ConfigMaps,
events, current and previous logs, a custom resource, a Secret's own
credential-keyed annotation, the base64 form of a ``stringData`` value, one line of
a PEM key) plus credential-shaped values in no Secret at all (DSN passwords,
``key=value`` tokens, a bearer token, a ``--password`` flag, a PEM private
key block, provider tokens standing alone in pod logs). Each test searches
what a user, a model or a log reader would see for any form of any canary.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from assay.testing.fake_apiserver import FakeApiServer
from assay.testing.fake_cluster import FakeCluster
from assay.testing.scripted_model import ScriptedModel
from schemas.budget import Budget
from schemas.report import RunReport, Step
from schemas.request import ContextTarget, EvaluationRequest, SnapshotTarget
from schemas.settings import load_settings
from tests.fleet_support import finished_report, snapshot_request
from tests.secret_canaries import (
    NAMESPACE,
    SECRET_LABEL,
    CanaryCluster,
    sweep_calls,
    write_canary_cluster,
)
from workers.engine.engine import EngineDeps, evaluate
from workers.engine.toolsets.backend import REDACTED
from workers.engine.toolsets.base import ToolRegistry
from workers.engine.toolsets.factory import build_registry
from workers.engine.toolsets.redaction import SecretScrubber, scrubbed
from workers.fleet.store import scrubbed_report

ASSAY = str(Path(sys.executable).parent / "assay")


@pytest.fixture
def canaries(tmp_path: Path) -> CanaryCluster:
    return write_canary_cluster(tmp_path)


@pytest.fixture
def api_server(canaries: CanaryCluster, tmp_path: Path) -> Iterator[tuple[FakeApiServer, Path]]:
    with FakeApiServer([FakeCluster.from_snapshot(canaries.path)]) as server:
        yield server, server.write_kubeconfig(tmp_path / "kubeconfig")


def snapshot_registry(canaries: CanaryCluster) -> ToolRegistry:
    request = EvaluationRequest(text="anything", target=SnapshotTarget(path=str(canaries.path)))
    return build_registry(request, load_settings())


def live_registry(kubeconfig: Path) -> ToolRegistry:
    target = ContextTarget(context="canary", kubeconfig=str(kubeconfig))
    settings = load_settings(kube_request_timeout_seconds=5.0, kube_retry_deadline_seconds=5.0)
    return build_registry(EvaluationRequest(text="anything", target=target), settings)


def sweep(registry: ToolRegistry) -> str:
    """Every lookup of the canary cluster; asserts they worked, returns all the output."""
    results = [registry.call(tool, arguments) for tool, arguments in sweep_calls()]
    failed = [(call, r.output) for call, r in zip(sweep_calls(), results, strict=True) if not r.ok]
    assert not failed
    # meta may hold lazy renderings (the structured view strict checks use): render them too
    return "\n".join(r.output + json.dumps(_rendered(r.meta)) for r in results)


def _rendered(meta: dict[str, Any]) -> dict[str, Any]:
    return {key: value() if callable(value) else value for key, value in meta.items()}


# --------------------------------------------------------------------------- every tool output


def test_the_snapshot_backend_shows_no_canary_in_any_tool_output(canaries: CanaryCluster) -> None:
    everything = sweep(snapshot_registry(canaries))
    assert canaries.leaks(everything) == []
    assert f"password: {REDACTED}" in everything  # the Secret's keys are still shown
    assert "logs of pod shop/checkout-0" in everything and "ready" in everything
    # provider tokens standing alone in log lines: the lines are shown, the tokens are not
    assert f"cloning https://{REDACTED}@github.com/shop/checkout" in everything
    assert f"uploading receipts to s3 as {REDACTED}" in everything
    assert f"export OPENAI_KEY {REDACTED}" in everything


def test_the_live_backend_shows_no_canary_in_any_tool_output(
    canaries: CanaryCluster, api_server: tuple[FakeApiServer, Path]
) -> None:
    server, kubeconfig = api_server
    everything = sweep(live_registry(kubeconfig))
    assert canaries.leaks(everything) == []
    assert f"uploading receipts to s3 as {REDACTED}" in everything
    # the server did hand the values out: the withholding is assay's doing
    assert "/c/canary/api/v1/secrets" in [r.path for r in server.requests]
    assert server.methods() == {"GET"}


def test_with_secrets_forbidden_the_live_backend_still_scrubs_credential_patterns(
    canaries: CanaryCluster, api_server: tuple[FakeApiServer, Path]
) -> None:
    server, kubeconfig = api_server
    server.add_fault(r"/secrets", 403)  # the recommended RBAC: no Secrets at all
    registry = live_registry(kubeconfig)
    results = [registry.call(tool, arguments) for tool, arguments in sweep_calls()]
    secret_lookups = [r for (_, args), r in zip(sweep_calls(), results, strict=True)
                      if args.get("kind") == "Secret"]  # fmt: skip
    assert secret_lookups and all(r.output.startswith("forbidden:") for r in secret_lookups)
    others = [r for r in results if r not in secret_lookups]
    assert all(r.ok for r in others)
    everything = "\n".join(r.output for r in results)
    # values in no readable Secret can only be caught by their shape, and they are
    assert canaries.leaks(everything, secrets_readable=False) == []


def test_a_failed_secrets_list_fails_the_lookup_instead_of_showing_it_unscrubbed(
    canaries: CanaryCluster, api_server: tuple[FakeApiServer, Path]
) -> None:
    server, kubeconfig = api_server
    server.add_fault(r"/api/v1/secrets$", 503)
    target = ContextTarget(context="canary", kubeconfig=str(kubeconfig))
    settings = load_settings(kube_request_timeout_seconds=2.0, kube_retry_deadline_seconds=1.0)
    registry = build_registry(EvaluationRequest(text="anything", target=target), settings)
    arguments = {"kind": "ConfigMap", "name": "app-config", "namespace": NAMESPACE}
    failed = registry.call("get", arguments)
    assert not failed.ok and failed.output.startswith("unavailable:")
    assert "scrub copies of their values" in failed.output
    assert "/c/canary/api/v1/namespaces/shop/configmaps/app-config" not in [
        r.path for r in server.requests
    ]  # the ConfigMap was not even read
    server.clear_faults()
    shown = registry.call("get", arguments)  # the next lookup learns the Secrets, then answers
    assert shown.ok and "fallback seed" in shown.output
    assert canaries.leaks(shown.output) == []


def test_a_secret_shows_its_keys_labels_and_annotations_but_no_value(
    canaries: CanaryCluster, api_server: tuple[FakeApiServer, Path]
) -> None:
    """Labels and annotations are identifiers and are shown as stored (the label's value is
    copied into a custom resource, shown there too); an annotation under a credential key,
    the data values and the last-applied copy of them are not."""
    _, kubeconfig = api_server
    target = {"kind": "Secret", "name": "signing-key", "namespace": NAMESPACE}
    backup = {"kind": "Backup", "name": "nightly", "namespace": NAMESPACE}
    for registry in (snapshot_registry(canaries), live_registry(kubeconfig)):
        shown = registry.call("get", target).output
        assert f"vendor.example.com/api-token: {REDACTED}" in shown
        assert f"{SECRET_LABEL[0]}: {SECRET_LABEL[1]}" in shown
        assert f"vendorAccount: {SECRET_LABEL[1]}" in registry.call("get", backup).output
        assert "kubernetes.io/service-account.name: signer" in shown and "app: signer" in shown
        assert f"tls.key: {REDACTED}" in shown and "kubernetes.io/tls" in shown
        assert "last-applied-configuration" not in shown
        assert canaries.leaks(shown) == []


def test_shell_output_is_scrubbed_with_the_clusters_secret_values(
    canaries: CanaryCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The registry, not each tool, scrubs: a shell command printing a Secret value is caught."""
    leaked_line = canaries.canary("pem-line").value
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    printer = bin_dir / "show-config"
    printer.write_text(f"#!/bin/sh\necho 'config dump: {leaked_line} db_password=abc123'\n")
    printer.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        yaml.safe_dump(
            {
                "available_commands": [{"pattern": "show-config", "description": "dump"}],
                "allow": ["show-config"],
                "timeout_seconds": 5,
                "working_dir": str(tmp_path),
            }
        )
    )
    request = EvaluationRequest(
        text="anything",
        target=SnapshotTarget(path=str(canaries.path)),
        toolsets=["kubernetes", "shell"],
    )
    registry = build_registry(request, load_settings(shell_config=str(policy)))
    result = registry.call("run_command", {"command": "show-config"})
    assert result.ok, result.output
    assert "config dump:" in result.output
    assert leaked_line not in result.output and "abc123" not in result.output


# --------------------------------------------------------------------------- whole runs


def command(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"action": {"action": "COMMAND", "tool": tool, "arguments": arguments}}


def reading_everything_then(last: dict[str, Any]) -> dict[str, Any]:
    """A scripted model that makes every lookup of the sweep, then ``last``."""
    turns = [command(tool, arguments) for tool, arguments in sweep_calls()]
    return {"scenarios": [{"turns": [*turns, last]}]}


GIVE_UP = {"action": {"action": "ERROR", "message": "nothing conclusive"}}


@pytest.mark.parametrize("backend", ["snapshot", "live"])
def test_a_run_shows_no_canary_to_the_model_or_in_its_report(
    canaries: CanaryCluster, api_server: tuple[FakeApiServer, Path], backend: str
) -> None:
    _, kubeconfig = api_server
    target: SnapshotTarget | ContextTarget = (
        SnapshotTarget(path=str(canaries.path))
        if backend == "snapshot"
        else ContextTarget(context="canary", kubeconfig=str(kubeconfig))
    )
    request = EvaluationRequest(
        text="no ConfigMap in namespace shop holds a password",
        target=target,
        budget=Budget(max_iterations=60, max_tokens=2_000_000, timeout_seconds=120),
    )
    with ScriptedModel(reading_everything_then(GIVE_UP)) as model:
        settings = load_settings(model="openai/scripted", api_base=model.url)
        report = evaluate(request, EngineDeps(settings=settings))
        prompts = json.dumps(model.requests)
    lookups = [s for s in report.steps if s.kind == "COMMAND"]
    assert len(lookups) == len(sweep_calls()) and all(s.ok for s in lookups)
    assert "fallback seed" in prompts  # the ConfigMap did reach the model ...
    assert canaries.leaks(prompts) == []  # ... without a single canary
    assert canaries.leaks(report.model_dump_json()) == []


def test_assay_check_prints_and_logs_no_canary(canaries: CanaryCluster, tmp_path: Path) -> None:
    """The CLI as a user runs it, with --trace and debug logs: stdout and stderr stay clean."""
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump(reading_everything_then(GIVE_UP)))
    result = subprocess.run(
        [ASSAY, "check", "--scripted", str(script), "--snapshot", str(canaries.path),
         "--trace", "--json", "--max-iterations", "60", "--max-tokens", "2000000",
         "no ConfigMap in namespace shop holds a password"],
        capture_output=True, text=True, timeout=180,
        env={"PATH": "/usr/bin:/bin", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
             "ASSAY_LOG_LEVEL": "debug", "HOME": str(tmp_path),
             "ASSAY_SNAPSHOT_ROOTS": json.dumps([str(tmp_path)])},
    )  # fmt: skip
    assert result.returncode == 3, result.stderr[-2000:]
    assert '"kind":"ConfigMap"' in result.stderr  # the trace showed the lookups
    assert canaries.leaks(result.stdout) == []
    assert canaries.leaks(result.stderr) == []


def test_log_lines_are_scrubbed_of_credentials(capsys: pytest.CaptureFixture[str]) -> None:
    """The structlog pipeline every process configures scrubs each line's fields."""
    import structlog

    from workers.engine.logs import configure_logging

    previous = structlog.get_config()
    try:
        configure_logging(load_settings(log_format="json", log_level="info"))
        structlog.get_logger("assay.test").warning(
            "cannot reach mysql://root:hunter2hunter2@mysql:3306/db",
            detail={"password": "p4ss-word", "steps": ["token=abcdef123"]},
        )
    finally:  # the configured logger writes to this test's captured stderr: undo it
        structlog.configure(**previous)
    line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert "hunter2hunter2" not in json.dumps(line)
    assert line["detail"] == {"password": REDACTED, "steps": [f"token={REDACTED}"]}
    assert line["event"] == f"cannot reach mysql://root:{REDACTED}@mysql:3306/db"


# --------------------------------------------------------------------------- the scrubber


def test_each_form_of_a_known_value_is_scrubbed() -> None:
    password = "Tr0ub4dor-and-3"
    pem = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nBKcwggSjAgEAAoIBAQC7\n-----END PRIVATE KEY-----\n"  # noqa: E501
    scrubber = SecretScrubber([password, pem, "dsn=postgres://app:Inner-Pass-99@db/app"])
    encoded = base64.b64encode(password.encode()).decode()
    docker_auth = base64.b64encode(f"robot:{password}".encode()).decode()
    echoed = base64.b64encode(password.encode() + b"\n").decode()  # `echo $PW | base64`
    for text in (
        f"env PASSWORD_COPY={password} end",
        f"b64 {encoded} end",
        f"unpadded {encoded.rstrip('=')} end",
        f"url-safe {base64.urlsafe_b64encode(password.encode()).decode()} end",
        f"echo | base64: {echoed} end",
        f'{{"auths": {{"r.example.com": {{"auth": "{docker_auth}"}}}}}}',
        "one line: BKcwggSjAgEAAoIBAQC7 end",
        "a copy of the inner DSN password: Inner-Pass-99",
    ):
        scrubbed = scrubber.text(text)
        assert REDACTED in scrubbed, text
        for secret in (password, encoded.rstrip("="), "BKcwggSjAgEAAoIBAQC7", "Inner-Pass-99"):
            assert secret not in scrubbed
    # PEM armour lines are not secret, and are not hunted down elsewhere
    assert scrubber.text("-----BEGIN PRIVATE KEY-----") == "-----BEGIN PRIVATE KEY-----"


def test_another_certificate_is_not_taken_for_the_one_in_a_secret() -> None:
    """Encoded PEMs all begin alike; only the one whose value is known is redacted."""

    def pem(body: bytes) -> str:
        return f"-----BEGIN CERTIFICATE-----\n{base64.b64encode(body).decode()}\n-----END CERTIFICATE-----\n"  # noqa: E501

    known, other = pem(b"known certificate body " * 3), pem(b"a webhook's own CA body " * 3)
    scrubber = SecretScrubber([known])
    other_bundle = f"caBundle: {base64.b64encode(other.encode()).decode()}"
    assert scrubber.text(other_bundle) == other_bundle
    assert scrubber.text(f"caBundle: {base64.b64encode(known.encode()).decode()}") == (
        f"caBundle: {REDACTED}"
    )


def test_short_values_are_not_hunted_but_credential_keys_still_hide_them() -> None:
    scrubber = SecretScrubber(["admin", "5432"])
    assert scrubber.text("user admin on port 5432") == "user admin on port 5432"
    assert scrubber.text("password=admin port=5432") == f"password={REDACTED} port=5432"


@pytest.mark.parametrize(
    ("text", "hidden", "kept"),
    [
        ("postgres://app:s3cr%40t@db.prod:5432/app", "s3cr%40t", "postgres://app:"),
        ("redis://:hunter2hunter2@cache:6379/0", "hunter2hunter2", "@cache:6379"),
        ("DB_PASSWORD=abc MAX_TOKENS=500", "abc", "MAX_TOKENS=500"),
        ('{"apiKey": "k-123", "secretName": "api-tls"}', "k-123", '"secretName": "api-tls"'),
        ("client_secret: zz9 tokenFile: /var/run/token", "zz9", "tokenFile: /var/run/token"),
        ("--db-password hunter2 --verbose", "hunter2", "--verbose"),
        ("Authorization: Bearer abc.def.ghi", "abc.def.ghi", "Authorization: Bearer"),
        ("token expired; password=p4ss", "p4ss", "token expired"),
        ("PGPASSWORD='pa ss' psql", "pa ss", "psql"),
        ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl", "eyJzdWIiOiIxIn0", "jwt "),
        (
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"
            "-----END OPENSSH PRIVATE KEY-----",
            "b3BlbnNzaC1rZXktdjEAAAAA",
            "-----BEGIN OPENSSH PRIVATE KEY-----",
        ),
    ],
)
def test_credential_shaped_values_are_scrubbed_without_being_known(
    text: str, hidden: str, kept: str
) -> None:
    scrubbed = SecretScrubber().text(text)
    assert hidden not in scrubbed and REDACTED in scrubbed
    assert kept in scrubbed


@pytest.mark.parametrize(
    "text",
    [
        "secretName: api-tls",
        "key: password",
        "passwordFile: /etc/pw",
        "PWD=/app",
        "password: <redacted by assay>",
        "password: $(DB_PASSWORD)",
        "https://example.com:8443/path@v1",
        "max_tokens=500 bypass=true",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert SecretScrubber().text(text) == text


@pytest.mark.parametrize(
    ("text", "hidden"),
    [
        ("İstanbul: jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl", "eyJzdWIiOiIxIn0"),
        ("İİİİ then postgres://app:hunter2hunter2@db/x", "hunter2hunter2"),
    ],
)
def test_a_character_that_lowercases_to_two_does_not_shift_what_follows(
    text: str, hidden: str
) -> None:
    """``İ`` lower-cases to two code points; the hints are found in lower-cased text and the
    patterns tried at the same index of the original, so one ``İ`` earlier in a tool's output
    (a Turkish log line) must not move every later credential out of reach."""
    scrubbed = SecretScrubber().text(text)
    assert hidden not in scrubbed and REDACTED in scrubbed
    assert scrubbed.startswith(text[:4])


def test_objects_hide_credential_keys_and_name_value_pairs() -> None:
    pod_spec = {
        "containers": [
            {
                "args": ["--token", "tok-1", "--port", "80"],
                "env": [
                    {"name": "DB_PASSWORD", "value": "hunter2"},
                    {"name": "LOG_LEVEL", "value": "info"},
                    {"name": "API_KEY", "valueFrom": {"secretKeyRef": {"name": "k", "key": "v"}}},
                ],
            }
        ],
        "volumes": [{"name": "tls", "secret": {"secretName": "api-tls"}}],
    }
    scrubbed = SecretScrubber().scrub_object(pod_spec)
    container = scrubbed["containers"][0]
    assert container["args"] == ["--token", REDACTED, "--port", "80"]
    assert container["env"][0]["value"] == REDACTED
    assert container["env"][1]["value"] == "info"
    assert container["env"][2]["valueFrom"] == {"secretKeyRef": {"name": "k", "key": "v"}}
    assert scrubbed["volumes"][0]["secret"] == {"secretName": "api-tls"}


_VALUE = st.text(
    alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=8, max_size=40
)
_FILLER = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=60)


@settings(max_examples=150, deadline=None)
@given(value=_VALUE, before=_FILLER, after=_FILLER, form=st.sampled_from(["raw", "b64", "url"]))
def test_a_known_value_never_survives_in_any_surrounding_text(
    value: str, before: str, after: str, form: str
) -> None:
    raw = value.encode()
    planted = {
        "raw": value,
        "b64": base64.b64encode(raw).decode(),
        "url": base64.urlsafe_b64encode(raw).decode().rstrip("="),
    }[form]
    scrubbed = SecretScrubber([value]).text(before + planted + after)
    assert planted not in scrubbed


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "unit",
    ["key", "a-key", "password", "token:", "a.token=x", "x-api-key:", "sk-no-key-configured:"],
)
def test_a_long_run_of_credential_words_is_scrubbed_in_linear_time(unit: str) -> None:
    """Anyone who can write a log line can fill 100 KB with credential words. Walking back
    from every hint to its identifier's start, or reading every key's value to the end of
    the run, took quadratic time: tens of seconds to minutes here, hours for a 1 MiB log."""
    text = unit * (100_000 // len(unit))
    started = time.perf_counter()
    SecretScrubber().text(text)
    assert time.perf_counter() - started < 2.0


# --------------------------------------------------------------------------- stored and served


def redis_dump(url: str) -> str:
    """Every key and value in the test's Redis database, as text."""
    import redis

    client = redis.Redis.from_url(url)
    parts: list[str] = []
    for key in client.scan_iter():
        kind = client.type(key).decode()
        if kind == "string":
            value: Any = client.get(key)
        elif kind == "hash":
            value = client.hgetall(key)
        elif kind == "list":
            value = client.lrange(key, 0, -1)
        elif kind == "set":
            value = client.smembers(key)
        elif kind == "zset":
            value = client.zrange(key, 0, -1)
        else:
            value = client.xrange(key)
        parts.append(f"{key!r} {value!r}")
    client.close()
    return "\n".join(parts)


def assay_run(
    run_id: str, redis_url: str, home: Path, *flags: str
) -> subprocess.CompletedProcess[str]:
    """`assay run RUN_ID` as a user runs it, against the test's Redis."""
    environment = {"PATH": "/usr/bin:/bin", "ASSAY_REDIS_URL": redis_url, "HOME": str(home),
                   "LITELLM_LOCAL_MODEL_COST_MAP": "True"}  # fmt: skip
    return subprocess.run(
        [ASSAY, "run", run_id, *flags], capture_output=True, text=True, timeout=60, env=environment
    )


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_the_fleet_stores_serves_and_logs_no_canary(
    canaries: CanaryCluster,
    api_server: tuple[FakeApiServer, Path],
    redis_url: str,
    tmp_path: Path,
) -> None:
    """A live run on a real worker: Redis, the HTTP API, `assay run` and the logs stay clean.

    The model ends by echoing a credential it "found" (a DSN with a password):
    what it writes is stored, so the store must scrub it too.
    """
    from assay.client import Client
    from tests.api_support import READ_TOKEN, ApiServer, auth
    from tests.fleet_support import scripted_worker_env, start_worker, stop_process

    _, kubeconfig = api_server
    echo = canaries.canary("dsn-password").value
    last = {"action": {"action": "ERROR", "message": f"cannot log in to mysql://root:{echo}@db"}}
    worker_log = tmp_path / "worker.log"
    with ScriptedModel(reading_everything_then(last)) as model:
        worker = start_worker(scripted_worker_env(redis_url, model.url), worker_log, concurrency=2)
        api = ApiServer(redis_url, tmp_path / "api.log").start()
        try:
            with Client(load_settings(redis_url=redis_url)) as client:
                request = EvaluationRequest(
                    text="no ConfigMap in namespace shop holds a password",
                    target=ContextTarget(context="canary", kubeconfig=str(kubeconfig)),
                    budget=Budget(max_iterations=60, max_tokens=2_000_000, timeout_seconds=120),
                )
                receipt = client.submit_request(request)
                verdict = client.wait(receipt.run_id, timeout=180)
            run_view = httpx.get(f"{api.url}/v1/runs/{receipt.run_id}", headers=auth(READ_TOKEN))
            check_view = httpx.get(
                f"{api.url}/v1/checks/{receipt.check_id}", headers=auth(READ_TOKEN)
            )
            shown = [assay_run(receipt.run_id, redis_url, tmp_path, *f) for f in ([], ["--json"])]
        finally:
            api.stop()
            stop_process(worker)
        prompts = json.dumps(model.requests)

    assert verdict.exit_code == 3 and verdict.reason and REDACTED in verdict.reason
    assert run_view.status_code == 200 and check_view.status_code == 200
    assert "fallback seed" in run_view.text  # the report holds the tool output ...
    assert all(result.returncode == 3 for result in shown), [r.stderr for r in shown]
    for place, text in {
        "prompts": prompts,
        "redis": redis_dump(redis_url),
        "api run": run_view.text,
        "api check": check_view.text,
        "assay run": "".join(r.stdout + r.stderr for r in shown),
        "worker log": worker_log.read_text(errors="replace"),
        "api log": (tmp_path / "api.log").read_text(errors="replace"),
    }.items():
        assert canaries.leaks(text) == [], place  # ... and no canary anywhere


def test_a_report_is_scrubbed_under_its_own_field_names_too() -> None:
    """The pattern pass skips searching the text of a report's own field names (issue 15), not
    what is under them: a credential under a field name, or under a key the model chose that
    happens to be a field name, is still hidden."""
    from schemas.report import RunReport, Step
    from tests.fleet_support import finished_report, snapshot_request
    from workers.engine.toolsets.redaction import PATTERNS

    report = finished_report(
        snapshot_request(), "false", explanation="db at postgres://app:hunter2-pw@db/x"
    )
    step = Step(
        index=0,
        kind="COMMAND",
        tool="get",
        arguments={"token": "tok-1234567890abcdef", "prompt_tokens": "password=letmein-99"},
        output="api_key: sk-abcdef0123456789",
        started_at=report.request.submitted_at,
    )
    report = report.model_copy(update={"steps": [step]})
    stored = scrubbed(report, scrubber=PATTERNS).model
    assert isinstance(stored, RunReport)
    text = stored.model_dump_json()
    for secret in ("hunter2-pw", "tok-1234567890abcdef", "letmein-99", "sk-abcdef0123456789"):
        assert secret not in text
    assert stored.steps[0].arguments is not None
    assert set(stored.steps[0].arguments) == {"token", "prompt_tokens"}  # keys stay as keys


# --- the store's pass over an engine's report: only what changed since is searched ---------


def _engine_scrubbed(report: RunReport) -> RunReport:
    """``report`` as the engine hands it over: scrubbed, with the dump it scrubbed kept."""
    done = scrubbed(report, keep=frozenset({"request", "checkpoint"}), revalidate=False)
    done.model._scrubbed_dump = done.dump
    return done.model


def _with_step(report: RunReport, output: str) -> RunReport:
    step = Step(index=0, kind="COMMAND", tool="get", arguments={"kind": "Pod"}, ok=True,
                output=output, started_at=report.request.submitted_at)  # fmt: skip
    return report.model_copy(update={"steps": [step]})


def test_the_store_still_finds_a_credential_written_into_a_step_after_the_engine() -> None:
    """The engine's scrub is remembered so the store need not search the steps again; a step
    changed in place afterwards (deep inside, same objects) is searched all the same."""
    dsn = "postgres://app:Sup3rS3cretPw@db:5432/app"
    report = _engine_scrubbed(_with_step(finished_report(snapshot_request(), "true"), "3 pods"))
    report.steps[0].output = f"3 pods; connect with {dsn}"  # after the engine's scrub
    stored = scrubbed_report(report)
    assert stored.steps[0].output is not None and "Sup3rS3cretPw" not in stored.steps[0].output
    assert "Sup3rS3cretPw" not in stored.model_dump_json()


def test_the_store_finds_a_credential_in_what_was_added_after_the_engine() -> None:
    """A field set after the engine (a probe's outcome, the verdict replaced) is searched."""
    token = "Sup3rS3cretPw"
    report = _engine_scrubbed(_with_step(finished_report(snapshot_request(), "true"), "3 pods"))
    assert report.verdict is not None
    report.verdict = report.verdict.model_copy(
        update={"explanation": f"used postgres://app:{token}@db/app"}
    )
    report = report.model_copy(update={"attempts": 2})
    stored = scrubbed_report(report)
    assert token not in stored.model_dump_json()
    assert stored.steps[0].output == "3 pods" and stored.attempts == 2


def test_a_report_the_engine_never_scrubbed_is_searched_whole() -> None:
    dsn = "postgres://app:Sup3rS3cretPw@db:5432/app"
    report = _with_step(finished_report(snapshot_request(), "true"), f"see {dsn}")
    assert report._scrubbed_dump is None
    assert "Sup3rS3cretPw" not in scrubbed_report(report).model_dump_json()


# --------------------------------------------------------------------------- dict keys

_JWT_KEY = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJjaSJ9.c2lnbmF0dXJlLWhlcmU"


def test_a_key_that_is_a_credential_is_rewritten_like_a_value() -> None:
    """A key is shown wherever its object is (YAML, tables, the structured view, reports):
    a DSN, a copied Secret value or a bearer token as a key must go as it would as a value."""
    scrubber = SecretScrubber(["kNown-Secret-Value-42"])
    scrubbed = scrubber.scrub_object(
        {
            "postgres://app:pw-Sup3r-s3cret@db/app": 1,
            "kNown-Secret-Value-42": "copied",
            f"Bearer {_JWT_KEY}": {"nested": ["list", {"authorization: Bearer tok-123456789": 2}]},
            "app.kubernetes.io/name": "web",
        }
    )
    assert list(scrubbed) == [
        f"postgres://app:{REDACTED}@db/app",
        REDACTED,
        f"Bearer {REDACTED}",
        "app.kubernetes.io/name",  # ordinary keys, and the order, stay
    ]
    assert scrubbed[f"Bearer {REDACTED}"] == {
        "nested": ["list", {f"authorization: Bearer {REDACTED}": 2}]
    }
    assert scrubbed["app.kubernetes.io/name"] == "web" and scrubbed[REDACTED] == "copied"


def test_keys_that_scrub_to_the_same_text_keep_their_entries_apart() -> None:
    """Two DSNs differing only in their password must not merge into one entry (one value
    lost), nor take the name of a key that was already there."""
    already = f"postgres://app:{REDACTED}@db/app"
    scrubbed = SecretScrubber().scrub_object(
        {
            "postgres://app:first-pw-1234@db/app": 1,
            already: 0,
            "postgres://app:2nd-pw-5678@db/app": 2,
        }
    )
    assert scrubbed == {f"{already} (2)": 1, already: 0, f"{already} (3)": 2}
    assert list(scrubbed.values()) == [1, 0, 2]


def test_ordinary_keys_are_not_searched_one_by_one() -> None:
    """Keys are searched once, with the rest of the object's strings; only a key that search
    hit is looked at again. A clean object is never walked string by string at all."""
    scrubber = SecretScrubber(["kNown-Secret-Value-42"])
    searched: list[str] = []
    text = scrubber.text

    def recording(value: str) -> str:
        searched.append(value)
        return text(value)

    scrubber.text = recording  # type: ignore[method-assign]
    ordinary = {f"label-{n}": "v" for n in range(50)}
    scrubber.scrub_object({"metadata": {"labels": dict(ordinary)}, "data": {"a": "b"}})
    assert searched == []
    scrubber.scrub_object(
        {
            "metadata": {"labels": dict(ordinary)},
            "data": {"url": "mysql://root:pw-123456789@db/x", "kNown-Secret-Value-42": "x"},
        }
    )
    assert not set(searched) & (set(ordinary) | {"metadata", "labels", "data", "url"})
    assert "kNown-Secret-Value-42" in searched


def test_a_configmap_key_with_a_password_never_reaches_the_model(tmp_path: Path) -> None:
    """The key of a ConfigMap's data as a connection string: every lookup the model can make,
    and the structured view a strict check's confirmation is built from, show it redacted."""
    password = "cmkey-Pw-7c1e9a44"
    (tmp_path / "cm.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app, namespace: prod}\n"
        f'data: {{"postgres://app:{password}@db.prod:5432/app": primary, mode: fast}}\n'
    )
    registry = build_registry(
        EvaluationRequest(text="anything", target=SnapshotTarget(path=str(tmp_path))),
        load_settings(),
    )
    target = {"kind": "ConfigMap", "namespace": "prod", "name": "app"}
    results = [
        registry.call(tool, arguments)
        for tool, arguments in (("get", target), ("describe", target), ("get", {"kind": "cm"}))
    ]
    assert all(result.ok for result in results)
    seen = "\n".join(r.output + json.dumps(_rendered(r.meta)) for r in results)
    assert password not in seen
    assert f"postgres://app:{REDACTED}@db.prod:5432/app: primary" in results[0].output
    assert "mode: fast" in results[0].output
