"""The direct path's HTTP client reads every framing an endpoint may use, refuses what is
not HTTP without hanging or guessing, and keeps TLS timeouts working
(workers/core/keepalive_http.py speaks HTTP/1.1 itself since issue 15).

The servers here write raw bytes, so each test controls the answer exactly as a
gateway, an old proxy or a hostile endpoint would send it.
"""

from __future__ import annotations

import http.server
import json
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.tcp_support import read_request, tcp_server
from workers.core.keepalive_http import MAX_HEADERS, KeepAliveClient, TransportFailure

BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
HEADERS = {"Authorization": "Bearer k", "Content-Type": "application/json"}
OK = b'{"ok": true}'


@contextmanager
def raw_server(
    answers: Callable[[int], bytes | None], *, close_after: bool = False
) -> Iterator[tuple[str, list[int]]]:
    """Answers the n-th request on a connection with ``answers(n)`` (None: no answer, hold).

    Yields the URL and, per accepted connection, how many requests it carried.
    """

    def serve(conn: socket.socket, stop: threading.Event, tally: Callable[[], int]) -> None:
        while not stop.is_set() and read_request(conn):
            reply = answers(tally())
            if reply is None:
                stop.wait(10)
                return
            conn.sendall(reply)
            if close_after:
                return

    with tcp_server(serve) as (port, per_connection):
        yield f"http://127.0.0.1:{port}/v1/chat/completions", per_connection


def post(url: str, timeout: float = 5) -> tuple[int, bytes]:
    reply = KeepAliveClient().post_json(url, BODY, HEADERS, timeout)
    return reply.status_code, reply.content


def test_a_chunked_answer_is_read_whole_and_the_connection_kept() -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"
        b'5;ext=1\r\n{"ok"\r\n7\r\n: true}\r\n0\r\nX-Trailer: t\r\n\r\n'
    )
    with raw_server(lambda n: chunked) as (url, connections):
        client = KeepAliveClient()
        for _ in range(3):
            reply = client.post_json(url, BODY, HEADERS, 5)
            assert reply.status_code == 200 and reply.json() == {"ok": True}
    assert connections == [3]


def test_an_answer_without_a_length_is_read_to_the_close_and_the_next_call_reconnects() -> None:
    old_style = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + OK
    with raw_server(lambda n: old_style, close_after=True) as (url, connections):
        client = KeepAliveClient()
        assert client.post_json(url, BODY, HEADERS, 5).json() == {"ok": True}
        assert client.post_json(url, BODY, HEADERS, 5).json() == {"ok": True}
    assert connections == [1, 1]


def test_interim_answers_are_skipped_and_repeated_headers_are_joined() -> None:
    reply = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"
        b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\nVia: a\r\nvia: b\r\n"
        b"Content-Length: 2\r\n\r\n{}"
    )
    with raw_server(lambda n: reply) as (url, _):
        answer = KeepAliveClient().post_json(url, BODY, HEADERS, 5)
    assert answer.status_code == 429
    assert answer.headers.get("RETRY-AFTER") == "7" and answer.headers["retry-after"] == "7"
    assert answer.headers.get("Via") == "a, b"
    assert "Link" not in answer.headers  # the interim answer's headers are not the answer's


def test_connection_close_drops_the_connection_after_the_answer() -> None:
    closing = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 12\r\n\r\n" + OK
    with raw_server(lambda n: closing) as (url, connections):
        client = KeepAliveClient()
        client.post_json(url, BODY, HEADERS, 5)
        client.post_json(url, BODY, HEADERS, 5)
    assert connections == [1, 1]


