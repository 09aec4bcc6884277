"""The direct path's HTTP client keeps what httpx did for it: keep-alive, proxies, redirects,
compressed answers, stale connections and timeouts (workers/core/keepalive_http.py)."""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from workers.core.keepalive_http import (
    MAX_BODY_BYTES,
    KeepAliveClient,
    TransportFailure,
    unsupported_proxy,
)
from workers.core.openai_compat import fast_path_model

BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hello"}]}).encode()
HEADERS = {"Authorization": "Bearer k", "Content-Type": "application/json"}


class Recorder:
    """What a test server saw: each request's line, headers, body and connection."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.connections = 0
        self.lock = threading.Lock()


@contextmanager
def server(behave: Any) -> Iterator[tuple[str, Recorder]]:
    """An HTTP/1.1 server whose POST answers are ``behave(handler, recorder)``."""
    recorder = Recorder()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            with recorder.lock:
                recorder.connections += 1

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            with recorder.lock:
                recorder.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "body": body}
                )
            behave(self, recorder)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", recorder
    finally:
        httpd.shutdown()
        httpd.server_close()


def answer(handler: BaseHTTPRequestHandler, status: int = 200, body: bytes = b'{"ok": true}',
           headers: dict[str, str] | None = None) -> None:  # fmt: skip
    handler.send_response(status)
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def test_posts_reuse_one_connection_and_send_the_body_and_headers_as_given() -> None:
    with server(lambda h, r: answer(h)) as (url, seen):
        client = KeepAliveClient()
        for _ in range(5):
            reply = client.post_json(url + "/v1/chat/completions", BODY, HEADERS, 5)
            assert reply.status_code == 200 and reply.json() == {"ok": True}
    assert seen.connections == 1
    first = seen.requests[0]
    assert first["path"] == "/v1/chat/completions" and first["body"] == BODY
    assert first["headers"]["Authorization"] == "Bearer k"


def test_a_request_goes_out_in_one_write_head_and_body_together(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One socket write per POST (http.client makes two: head, then body)."""
    from workers.core import keepalive_http

    writes: list[bytes] = []
    original = keepalive_http._Wire.send

    def counted(wire: Any, data: bytes) -> None:
        writes.append(bytes(data))
        original(wire, data)

    monkeypatch.setattr(keepalive_http._Wire, "send", counted)
    big = json.dumps({"messages": [{"role": "tool", "content": "x" * 20_000}]}).encode()
    with server(lambda h, r: answer(h)) as (url, seen):
        client = KeepAliveClient()
        for _ in range(3):
            assert (
                client.post_json(url + "/v1/chat/completions", big, HEADERS, 5).status_code == 200
            )
    assert len(writes) == 3
    assert all(w.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n") for w in writes)
    assert all(w.endswith(b"\r\n\r\n" + big) for w in writes)
    assert [r["body"] for r in seen.requests] == [big] * 3
    host = seen.requests[0]["headers"]["Host"]
    assert host == url.removeprefix("http://")  # host:port, as the endpoint expects


def test_a_connection_the_server_closed_while_idle_is_reopened_without_an_error() -> None:
    def close_after(handler: BaseHTTPRequestHandler, recorder: Recorder) -> None:
        answer(handler)
        handler.wfile.flush()
        handler.close_connection = True  # as a server does at its keep-alive timeout

    with server(close_after) as (url, seen):
        client = KeepAliveClient()
        client.post_json(url + "/x", BODY, HEADERS, 5)
        time.sleep(0.2)  # the server has closed its side by now
        assert client.post_json(url + "/x", BODY, HEADERS, 5).status_code == 200
    assert seen.connections == 2 and len(seen.requests) == 2


def test_307_and_308_are_followed_with_the_same_body_other_redirects_are_returned() -> None:
    def redirect(handler: BaseHTTPRequestHandler, recorder: Recorder) -> None:
        if handler.path == "/old":
            answer(handler, 307, b"", {"Location": "/mid"})
        elif handler.path == "/mid":
            answer(handler, 308, b"", {"Location": "/new"})
        elif handler.path == "/moved":
            answer(handler, 302, b"", {"Location": "/new"})
        else:
            answer(handler)

    with server(redirect) as (url, seen):
        client = KeepAliveClient()
        assert client.post_json(url + "/old", BODY, HEADERS, 5).json() == {"ok": True}
        assert [r["path"] for r in seen.requests] == ["/old", "/mid", "/new"]
        assert all(r["body"] == BODY for r in seen.requests)
        assert client.post_json(url + "/moved", BODY, HEADERS, 5).status_code == 302


def test_a_redirect_loop_ends_with_the_redirect_not_a_hang() -> None:
    with server(lambda h, r: answer(h, 307, b"", {"Location": "/again"})) as (url, seen):
        reply = KeepAliveClient().post_json(url + "/again", BODY, HEADERS, 5)
    assert reply.status_code == 307
    assert 1 < len(seen.requests) <= 7


def test_gzip_answers_are_decoded() -> None:
    packed = gzip.compress(b'{"choices": []}')
    with server(lambda h, r: answer(h, 200, packed, {"Content-Encoding": "gzip"})) as (url, _):
        assert KeepAliveClient().post_json(url, BODY, HEADERS, 5).json() == {"choices": []}


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_compressed_answer_is_bounded_once_decoded_too(encoding: str) -> None:
    """A 100 KB body that inflates past MAX_BODY_BYTES (a decompression bomb) is refused
    like an oversized body, not decoded into a worker's memory."""
    import zlib

    bomb = b"\0" * (MAX_BODY_BYTES + 1)
    packed = gzip.compress(bomb, 9) if encoding == "gzip" else zlib.compress(bomb, 9)
    del bomb
    assert len(packed) < 200_000
    bombing = server(lambda h, r: answer(h, 200, packed, {"Content-Encoding": encoding}))
    with bombing as (url, _), pytest.raises(TransportFailure) as caught:
        KeepAliveClient().post_json(url, BODY, HEADERS, 5)
    assert "over" in str(caught.value) and not caught.value.timed_out


def test_a_server_that_does_not_answer_in_time_is_a_timeout() -> None:
    with server(lambda h, r: time.sleep(3)) as (url, _):
        started = time.monotonic()
        with pytest.raises(TransportFailure) as caught:
            KeepAliveClient().post_json(url, BODY, HEADERS, 0.5)
    assert caught.value.timed_out and time.monotonic() - started < 2.5


def test_each_call_on_a_kept_connection_keeps_to_its_own_timeout() -> None:
    """The socket's timeout is set again only when a call's differs from the last: a
    shorter one after a longer (a run near its deadline) still ends the call in time."""
    answers = iter([0.0, 0.0, 3.0, 0.0])

    def behave(handler: BaseHTTPRequestHandler, seen: Recorder) -> None:
        time.sleep(next(answers))
        answer(handler)

    with server(behave) as (url, seen):
        client = KeepAliveClient()
        client.post_json(url, BODY, HEADERS, 30)
        client.post_json(url, BODY, HEADERS, 30)
        started = time.monotonic()
        with pytest.raises(TransportFailure) as caught:
            client.post_json(url, BODY, HEADERS, 0.5)
        assert caught.value.timed_out and time.monotonic() - started < 2.5
        assert client.post_json(url, BODY, HEADERS, 30).status_code == 200
    assert seen.connections == 2  # one kept for the first three calls; the timeout dropped it


def test_nothing_listening_is_a_connection_failure() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(TransportFailure) as caught:
        KeepAliveClient().post_json(f"http://127.0.0.1:{port}/v1", BODY, HEADERS, 2)
    assert not caught.value.timed_out


def test_http_proxy_from_the_environment_gets_the_whole_url_and_its_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with server(lambda h, r: answer(h)) as (proxy, seen):
        monkeypatch.setenv("HTTP_PROXY", proxy.replace("http://", "http://user:p%40ss@"))
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.delenv("http_proxy", raising=False)
        reply = KeepAliveClient().post_json("http://llm.internal:8000/v1/x", BODY, HEADERS, 5)
    assert reply.status_code == 200
    request = seen.requests[0]
    assert request["path"] == "http://llm.internal:8000/v1/x"
    assert request["headers"]["Proxy-Authorization"] == "Basic dXNlcjpwQHNz"  # user:p@ss


def test_no_proxy_sends_straight_to_the_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing there
    monkeypatch.delenv("http_proxy", raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.delenv("no_proxy", raising=False)
    with server(lambda h, r: answer(h)) as (url, seen):
        assert KeepAliveClient().post_json(url + "/v1", BODY, HEADERS, 5).status_code == 200
    assert seen.requests[0]["path"] == "/v1"


def test_https_through_a_proxy_opens_a_connect_tunnel_to_the_endpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[bytes] = []
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def proxy() -> None:
        conn, _ = listener.accept()
        with conn:
            seen.append(conn.recv(4096))
            conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")

    thread = threading.Thread(target=proxy, daemon=True)
    thread.start()
    monkeypatch.setenv("HTTPS_PROXY", f"http://u:p@127.0.0.1:{listener.getsockname()[1]}")
    monkeypatch.delenv("https_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    try:
        with pytest.raises(TransportFailure):  # the proxy refused the tunnel
            KeepAliveClient().post_json("https://llm.example:8443/v1/x", BODY, HEADERS, 5)
    finally:
        thread.join(5)
        listener.close()
    request = seen[0].decode()
    assert request.startswith("CONNECT llm.example:8443 HTTP/1.")
    assert "Proxy-Authorization: Basic dTpw" in request


def test_a_proxy_it_cannot_speak_to_leaves_the_call_to_litellm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "socks5://127.0.0.1:1080")
    monkeypatch.delenv("https_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert unsupported_proxy("https://gateway.example/v1") == "a socks5:// proxy"
    assert fast_path_model("openai/some-model", "https://gateway.example/v1") is None
    assert fast_path_model("openai/some-model", "http://gateway.example/v1") == "some-model"
