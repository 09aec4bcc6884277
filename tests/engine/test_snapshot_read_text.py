"""The snapshot backend reads a file as ``Path.read_text`` would, with fewer system calls.

A snapshot is a cluster's word; reading it must never cut it short, change its
text, or hang on a file that is not a file.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from workers.engine.toolsets.snapshot_backend import SnapshotBackend, read_text


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"kind: Pod\n",
        b"kind: Pod\r\nmetadata:\r\n  name: a\r\n",
        b"a: 1\rb: 2\r",
        b"\xef\xbb\xbfkind: Pod\n",  # a byte-order mark stays, as read_text keeps it
        "name: caf\u00e9 \u4e2d\n".encode(),
        b"x: " + b"y" * 200_000 + b"\n",
    ],
    ids=["empty", "lf", "crlf", "cr", "bom", "utf8", "large"],
)
def test_the_text_is_what_read_text_returns(tmp_path: Path, raw: bytes) -> None:
    file = tmp_path / "objects.yaml"
    file.write_bytes(raw)
    assert read_text(file, len(raw)) == file.read_text(encoding="utf-8")


def test_a_file_that_grew_since_it_was_listed_is_read_whole(tmp_path: Path) -> None:
    file = tmp_path / "objects.yaml"
    file.write_bytes(b"a: 1\n" * 50_000)
    assert read_text(file, 10) == file.read_text(encoding="utf-8")


def test_text_that_is_not_utf8_is_refused_not_guessed(tmp_path: Path) -> None:
    file = tmp_path / "objects.yaml"
    file.write_bytes(b"name: \xff\xfe\n")
    with pytest.raises(UnicodeDecodeError):
        read_text(file, 9)


def test_a_fifo_in_place_of_a_file_does_not_hang_the_read(tmp_path: Path) -> None:
    fifo = tmp_path / "objects.yaml"
    os.mkfifo(fifo)
    result: list[object] = []
    reader = threading.Thread(target=lambda: result.append(read_text(fifo, 0)), daemon=True)
    reader.start()
    reader.join(timeout=5)
    assert not reader.is_alive() and result == [""]


def test_a_snapshot_with_crlf_files_serves_its_objects(tmp_path: Path) -> None:
    (tmp_path / "pods.yaml").write_bytes(
        b"apiVersion: v1\r\nkind: Pod\r\nmetadata:\r\n  name: web\r\n  namespace: prod\r\n"
    )
    backend = SnapshotBackend(tmp_path)
    assert backend.problems == []
    pods = backend.list_objects(backend.resolve("Pod"), namespace="prod")
    assert [pod["metadata"]["name"] for pod in pods] == ["web"]
