"""The direct path's HTTP (workers/engine/openai_compat.py, urllib3): one connection pool per
process, proxies from the environment, verified TLS, redirects that keep the key at home,
and answers bounded in size. Retries, deadlines and error kinds are in
tests/engine/test_llm_fast_path.py, run on both paths."""

from __future__ import annotations

import gzip
import http.server
import json
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from schemas.settings import load_settings
from workers.engine import openai_compat
from workers.engine.llm import LiteLLMClient, LLMCall
from workers.engine.openai_compat import (
    DirectClient,
    EndpointUnreachable,
    fast_path_model,
    shared_client,
)

COMPLETION = json.dumps(
    {"choices": [{"message": {"content": "fine"}, "finish_reason": "stop"}],
     "usage": {"prompt_tokens": 12, "completion_tokens": 3}}
).encode()  # fmt: skip
BODY = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 10}


class Seen:
    """What a test server saw: each request's path, headers and body; connections opened."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.connections = 0


@contextmanager
def endpoint(
    answer: Any = None, *, tls: tuple[Path, Path] | None = None
) -> Iterator[tuple[str, Seen]]:
    """An HTTP/1.1 server on 127.0.0.1; ``answer(handler)`` writes each POST's answer."""
    seen = Seen()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            seen.connections += 1

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {name.lower(): value for name, value in self.headers.items()}
            seen.requests.append({"path": self.path, "headers": headers, "body": body})
            (answer or reply)(self)

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    scheme = "http"
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*tls)
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
        scheme = "https"
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"{scheme}://127.0.0.1:{httpd.server_address[1]}/v1", seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def reply(
    handler: http.server.BaseHTTPRequestHandler,
    status: int = 200,
    body: bytes = COMPLETION,
    headers: dict[str, str] | None = None,
) -> None:
    handler.send_response(status)
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def post(client: DirectClient, base: str) -> Any:
    return client.complete(base, "sk-test", BODY, 5)


def test_the_runs_of_a_process_share_one_pool_of_kept_alive_connections() -> None:
    """Every run's adapter posts through the process's one pool, so consecutive calls from
    different runs reuse a connection instead of opening one (and a TLS handshake) each."""
    assert shared_client(8) is shared_client(200)  # the first caller sized it
    with endpoint() as (base, seen):
        for _ in range(3):  # three runs, each with its own adapter, one call each
            adapter = LiteLLMClient(load_settings())
            adapter.complete(
                LLMCall(model="openai/scripted", messages=BODY["messages"], max_tokens=10,
                        deadline=time.monotonic() + 10, user="run", api_base=base)
            )  # fmt: skip
    assert len(seen.requests) == 3
    assert seen.connections == 1


@pytest.fixture
def clean_proxies(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


def test_an_http_proxy_from_the_environment_gets_the_whole_url_and_its_credentials(
    clean_proxies: pytest.MonkeyPatch,
) -> None:
    with endpoint() as (proxy, seen):
        clean_proxies.setenv("HTTP_PROXY", proxy.removesuffix("/v1").replace("//", "//u:p%40ss@"))
        completion = post(DirectClient(), "http://llm.internal:8000/v1")
    assert completion.choices[0].message.content == "fine"
    request = seen.requests[0]
    assert request["path"] == "http://llm.internal:8000/v1/chat/completions"
    assert request["headers"]["proxy-authorization"] == "Basic dTpwQHNz"  # u:p@ss
    assert request["headers"]["authorization"] == "Bearer sk-test"


def test_no_proxy_sends_straight_to_the_endpoint(clean_proxies: pytest.MonkeyPatch) -> None:
    clean_proxies.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
    clean_proxies.setenv("NO_PROXY", "127.0.0.1")
    with endpoint() as (base, seen):
        post(DirectClient(), base)
    assert seen.requests[0]["path"] == "/v1/chat/completions"


def test_https_goes_through_a_proxy_by_connect(clean_proxies: pytest.MonkeyPatch) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    asked: list[bytes] = []

    def refuse_tunnel() -> None:
        conn, _ = listener.accept()
        with conn:
            asked.append(conn.recv(4096))
            conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")

    thread = threading.Thread(target=refuse_tunnel, daemon=True)
    thread.start()
    clean_proxies.setenv("HTTPS_PROXY", f"http://u:p@127.0.0.1:{listener.getsockname()[1]}")
    try:
        with pytest.raises(EndpointUnreachable):  # the proxy refused the tunnel
            post(DirectClient(), "https://llm.example:8443/v1")
    finally:
        thread.join(5)
        listener.close()
    request = asked[0].decode()
    assert request.startswith("CONNECT llm.example:8443 HTTP/1.")
    assert "proxy-authorization: basic dtpw" in request.lower()
    assert "sk-test" not in request  # the key travels inside the tunnel only


def test_a_socks_proxy_leaves_the_call_to_litellm(clean_proxies: pytest.MonkeyPatch) -> None:
    clean_proxies.setenv("HTTPS_PROXY", "socks5://127.0.0.1:1080")
    fast_path_model.cache_clear()
    try:
        assert fast_path_model("openai/some-model", "https://gateway.example/v1") is None
        assert fast_path_model("openai/some-model", "http://gateway.example/v1") == "some-model"
    finally:
        fast_path_model.cache_clear()


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


def test_tls_is_verified_against_the_certificates_configured(
    certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An endpoint whose certificate no trusted CA signed is refused; named in
    ``SSL_CERT_FILE`` (as for litellm's path), it is trusted."""
    with endpoint(tls=certificate) as (base, seen):
        openai_compat._tls.cache_clear()
        with pytest.raises(EndpointUnreachable, match="CERTIFICATE_VERIFY_FAILED"):
            post(DirectClient(), base)
        assert seen.requests == []
        monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
        openai_compat._tls.cache_clear()
        try:
            assert post(DirectClient(), base).choices[0].message.content == "fine"
        finally:
            openai_compat._tls.cache_clear()
    assert len(seen.requests) == 1


def test_a_redirect_to_another_host_does_not_take_the_key_along() -> None:
    """A 307 keeps the POST and its body; the API key stays with the endpoint it was for."""
    with endpoint() as (elsewhere, moved):
        other = elsewhere.replace("127.0.0.1", "localhost")

        def redirect(handler: http.server.BaseHTTPRequestHandler) -> None:
            reply(handler, 307, b"", {"Location": other + "/chat/completions"})

        with endpoint(redirect) as (base, seen):
            assert post(DirectClient(), base).choices[0].message.content == "fine"
    assert seen.requests[0]["headers"]["authorization"] == "Bearer sk-test"
    (followed,) = moved.requests
    assert json.loads(followed["body"]) == BODY
    assert "authorization" not in followed["headers"]


@pytest.mark.parametrize("how", ["announced", "streamed", "compressed"])
def test_an_answer_over_the_bound_is_refused_not_kept(
    how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(openai_compat, "MAX_BODY_BYTES", 10_000)
    big = b'{"choices": [], "padding": "' + b"x" * 50_000 + b'"}'

    def answer(handler: http.server.BaseHTTPRequestHandler) -> None:
        if how == "announced":
            reply(handler, body=big)
        elif how == "compressed":  # small on the wire, over the bound once decoded
            reply(handler, body=gzip.compress(big), headers={"Content-Encoding": "gzip"})
        else:  # no length: read to the close
            handler.send_response(200)
            handler.send_header("Connection", "close")
            handler.end_headers()
            handler.wfile.write(big)
            handler.close_connection = True

    with endpoint(answer) as (base, _), pytest.raises(EndpointUnreachable, match=r"bound|over"):
        post(DirectClient(), base)
