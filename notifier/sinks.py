"""The HTTP side of each sink: one POST per delivery, and what its answer means.

A delivery either returns (the sink accepted it: any 2xx) or raises
:class:`DeliveryError`, which says whether trying again can help: connection
failures, timeouts, 408, 425, 429 and 5xx can; other 4xx answers (a wrong URL,
a revoked Slack hook, a payload the receiver refuses) cannot, and go to the
dead letters at once. Error texts name the sink and the status, never a URL:
a Slack URL is a credential and a webhook URL may carry one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from notifier.events import (
    CLOUDEVENTS_CONTENT_TYPE,
    Notification,
    cloudevent_body,
    signature,
    slack_message,
)
from schemas.notify import (
    IDEMPOTENCY_HEADER,
    SIGNATURE_HEADER,
    AlertmanagerSink,
    SlackSink,
    WebhookSink,
)

if TYPE_CHECKING:
    import httpx

RETRYABLE_STATUSES = {408, 425, 429}
RETRY_AFTER_CAP_SECONDS = 300.0


class DeliveryError(Exception):
    """A sink did not take a delivery; ``retryable`` says whether another try may."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after


def _retry_after(response: httpx.Response) -> float | None:
    raw = response.headers.get("retry-after")
    if raw is None:
        return None
    try:
        return min(max(float(raw), 0.0), RETRY_AFTER_CAP_SECONDS)
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff


def post(http: httpx.Client, sink: str, url: str, content: bytes, headers: dict[str, str]) -> None:
    """POST ``content``; return on 2xx, raise :class:`DeliveryError` otherwise."""
    import httpx

    try:
        response = http.post(url, content=content, headers=headers)
    except httpx.TimeoutException:
        raise DeliveryError(f"sink {sink}: no answer in time", retryable=True) from None
    except httpx.TransportError as exc:
        raise DeliveryError(
            f"sink {sink}: could not connect ({type(exc).__name__})", retryable=True
        ) from None
    if 200 <= response.status_code < 300:
        return
    status = response.status_code
    raise DeliveryError(
        f"sink {sink}: answered HTTP {status}",
        retryable=status >= 500 or status in RETRYABLE_STATUSES,
        status=status,
        retry_after=_retry_after(response),
    )


class Sender(Protocol):
    """Sends one notification to one sink, raising :class:`DeliveryError` when it fails."""

    def deliver(self, notification: Notification) -> None: ...


class WebhookSender:
    """CloudEvents 1.0 structured JSON, signed, with an idempotency key per change and sink."""

    def __init__(self, name: str, config: WebhookSink, http: httpx.Client) -> None:
        self.name = name
        self.config = config
        self.http = http
        if config.hmac_key is None:
            raise ValueError(f"sink {name} has no hmac_key")
        self._key = config.hmac_key.get_secret_value().encode()

    def deliver(self, notification: Notification) -> None:
        body = cloudevent_body(notification, self.config.source)
        headers = {
            "Content-Type": CLOUDEVENTS_CONTENT_TYPE,
            SIGNATURE_HEADER: signature(self._key, body),
            IDEMPOTENCY_HEADER: notification.idempotency_key,
        }
        post(self.http, self.name, self.config.url, body, headers)


class SlackSender:
    """A Slack incoming webhook: a readable message per change."""

    def __init__(self, name: str, config: SlackSink, http: httpx.Client) -> None:
        self.name = name
        self.http = http
        if config.url is None:
            raise ValueError(f"sink {name} has no url")
        self._url = config.url.get_secret_value()

    def deliver(self, notification: Notification) -> None:
        import json

        body = json.dumps(slack_message(notification)).encode()
        post(self.http, self.name, self._url, body, {"Content-Type": "application/json"})


class AlertmanagerClient:
    """POST /api/v2/alerts on one Alertmanager (or a load balancer in front of several)."""

    def __init__(self, name: str, config: AlertmanagerSink, http: httpx.Client) -> None:
        self.name = name
        self.http = http
        self._url = config.url.rstrip("/") + "/api/v2/alerts"

    def post_alerts(self, alerts: list[dict[str, Any]]) -> None:
        import json

        if alerts:
            body = json.dumps(alerts).encode()
            post(self.http, self.name, self._url, body, {"Content-Type": "application/json"})
