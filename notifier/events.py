"""What a sink is sent about one change: the event data, its stable identity, its renderings.

Everything here is a function of the change and what the store holds about its
run, never of the moment of sending, so a redelivery after a crash carries the
same bytes, the same CloudEvents ``id`` and the same idempotency key.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from schemas.fleet import CheckSummary, VerdictChange
from schemas.notify import EVENT_TYPE, ChangeEventData
from schemas.verdict import EXIT_CODES, VerdictKind
from workers.fleet.store import verdict_source

if TYPE_CHECKING:
    from schemas.settings import AssaySettings
    from workers.fleet.store import VerdictStore

EXPLANATION_CHARS = 4000
SLACK_EXPLANATION_CHARS = 2500
SLACK_TEXT_CHARS = 400
_IDEMPOTENCY_NAMESPACE = uuid.UUID("6f1c7f64-0b7e-4a53-9d55-0d3c1b1e2a10")

SAMPLE_CHECK_ID = "assay-notify-test"
SAMPLE_TARGET = "sample"


@dataclass(frozen=True)
class Notification:
    """One change, ready for one sink."""

    sink: str
    entry_id: str
    data: ChangeEventData
    idempotency_key: str


def idempotency_key(key_prefix: str, sink: str, entry_id: str) -> str:
    """Stable per change and sink: a redelivery has the same key, another sink another key."""
    return str(uuid.uuid5(_IDEMPOTENCY_NAMESPACE, f"{key_prefix}/{sink}/{entry_id}"))


def run_url(settings: AssaySettings, run_id: str) -> str | None:
    base = settings.notify_run_link_base
    return f"{base.rstrip('/')}/v1/runs/{run_id}" if base else None


def notification_for(
    store: VerdictStore,
    settings: AssaySettings,
    sink: str,
    entry_id: str,
    change: VerdictChange,
    presented_from: VerdictKind,
    summary: CheckSummary | None,
) -> Notification:
    """The notification of ``change`` as ``sink`` should hear it (``presented_from`` -> to).

    ``summary`` is the check as the store has it now (for the predicate's text).
    """

    verdict = store.run_verdict(change.run_id)
    explanation = verdict.explanation[:EXPLANATION_CHARS] if verdict else None
    data = ChangeEventData(
        check_id=change.check_id,
        target=change.target,
        kind=verdict.kind if verdict else (summary.kind if summary else "check"),
        text=summary.text if summary else "",
        from_verdict=presented_from,
        to_verdict=change.to_verdict,
        exit_code=EXIT_CODES[change.to_verdict],
        run_id=change.run_id,
        run_url=run_url(settings, change.run_id),
        explanation=explanation,
        source=verdict_source(verdict) if verdict else "model",
        changed_at=change.at,
    )
    return Notification(sink, entry_id, data, idempotency_key(settings.key_prefix, sink, entry_id))


def sample_notification(settings: AssaySettings, sink: str) -> Notification:
    """A made-up change (true -> false) for `assay notify test`; its key is new every time."""
    entry_id = f"test-{uuid.uuid4().hex}"
    data = ChangeEventData(
        check_id=SAMPLE_CHECK_ID,
        target=SAMPLE_TARGET,
        kind="check",
        text="a sample predicate sent by `assay notify test`",
        from_verdict=VerdictKind.TRUE,
        to_verdict=VerdictKind.FALSE,
        exit_code=EXIT_CODES[VerdictKind.FALSE],
        run_id=entry_id,
        run_url=run_url(settings, entry_id),
        explanation="This is a test notification from assay; no check changed.",
        source="model",
        changed_at=datetime.now(UTC),
    )
    return Notification(sink, entry_id, data, idempotency_key(settings.key_prefix, sink, entry_id))


# --- webhook: CloudEvents 1.0, structured mode -------------------------------------------------
CLOUDEVENTS_CONTENT_TYPE = "application/cloudevents+json; charset=utf-8"


def cloudevent(notification: Notification, source: str) -> dict[str, Any]:
    data = notification.data.model_dump(mode="json")
    return {
        "specversion": "1.0",
        "type": EVENT_TYPE,
        "source": source,
        "id": notification.entry_id,
        "time": data["changed_at"],
        "subject": data["check_id"],
        "datacontenttype": "application/json",
        "data": data,
    }


def cloudevent_body(notification: Notification, source: str) -> bytes:
    """The exact bytes sent (and signed): sorted keys, no spaces, so they never vary."""
    return json.dumps(
        cloudevent(notification, source), sort_keys=True, separators=(",", ":")
    ).encode()


def signature(key: bytes, body: bytes) -> str:
    """The X-Assay-Signature value: ``sha256=`` and the hex HMAC-SHA256 of the body."""
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


# --- Slack incoming webhook ------------------------------------------------------------------
_EMOJI = {
    VerdictKind.TRUE: ":white_check_mark:",
    VerdictKind.FALSE: ":red_circle:",
    VerdictKind.POORLY_POSED: ":warning:",
    VerdictKind.CANNOT_DETERMINE: ":grey_question:",
}


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def slack_message(notification: Notification) -> dict[str, Any]:
    """A readable message: check, target, from -> to, the predicate, explanation, run link."""
    data = notification.data
    emoji = _EMOJI[data.to_verdict]
    change = f"{data.from_verdict.value} → {data.to_verdict.value}"
    headline = f"{emoji} *{_slack_escape(data.check_id)}* on *{_slack_escape(data.target)}*: "
    headline += f"{change}"
    body = f">{_slack_escape(_cut(data.text, SLACK_TEXT_CHARS))}"
    if data.explanation:
        body += "\n" + _slack_escape(_cut(data.explanation, SLACK_EXPLANATION_CHARS))
    run = f"<{data.run_url}|run {data.run_id}>" if data.run_url else f"run {data.run_id}"
    when = data.changed_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return {
        "text": f"{data.check_id} on {data.target}: {change}",
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": headline}},
            {"type": "section", "text": {"type": "mrkdwn", "text": body}},
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": f"{run} · {data.source} · {when}"}],
            },
        ],
    }