def test_bytes_after_an_answer_make_the_next_call_open_a_new_connection() -> None:
    """A server that sent more than the answer it framed is out of step: never reuse it."""
    extra = b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n" + OK + b"HTTP/1.1 200 OK\r\n"
    with raw_server(lambda n: extra) as (url, connections):
        client = KeepAliveClient()
        for _ in range(2):
            assert client.post_json(url, BODY, HEADERS, 5).json() == {"ok": True}
            time.sleep(0.05)
    assert connections == [1, 1]


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        (b"SSH-2.0-OpenSSH_9.0\r\n\r\n", "not an HTTP/1.x status line"),
        (b"HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n", "not an HTTP/1.x status line"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "not a header line"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\nhello", "bad Content-Length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "bad Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XX", "CRLF"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{}", "bytes short"),
        (b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * (MAX_HEADERS + 1) + b"\r\n", "headers"),
        (b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n", "65536 bytes"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n{}", "body is over"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffff\r\n", "body is over"),
    ],
)
def test_an_answer_that_is_not_http_is_a_connection_failure_not_a_hang(
    reply: bytes, why: str
) -> None:
    with raw_server(lambda n: reply, close_after=True) as (url, _):
        started = time.monotonic()
        with pytest.raises(TransportFailure) as caught:
            post(url, timeout=5)
    assert not caught.value.timed_out and why in str(caught.value)
    assert time.monotonic() - started < 3


def test_a_header_that_would_split_the_request_is_refused_before_anything_is_sent() -> None:
    with raw_server(lambda n: b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") as (url, seen):
        client = KeepAliveClient()
        with pytest.raises(ValueError, match="invalid HTTP header"):
            client.post_json(url, BODY, {"Authorization": "Bearer k\r\nX-Evil: 1"}, 5)
    assert seen == []


def test_a_server_that_stops_mid_answer_is_a_timeout_within_the_limit() -> None:
    """The kernel's timeout on a plain socket ends a read that never completes."""
    with raw_server(lambda n: None) as (url, _):
        started = time.monotonic()
        with pytest.raises(TransportFailure) as caught:
            post(url, timeout=0.5)
    assert caught.value.timed_out and time.monotonic() - started < 2.5


# --- TLS ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("tls")
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(folder / "key.pem"), "-out", str(folder / "cert.pem"),
        ],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return folder / "cert.pem", folder / "key.pem"


@contextmanager
def tls_server(certificate: tuple[Path, Path], delay: float) -> Iterator[tuple[str, list[int]]]:
    """An HTTPS endpoint answering every POST after ``delay`` seconds; connections counted."""
    opened: list[int] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            opened.append(1)

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            time.sleep(delay)
            self.send_response(200)
            self.send_header("Content-Length", str(len(OK)))
            self.end_headers()
            self.wfile.write(OK)

        def log_message(self, *args: object) -> None:
            pass

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"https://127.0.0.1:{httpd.server_address[1]}/v1/chat/completions", opened
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_tls_answers_are_read_over_one_verified_kept_alive_connection(
    certificate: tuple[Path, Path],
) -> None:
    trusted = ssl.create_default_context(cafile=str(certificate[0]))
    with tls_server(certificate, 0.0) as (url, opened):
        client = KeepAliveClient(trusted)
        for _ in range(3):
            assert client.post_json(url, BODY, HEADERS, 5).json() == {"ok": True}
        with pytest.raises(TransportFailure) as caught:  # an unknown certificate is refused
            KeepAliveClient(ssl.create_default_context()).post_json(url, BODY, HEADERS, 5)
    assert "CERTIFICATE_VERIFY_FAILED" in str(caught.value)
    assert len(opened) == 1  # the three calls shared one; the refused handshake got none


def test_a_tls_endpoint_that_does_not_answer_in_time_is_a_timeout_not_a_hang(
    certificate: tuple[Path, Path],
) -> None:
    trusted = ssl.create_default_context(cafile=str(certificate[0]))
    with tls_server(certificate, 3.0) as (url, _):
        client = KeepAliveClient(trusted)
        started = time.monotonic()
        with pytest.raises(TransportFailure) as caught:
            client.post_json(url, BODY, HEADERS, 0.5)
    assert caught.value.timed_out and time.monotonic() - started < 2.5
