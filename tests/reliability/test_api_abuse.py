"""API abuse against a real `assay api` process: bad ids, paths outside the roots, huge
bodies, missing or wrong tokens, kubeconfig paths. Every refusal is a 4xx in the error shape
and leaves Redis exactly as it was (a changed key after a refusal is a half-stored record).

Each abusive request is a valid one (the control test shows the server accepts it) with one
thing changed, and the test asserts the refusal names that thing (its status and error code,
or for an id the sentence saying it is not a valid id): a request refused for some other
reason would prove nothing about the rule under test. The bodies ask for the year 2099, so
an accepted one is held by the scheduler's timers and never queued to a worker.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api_support import READ_TOKEN, WRITE_TOKEN, ApiServer, auth
from tests.boundary_support import hostile_ids
from tests.reliability.conftest import EXAMPLES, StoreWatch
from tests.reliability.ledger import Ledger

FAMILY = "API abuse"
PREDICATE = "every Deployment in namespace prod has at least 2 ready replicas"
HELD = f"on 2099-01-01, {PREDICATE}"  # accepted requests wait for 2099 instead of running
HEADERS = auth(WRITE_TOKEN)
NOT_A_VALID_ID = "is not a valid id"


def status_class(response: httpx.Response) -> str:
    return f"http {response.status_code // 100}xx"


def send(api: ApiServer, method: str, path: str, body: Any = None, **kw: Any) -> httpx.Response:
    headers = kw.pop("headers", HEADERS)
    if isinstance(body, bytes):  # a raw body, sent as it is
        headers = {**headers, "Content-Type": "application/json"}
        return httpx.request(method, api.url + path, headers=headers, content=body, timeout=15)
    return httpx.request(method, api.url + path, headers=headers, json=body, timeout=15, **kw)


def refused_and_unchanged(
    ledger: Ledger, watch: StoreWatch, response_of: Any, family: str = FAMILY
) -> httpx.Response:
    """Send one request; it must be refused (4xx, error shape) and change nothing in Redis."""
    before = watch.state()
    response: httpx.Response = response_of()
    changed = watch.state() != before
    refused = 400 <= response.status_code < 500
    ledger.case(
        family,
        status_class(response),
        half_stored=int(refused and changed),
        abuse_accepted=int(200 <= response.status_code < 300),
    )
    assert refused, (response.status_code, response.text[:500])
    assert response.json()["error"]["message"], response.text
    assert not changed, "a refused request changed the store"
    return response


# --- valid requests, and each with one thing wrong ------------------------------------------


def snapshot(path: str) -> dict[str, str]:
    return {"type": "snapshot", "path": path}


KUBECONFIG_CONTEXT = {
    "type": "context",
    "context": "prod",
    "kubeconfig": "/etc/kubernetes/admin.conf",
}


@dataclass(frozen=True)
class Valid:
    """Bodies the suite's API accepts, inside its snapshot roots."""

    roots: Path

    @property
    def target(self) -> dict[str, str]:
        return snapshot(str(self.roots / "cluster-000"))

    def evaluation(self, **fields: Any) -> dict[str, Any]:
        return {"text": HELD, "target": self.target, **fields}

    def batch(self, *extra_targets: dict[str, Any]) -> dict[str, Any]:
        return {"text": HELD, "targets": [self.target, *extra_targets]}

    def schedule(self, name: str = "abuse", **targets: Any) -> dict[str, Any]:
        chosen = targets or {"snapshots": [str(self.roots / "cluster-*")]}
        return {"name": name, "predicate": HELD, "interval_seconds": 3600, "targets": chosen}


@dataclass(frozen=True)
class Abuse:
    """One request and the refusal it must get: status and error code."""

    method: str
    path: str
    body: Any
    status: int
    code: str
    headers: dict[str, str] | None = None


def nested_body(valid: Valid, depth: int) -> bytes:
    """A valid evaluation whose budget is ``depth`` nested lists, under the body-size limit."""
    fields = json.dumps(valid.evaluation())[:-1]
    return f'{fields}, "budget": {"[" * depth}{"]" * depth}}}'.encode()


