"""What a sink is sent about one change: the event data, its stable identity, its renderings.

Everything here is a function of the change and what the store holds about its
run, never of the moment of sending, so a redelivery after a crash carries the
same bytes, the same CloudEvents ``id`` and the same idempotency key.

A spend-ceiling event (a ceiling at 80% or 100%, workers/fleet/spend.py) travels the
same way as a change: a :class:`Notification` whose ``data`` is a
:class:`~schemas.spend.SpendEventData`, sent as CloudEvent type
``assay.spend.threshold``, a Slack message, or an Alertmanager alert.
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
from schemas.notify import EVENT_TYPE, AlertmanagerSink, ChangeEventData
from schemas.spend import SPEND_EVENT_TYPE, SpendEventData, dollars
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
    data: ChangeEventData | SpendEventData
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
    event = notification.data
    data = event.model_dump(mode="json")
    if isinstance(event, SpendEventData):
        kind, time, subject = SPEND_EVENT_TYPE, data["at"], event.ceiling_name()
    else:
        kind, time, subject = EVENT_TYPE, data["changed_at"], data["check_id"]
    return {
        "specversion": "1.0",
        "type": kind,
        "source": source,
        "id": notification.entry_id,
        "time": time,
        "subject": subject,
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
    if isinstance(data, SpendEventData):
        return _spend_slack_message(data)
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


# --- spend ceilings ---------------------------------------------------------------------------
SPEND_ALERTNAME = "AssaySpendCeiling"


def spend_notification(
    settings: AssaySettings, sink: str, entry_id: str, event: SpendEventData
) -> Notification:
    """A spend-ceiling event for ``sink``; its key is stable per event and sink."""
    key = idempotency_key(settings.key_prefix, sink, f"spend/{entry_id}")
    return Notification(sink, entry_id, event, key)


def _amount(event: SpendEventData, value: float) -> str:
    return dollars(value) if event.resource == "cost_usd" else f"{value:,.0f} tokens"


def spend_headline(event: SpendEventData) -> str:
    """``fleet tokens per hour ceiling at 80%: 40,210 tokens of 50,000 (2026-01-01T10)``."""
    what = "reached" if event.threshold == 100 else "at 80%"
    return (
        f"{event.ceiling_name()} ceiling {what}: {_amount(event, event.spent)} of "
        f"{_amount(event, event.limit)} ({event.period})"
    )


def _spend_slack_message(event: SpendEventData) -> dict[str, Any]:
    emoji = ":money_with_wings:" if event.threshold == 100 else ":warning:"
    stopping = (
        "Model calls under it are now stopped (their runs end cannot_determine) until the "
        "period rolls over"
        if event.threshold == 100
        else "Model calls stop once it is reached"
    )
    if event.scope == "schedule" and event.threshold == 100:
        stopping += "; the schedule's fires are skipped until the next UTC day"
    headline = f"{emoji} *{_slack_escape(spend_headline(event))}*"
    return {
        "text": spend_headline(event),
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": headline}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": stopping + "."}]},
        ],
    }


def spend_alert(config: AlertmanagerSink, event: SpendEventData) -> dict[str, Any]:
    """An Alertmanager alert for a spend event: firing until its period ends (then the
    ceiling starts afresh), or for a day for a batch's total."""
    labels = {
        **config.labels,
        "alertname": SPEND_ALERTNAME,
        "scope": event.scope,
        "scope_id": event.scope_id or "",
        "resource": event.resource,
        "threshold": str(event.threshold),
    }
    return {
        "labels": labels,
        "annotations": {"summary": spend_headline(event), "period": event.period},
        "startsAt": _iso(event.at),
        "endsAt": _iso(period_end(event)),
    }


def period_end(event: SpendEventData) -> datetime:
    """When the event's period rolls over (UTC); a batch's total: a day after the event."""
    from datetime import timedelta

    if event.scope == "batch" or event.period == "total":
        return event.at + timedelta(days=1)
    if "T" in event.period:
        start = datetime.strptime(event.period, "%Y-%m-%dT%H").replace(tzinfo=UTC)
        return start + timedelta(hours=1)
    start = datetime.strptime(event.period, "%Y-%m-%d").replace(tzinfo=UTC)
    return start + timedelta(days=1)


def _iso(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")
