"""Sinks in the one settings model: described in the config file, secrets from their own
variables (as a Kubernetes Secret feeds them), never printed; and the command-line errors
of `assay notify` (exit 64) when the configuration cannot work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schemas.notify import AlertmanagerSink, SlackSink, WebhookSink, missing_secrets
from schemas.settings import AssaySettings, load_settings
from tests.cli_support import run_cli as run

CONFIG = """\
notify_run_link_base: https://assay.example.com
notify_sinks:
  ops:
    type: webhook
    url: https://hooks.example.com/assay
    checks: ["prod-*"]
    to_verdicts: [false, cannot_determine]
    min_duration_seconds: 300
  chat:
    type: slack
    cannot_determine: false
  pager:
    type: alertmanager
    url: http://alertmanager.monitoring:9093
    labels: {severity: page}
"""
HMAC = "hmac-from-a-secret-9c1e"
SLACK = "https://hooks.slack.com/services/T0/B0/slack-secret-77aa"


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "assay.yaml"
    path.write_text(CONFIG)
    monkeypatch.setenv("ASSAY_CONFIG", str(path))
    return path


def test_secrets_from_their_own_variables_join_the_sinks_the_file_describes(
    config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASSAY_NOTIFY_SINKS__OPS__HMAC_KEY", HMAC)
    monkeypatch.setenv("ASSAY_NOTIFY_SINKS__CHAT__URL", SLACK)
    settings = load_settings()
    ops, chat, pager = (settings.notify_sinks[n] for n in ("ops", "chat", "pager"))
    assert isinstance(ops, WebhookSink) and isinstance(chat, SlackSink)
    assert isinstance(pager, AlertmanagerSink)
    assert ops.hmac_key is not None and ops.hmac_key.get_secret_value() == HMAC
    assert chat.url is not None and chat.url.get_secret_value() == SLACK
    assert ops.url == "https://hooks.example.com/assay" and ops.checks == ["prod-*"]
    assert [v.value for v in ops.to_verdicts] == ["false", "cannot_determine"]
    assert chat.cannot_determine is False and pager.cannot_determine is False
    assert pager.labels == {"severity": "page"}
    assert all(not missing_secrets(n, s) for n, s in settings.notify_sinks.items())
    shown = repr(settings) + settings.model_dump_json()
    assert HMAC not in shown and "slack-secret-77aa" not in shown


def test_the_whole_sink_list_can_come_from_one_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    sinks = {"ops": {"type": "webhook", "url": "http://h/x", "hmac_key": HMAC}}
    monkeypatch.setenv("ASSAY_NOTIFY_SINKS", json.dumps(sinks))
    assert isinstance(AssaySettings().notify_sinks["ops"], WebhookSink)


def test_every_process_reads_sinks_without_their_secrets(config_file: Path) -> None:
    settings = load_settings()  # a worker or the API: no notifier secret in its environment
    assert missing_secrets("ops", settings.notify_sinks["ops"]) == [
        "ASSAY_NOTIFY_SINKS__OPS__HMAC_KEY"
    ]
    assert missing_secrets("chat", settings.notify_sinks["chat"]) == [
        "ASSAY_NOTIFY_SINKS__CHAT__URL"
    ]
    assert missing_secrets("pager", settings.notify_sinks["pager"]) == []


@pytest.mark.parametrize(
    ("sinks", "problem"),
    [
        ({"Ops": {"type": "alertmanager", "url": "http://am"}}, "notify_sinks.Ops"),
        ({"ops": {"type": "pagerduty", "url": "http://x"}}, "does not match any of the expected"),
        ({"ops": {"type": "alertmanager", "url": "am:9093"}}, "should match pattern"),
        (
            {"ops": {"type": "webhook", "url": "http://x", "to_verdicts": ["maybe"]}},
            "to_verdicts",
        ),
    ],
)
def test_a_wrong_sink_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    sinks: dict[str, object],
    problem: str,
) -> None:
    monkeypatch.setenv("ASSAY_NOTIFY_SINKS", json.dumps(sinks))
    code, _, err = run(capsys, "notify", "test", "ops")
    assert code == 64 and "configuration is invalid" in err and problem in err


def test_notify_refuses_to_start_without_sinks_or_their_secrets(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ASSAY_REDIS_URL", "redis://127.0.0.1:1/0")  # never reached
    code, _, err = run(capsys, "notify")
    assert code == 64 and "no sinks are configured" in err
    code, _, err = run(capsys, "notify", "status")
    assert code == 64 and "no sinks are configured" in err
    (tmp_path / "assay.yaml").write_text(CONFIG)
    monkeypatch.setenv("ASSAY_CONFIG", str(tmp_path / "assay.yaml"))
    code, _, err = run(capsys, "notify")
    assert code == 64
    assert "ASSAY_NOTIFY_SINKS__CHAT__URL, ASSAY_NOTIFY_SINKS__OPS__HMAC_KEY" in err
    code, _, err = run(capsys, "notify", "test", "ops")
    assert code == 64 and "ASSAY_NOTIFY_SINKS__OPS__HMAC_KEY" in err
    code, _, err = run(capsys, "notify", "test", "nothing")
    assert code == 64 and "there is no sink named 'nothing'" in err