def cases(roots: Path) -> dict[str, Abuse]:
    valid = Valid(roots)
    outside = ["/", "/etc", "../..", "{roots}/../..", "{roots}/to-etc", "/proc/self"]
    table = {
        f"snapshot outside the roots: {p}": Abuse(
            "POST", "/v1/evaluations",
            valid.evaluation(target=snapshot(p.format(roots=roots))), 404,
            "snapshot_outside_roots",
        )
        for p in outside
    }  # fmt: skip
    table.update(
        {
            f"batch target outside the roots: {p}": Abuse(
                "POST", "/v1/batches", valid.batch(snapshot(p.format(roots=roots))), 404,
                "snapshot_outside_roots",
            )
            for p in ("/etc", "{roots}/to-etc")
        }
    )  # fmt: skip
    table.update(
        {
            f"schedule snapshots outside the roots: {p}": Abuse(
                "POST", "/v1/schedules", valid.schedule(snapshots=[p.format(roots=roots)]), 404,
                "snapshot_outside_roots",
            )
            for p in ("/etc", "/etc/*")
        }
    )  # fmt: skip
    table["schedule snapshots climbing with '..'"] = Abuse(
        "POST", "/v1/schedules", valid.schedule(snapshots=[f"{roots}/../*"]), 422,
        "validation_error",
    )  # fmt: skip
    table.update(
        {
            "kubeconfig path over HTTP": Abuse(
                "POST", "/v1/evaluations", valid.evaluation(target=KUBECONFIG_CONTEXT), 422,
                "kubeconfig_not_allowed",
            ),
            "kubeconfig path in a batch": Abuse(
                "POST", "/v1/batches", valid.batch(KUBECONFIG_CONTEXT), 422,
                "kubeconfig_not_allowed",
            ),
            "kubeconfig path in a schedule": Abuse(
                "POST", "/v1/schedules",
                valid.schedule(contexts=["prod"], kubeconfig="/etc/kubernetes/admin.conf"), 422,
                "kubeconfig_not_allowed",
            ),
            "no token": Abuse(
                "POST", "/v1/evaluations", valid.evaluation(), 401, "missing_token", {}
            ),
            "read token on a write": Abuse(
                "POST", "/v1/evaluations", valid.evaluation(), 403, "insufficient_scope",
                auth(READ_TOKEN),
            ),
            "forged token": Abuse(
                "POST", "/v1/evaluations", valid.evaluation(), 401, "invalid_token",
                auth("x" * 32),
            ),
            "huge body (a valid request padded to 2 MB)": Abuse(
                "POST", "/v1/evaluations",
                json.dumps(valid.evaluation()).encode() + b" " * 2_000_000, 413, "body_too_large",
            ),
            "deeply nested body (30,000 levels in 60 KB)": Abuse(
                "POST", "/v1/evaluations", nested_body(valid, 30_000), 400, "bad_request",
            ),
        }
    )  # fmt: skip
    return table


NAMES = list(cases(Path("/roots")))


def test_the_valid_requests_the_cases_start_from_are_accepted(
    ledger: Ledger, api: ApiServer, api_roots: Path
) -> None:
    """The control: without their one fault, the abusive requests' bodies are accepted."""
    valid = Valid(api_roots)
    for method, path, body, status in (
        ("POST", "/v1/evaluations", valid.evaluation(), 202),
        ("POST", "/v1/batches", valid.batch(), 202),
        ("POST", "/v1/schedules", valid.schedule("abuse-control"), 201),
    ):
        response = send(api, method, path, body)
        ledger.case(FAMILY, f"control {status_class(response)}")
        assert response.status_code == status, (path, response.text[:500])


@pytest.mark.parametrize("name", NAMES)
def test_abusive_requests_are_refused_for_their_fault_and_store_nothing(
    ledger: Ledger, api: ApiServer, api_roots: Path, store_watch: StoreWatch, name: str
) -> None:
    case = cases(api_roots)[name]
    headers = HEADERS if case.headers is None else case.headers
    response = refused_and_unchanged(
        ledger, store_watch, lambda: send(api, case.method, case.path, case.body, headers=headers)
    )
    error = response.json()["error"]
    assert (response.status_code, error["code"]) == (case.status, case.code), error


