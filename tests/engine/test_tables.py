"""Tables: kubectl-like columns, streaming under the cap, CRD printer columns."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import EXAMPLES
from workers.engine.toolsets.snapshot_backend import SnapshotBackend
from workers.engine.toolsets.tables import (
    jsonpath_values,
    pod_status,
    printer_columns,
    render_table,
)

SNAPSHOTS = EXAMPLES / "snapshots"


def test_tables_are_deterministic() -> None:
    backend = SnapshotBackend(SNAPSHOTS / "prod-eu")
    pods = backend.resolve("po")
    first = render_table(
        backend.list_objects(pods, None), "Pod", limit_chars=6000, with_namespace=True
    )
    second = render_table(
        backend.list_objects(pods, None), "Pod", limit_chars=6000, with_namespace=True
    )
    assert first == second


def test_pod_table_has_kubectl_columns() -> None:
    backend = SnapshotBackend(SNAPSHOTS / "staging-us")
    table = render_table(
        backend.list_objects(backend.resolve("po"), "prod"),
        "Pod",
        limit_chars=6000,
        with_namespace=False,
    )
    lines = table.text.splitlines()
    assert lines[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "NODE", "IMAGES"]
    crashing = next(line for line in lines if line.startswith("api-6b7f9d8c4-9sdlq"))
    assert crashing.split()[1:4] == ["0/1", "CrashLoopBackOff", "7"]
    assert (table.shown, table.total, table.truncated) == (2, 2, False)


def test_deployment_table_shows_ready_over_desired() -> None:
    backend = SnapshotBackend(SNAPSHOTS / "staging-us")
    table = render_table(
        backend.list_objects(backend.resolve("deploy"), "prod"),
        "Deployment",
        limit_chars=6000,
        with_namespace=False,
    )
    header, row = table.text.splitlines()
    assert header.split() == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "IMAGES"]
    assert row.split()[:4] == ["api", "1/2", "2", "1"]


def test_generic_table_uses_phase_or_ready_condition() -> None:
    objects: list[dict[str, Any]] = [
        {
            "metadata": {"name": "a"},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]},
        },
        {"metadata": {"name": "b"}, "status": {"phase": "Bound"}},
    ]
    text = render_table(objects, "Thing", limit_chars=1000, with_namespace=False).text
    assert text.splitlines() == ["NAME  STATUS", "a     Ready=False", "b     Bound"]


def test_empty_columns_are_left_out() -> None:
    objects = [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]
    text = render_table(objects, "Thing", limit_chars=1000, with_namespace=False).text
    assert text.splitlines() == ["NAME", "a", "b"]


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ({"phase": "Running"}, "Running"),
        (
            {
                "phase": "Running",
                "containerStatuses": [{"state": {"waiting": {"reason": "CrashLoopBackOff"}}}],
            },
            "CrashLoopBackOff",
        ),
        (
            {"phase": "Failed", "containerStatuses": [{"state": {"terminated": {"exitCode": 2}}}]},
            "ExitCode:2",
        ),
        (
            {
                "phase": "Pending",
                "initContainerStatuses": [{"state": {"waiting": {"reason": "ImagePullBackOff"}}}],
            },
            "Init:ImagePullBackOff",
        ),
        ({"phase": "Failed", "reason": "Evicted"}, "Evicted"),
    ],
)
def test_pod_status_column(status: dict[str, Any], expected: str) -> None:
    assert pod_status({"status": status}) == expected


def many_pods(count: int, consumed: list[int]) -> Iterator[dict[str, Any]]:
    for index in range(count):
        consumed[0] += 1
        yield {
            "kind": "Pod",
            "metadata": {"name": f"pod-{index:05d}", "namespace": "big"},
            "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "img:1"}]},
            "status": {
                "phase": "Running",
                "containerStatuses": [{"ready": True, "restartCount": 0}],
            },
        }


def test_a_huge_list_is_streamed_rows_until_the_cap_then_only_counted() -> None:
    consumed = [0]
    table = render_table(
        many_pods(20_000, consumed),
        "Pod",
        limit_chars=2000,
        with_namespace=True,
        footer=lambda total: f"{total} pods.",
    )
    assert consumed[0] == 20_000
    assert table.total == 20_000
    assert 0 < table.shown < 100
    assert table.truncated
    assert len(table.text) <= 2000
    assert f"... truncated, {20_000 - table.shown} more rows not shown (20000 in all)" in table.text
    assert table.text.endswith("20000 pods.")
    # rows shown are the first ones, complete
    assert table.text.splitlines()[1].startswith("big")
    assert "pod-00000" in table.text


def test_long_cells_are_cut_with_an_ellipsis() -> None:
    objects = [{"metadata": {"name": "n" * 300}}]
    text = render_table(objects, "Thing", limit_chars=5000, with_namespace=False).text
    assert "…" in text
    assert max(len(line) for line in text.splitlines()) <= 100


def test_printer_columns_and_jsonpath() -> None:
    backend = SnapshotBackend(SNAPSHOTS / "prod-eu")
    crd = backend.get(backend.resolve("crd"), "certificates.cert-manager.io", None)
    columns = printer_columns(crd, "v1")
    assert [name for name, _ in columns] == ["READY", "SECRET"]  # priority>0 and dates dropped
    cert = backend.get(backend.resolve("cert"), "api-example-com", "prod")
    assert [cell(cert) for _, cell in columns] == ["True", "api-example-com-tls"]
    assert jsonpath_values(cert, ".spec.dnsNames[0]") == ["api.example.com"]
    assert jsonpath_values(cert, ".spec.dnsNames[*]") == ["api.example.com"]
    assert jsonpath_values(cert, ".status.conditions[?(@.type=='Nope')].status") == []
    assert jsonpath_values(cert, "{weird}") == []
