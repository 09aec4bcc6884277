"""API abuse against a real `assay api` process: bad ids, paths outside the roots, huge
bodies, missing or wrong tokens, kubeconfig paths. Every refusal is a 4xx in the error shape
and leaves Redis exactly as it was (a changed key after a refusal is a half-stored record)."""

from __future__ import annotations

import urllib.parse
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
HEADERS = auth(WRITE_TOKEN)


def status_class(response: httpx.Response) -> str:
    return f"http {response.status_code // 100}xx"


def send(api: ApiServer, method: str, path: str, body: Any = None, **kw: Any) -> httpx.Response:
    headers = kw.pop("headers", HEADERS)
    return httpx.request(method, api.url + path, headers=headers, json=body, timeout=15, **kw)


def refused_and_unchanged(
    ledger: Ledger, watch: StoreWatch, response_of: Any, family: str = FAMILY
) -> httpx.Response:
    """Send one request; it must be refused (4xx, error shape) and change nothing in Redis."""
    before = watch.state()
    response: httpx.Response = response_of()
    changed = int(watch.state() != before)
    ledger.case(family, status_class(response), half_stored=changed)
    assert 400 <= response.status_code < 500, (response.status_code, response.text[:500])
    assert response.json()["error"]["message"], response.text
    assert not changed, "a refused request changed the store"
    return response


def evaluation(**fields: Any) -> dict[str, Any]:
    return {"text": PREDICATE, "target": {"type": "snapshot", "path": "x"}, **fields}


def cases(roots: Path) -> dict[str, tuple[str, str, Any, dict[str, str]]]:
    """name -> (method, path, body, headers)."""
    outside = ["/", "/etc", "../..", "{roots}/../..", "{roots}/to-etc", "/proc/self"]
    table: dict[str, tuple[str, str, Any, dict[str, str]]] = {
        f"snapshot outside the roots: {p}": (
            "POST", "/v1/evaluations",
            evaluation(target={"type": "snapshot", "path": p.format(roots=roots)}), HEADERS,
        )
        for p in outside
    }  # fmt: skip
    table.update(
        {
            f"batch glob outside the roots: {g}": (
                "POST", "/v1/batches",
                {"text": PREDICATE, "snapshots": g.format(roots=roots)}, HEADERS,
            )
            for g in ("/etc/*", "{roots}/../*", "/*")
        }
    )  # fmt: skip
    table.update(
        {
            "kubeconfig path over HTTP": (
                "POST", "/v1/evaluations",
                evaluation(target={"type": "context", "context": "prod",
                                   "kubeconfig": "/etc/kubernetes/admin.conf"}), HEADERS,
            ),
            "no token": ("POST", "/v1/evaluations", evaluation(), {}),
            "read token on a write": ("POST", "/v1/evaluations", evaluation(), auth(READ_TOKEN)),
            "forged token": ("POST", "/v1/evaluations", evaluation(), auth("x" * 32)),
            "huge body (2 MB predicate)": (
                "POST", "/v1/evaluations", evaluation(text="a" * 2_000_000), HEADERS,
            ),
            "deeply nested body": (
                "POST", "/v1/evaluations", evaluation(labels=nested(200)), HEADERS,
            ),
            "schedule with a colon id": (
                "POST", "/v1/schedules",
                {"name": "a:b", "predicate": PREDICATE, "interval_seconds": 3600}, HEADERS,
            ),
            "schedule outside the roots": (
                "POST", "/v1/schedules",
                {"name": "evil", "predicate": PREDICATE, "interval_seconds": 3600,
                 "snapshots": ["/etc"]}, HEADERS,
            ),
        }
    )  # fmt: skip
    return table


def nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"k": value}
    return value


NAMES = list(cases(Path("/roots")))


@pytest.mark.parametrize("name", NAMES)
def test_abusive_requests_are_refused_and_store_nothing(
    ledger: Ledger, api: ApiServer, api_roots: Path, store_watch: StoreWatch, name: str
) -> None:
    method, path, body, headers = cases(api_roots)[name]
    refused_and_unchanged(
        ledger, store_watch, lambda: send(api, method, path, body, headers=headers)
    )


READ_PATHS = ("/v1/runs/{}", "/v1/checks/{}", "/v1/checks/{}/history", "/v1/batches/{}",
              "/v1/schedules/{}")  # fmt: skip


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(value=hostile_ids().filter(bool), template=st.sampled_from(READ_PATHS))
def test_hostile_ids_on_reads_are_refused_never_5xx(
    ledger: Ledger, api: ApiServer, store_watch: StoreWatch, value: str, template: str
) -> None:
    path = template.format(urllib.parse.quote(value, safe=""))
    before = store_watch.state()
    response = send(api, "GET", path, headers=auth(READ_TOKEN))
    changed = int(store_watch.state() != before)
    ledger.case(FAMILY, status_class(response), half_stored=changed)
    # 3xx: the quoted id held a '/' and the path collapsed (e.g. /v1/checks// -> /v1/checks);
    # the id never reached a handler. Never a 2xx for it, never a 5xx.
    assert 300 <= response.status_code < 500, (value, response.status_code, response.text)
    assert not changed


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(value=hostile_ids().filter(bool), field=st.sampled_from(["check_id", "run_id"]))
def test_hostile_ids_on_submit_are_refused_and_store_nothing(
    ledger: Ledger, api: ApiServer, store_watch: StoreWatch, value: str, field: str
) -> None:
    refused_and_unchanged(
        ledger,
        store_watch,
        lambda: send(api, "POST", "/v1/evaluations", evaluation(**{field: value})),
    )