# --- hostile ids: each in an otherwise valid request ------------------------------------------


def id_segment(value: str) -> str:
    """``value`` as one path segment: every reserved character and every dot escaped, so
    neither the client nor the server can read it as a separator or a dot segment."""
    return urllib.parse.quote(value, safe="").replace(".", "%2E")


def refused_as_invalid_id(
    ledger: Ledger, watch: StoreWatch, response_of: Any, field: str, value: str
) -> None:
    """The request must be refused (422) because ``field`` is not a valid id, and store nothing;
    anything else (accepted, not found, refused for another reason) means the id got through."""
    before = watch.state()
    response: httpx.Response = response_of()
    changed = watch.state() != before
    message = str(response.json().get("error", {}).get("message", "")) if response.text else ""
    named = response.status_code == 422 and f"{field} " in message and NOT_A_VALID_ID in message
    ledger.case(
        FAMILY,
        status_class(response),
        hostile_id_accepted=int(not named),
        half_stored=int(400 <= response.status_code < 500 and changed),
        abuse_accepted=int(200 <= response.status_code < 300),
    )
    assert named, (field, value, response.status_code, response.text[:500])
    assert not changed, "a refused request changed the store"


READS = (("/v1/runs/{}", "run_id"), ("/v1/checks/{}", "check_id"),
         ("/v1/checks/{}/history", "check_id"), ("/v1/batches/{}", "batch_id"),
         ("/v1/batches/{}/results", "batch_id"), ("/v1/schedules/{}", "schedule_id"),
         ("/v1/checks/{}/probe", "check_id"))  # fmt: skip
WRITES = (("PATCH", "/v1/schedules/{}", {"predicate": HELD}, "schedule_id"),
          ("POST", "/v1/schedules/{}/pause", None, "schedule_id"),
          ("DELETE", "/v1/schedules/{}", None, "schedule_id"),
          ("DELETE", "/v1/checks/{}/probe", None, "check_id"),
          ("POST", "/v1/checks/{}/probe/test", None, "check_id"))  # fmt: skip
ID_SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck)
)


@ID_SETTINGS
@given(value=hostile_ids().filter(bool), read=st.sampled_from(READS))
def test_hostile_ids_on_reads_are_refused_as_invalid(
    ledger: Ledger, api: ApiServer, store_watch: StoreWatch, value: str, read: tuple[str, str]
) -> None:
    template, field = read
    path = template.format(id_segment(value))
    if "/" in value:  # the server decodes %2F before routing: no route, no handler, no id
        response = send(api, "GET", path, headers=auth(READ_TOKEN))
        ledger.case(FAMILY, status_class(response))
        assert 300 <= response.status_code < 500, (value, response.status_code, response.text)
        return
    refused_as_invalid_id(
        ledger,
        store_watch,
        lambda: send(api, "GET", path, headers=auth(READ_TOKEN)),
        field,
        value,
    )


@ID_SETTINGS
@given(
    value=hostile_ids().filter(lambda v: bool(v) and "/" not in v), write=st.sampled_from(WRITES)
)
def test_hostile_ids_on_writes_are_refused_as_invalid(
    ledger: Ledger,
    api: ApiServer,
    store_watch: StoreWatch,
    value: str,
    write: tuple[str, str, Any, str],
) -> None:
    method, template, body, field = write
    path = template.format(id_segment(value))
    refused_as_invalid_id(ledger, store_watch, lambda: send(api, method, path, body), field, value)


@ID_SETTINGS
@given(value=hostile_ids(), field=st.sampled_from(["check_id", "run_id"]))
def test_hostile_ids_on_submit_are_refused_as_invalid(
    ledger: Ledger,
    api: ApiServer,
    api_roots: Path,
    store_watch: StoreWatch,
    value: str,
    field: str,
) -> None:
    body = Valid(api_roots).evaluation(**{field: value})
    refused_as_invalid_id(
        ledger,
        store_watch,
        lambda: send(api, "POST", "/v1/evaluations", body),
        field,
        value,
    )
