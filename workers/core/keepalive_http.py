"""JSON POSTs over one kept-alive connection per thread and endpoint, on the standard library.

Why not httpx (what the OpenAI SDK and litellm use): at fleet volume the HTTP
client is the largest share of a worker's CPU. Posting a chat request of about
10 KB to a local endpoint costs, per call, about 1.9 ms of CPU with httpx,
1.1 ms with urllib3 and 0.6 ms with ``http.client`` (bench/bench_http.py prints
the figures on the machine it runs on). The direct path (openai_compat.py) only
ever sends one kind of request, so it uses ``http.client`` and keeps the
behaviour of httpx that matters for it:

- **Proxies from the environment** (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``,
  ``NO_PROXY``, either case), read by the standard library's own
  ``urllib.request.getproxies`` / ``proxy_bypass``; HTTPS goes through a proxy by
  CONNECT, with the proxy URL's credentials as ``Proxy-Authorization``. A proxy
  this module cannot speak to (``https://`` or SOCKS) is reported by
  :func:`unsupported_proxy`, and the caller then leaves the call to litellm.
- **TLS verified as litellm configures it** (``SSL_VERIFY``, ``SSL_CERT_FILE``,
  certifi): the SSL context comes from litellm's ``get_ssl_configuration``.
- **Redirects**: 307 and 308 (which keep the method and body) are followed, at
  most :data:`MAX_REDIRECTS` times. Other redirects would turn the POST into a
  GET and are returned as they are (an error status for the caller).
- **Compressed answers** (gzip, deflate) are decoded.
- **Stale connections**: a kept-alive connection the server closed while it
  sat idle is reopened before the request is sent, never after; a request
  that fails once sent is the caller's to retry (its retry policy decides).

The timeout applies to connecting and to each read and write, as httpx's does.
"""

from __future__ import annotations

import base64
import gzip
import http.client
import json
import select
import ssl
import threading
import urllib.request
import zlib
from dataclasses import dataclass
from email.message import Message
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit

MAX_REDIRECTS = 5
_FOLLOWED = frozenset({307, 308})


class TransportFailure(Exception):
    """No answer: the connection could not be made, dropped, or the timeout passed."""

    def __init__(self, message: str, *, timed_out: bool) -> None:
        super().__init__(message)
        self.timed_out = timed_out


@dataclass(frozen=True)
class Answer:
    """An HTTP answer, read whole; ``headers`` look up case-insensitively (Retry-After)."""

    status_code: int
    headers: Message
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


@dataclass(frozen=True)
class _Route:
    """Where a connection for a URL goes: straight to the host, or through a proxy."""

    scheme: str
    host: str
    port: int
    proxy_host: str | None = None
    proxy_port: int | None = None
    proxy_auth: str | None = None

    @classmethod
    def of(cls, url: str) -> _Route:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            raise ValueError(f"not an http(s) address: {url!r}")
        host = parts.hostname or ""
        port = parts.port or (443 if scheme == "https" else 80)
        proxy = proxy_for(url)
        if proxy is None:
            return cls(scheme, host, port)
        proxy_parts = urlsplit(proxy)
        auth = None
        if proxy_parts.username is not None:
            pair = f"{unquote(proxy_parts.username)}:{unquote(proxy_parts.password or '')}"
            auth = "Basic " + base64.b64encode(pair.encode()).decode()
        return cls(scheme, host, port, proxy_parts.hostname or "", proxy_parts.port or 80, auth)


def proxy_for(url: str) -> str | None:
    """The proxy the environment names for ``url`` (as urllib reads it), or None."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme.lower()) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(parts.netloc):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


def unsupported_proxy(url: str) -> str | None:
    """Why this module cannot reach ``url`` through the environment's proxy, or None if it can."""
    proxy = proxy_for(url)
    if proxy is None:
        return None
    scheme = urlsplit(proxy).scheme.lower()
    return None if scheme == "http" else f"a {scheme}:// proxy"


class _OneWrite:
    """Sends a request's head and a bytes body in one write, not two.

    ``http.client`` writes the head, then the body: on a socket with a timeout
    each write is a poll and a send, and each of those hands the GIL over, which
    costs a busy worker more than the copy of a 10-20 KB body (issue 15).
    Anything but a bytes body (a file, chunks) goes the standard way.
    """

    _buffer: list[bytes]

    def _send_output(self, message_body: Any = None, encode_chunked: bool = False) -> None:
        if isinstance(message_body, bytes) and not encode_chunked:
            self._buffer.extend((b"", b""))
            head = b"\r\n".join(self._buffer)
            del self._buffer[:]
            self.send(head + message_body)  # type: ignore[attr-defined]
            return
        super()._send_output(message_body, encode_chunked)  # type: ignore[misc]


class _HTTPConnection(_OneWrite, http.client.HTTPConnection):
    pass


class _HTTPSConnection(_OneWrite, http.client.HTTPSConnection):
    pass


class KeepAliveClient:
    """POSTs JSON; one kept-alive connection per thread and route (a thread runs one run)."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._ssl_context = ssl_context
        self._local = threading.local()
        self._routes: dict[str, _Route] = {}  # the environment's proxies, read once per URL

    def post_json(self, url: str, body: bytes, headers: dict[str, str], timeout: float) -> Answer:
        """The answer to one POST; :class:`TransportFailure` when there is none."""
        for _ in range(MAX_REDIRECTS + 1):
            answer = self._post_once(url, body, headers, timeout)
            location = answer.headers.get("location")
            if answer.status_code not in _FOLLOWED or not location:
                return answer
            url = urljoin(url, location)
        return answer

    def _post_once(self, url: str, body: bytes, headers: dict[str, str], timeout: float) -> Answer:
        route = self._routes.get(url)
        if route is None:
            route = self._routes[url] = _Route.of(url)
        parts = urlsplit(url)
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        sent = {**headers, "Accept-Encoding": "gzip, deflate"}
        if route.proxy_host is not None and route.scheme == "http":
            target = url  # a plain-HTTP proxy takes the whole URL
            if route.proxy_auth:
                sent["Proxy-Authorization"] = route.proxy_auth
        connection = self._connection(route, timeout)
        try:
            connection.request("POST", target, body=body, headers=sent)
            response = connection.getresponse()
            content = response.read()
        except TimeoutError as exc:
            self._drop(route)
            raise TransportFailure(f"no answer within {timeout:.1f}s", timed_out=True) from exc
        except (OSError, http.client.HTTPException) as exc:
            self._drop(route)
            raise TransportFailure(f"the connection failed: {exc!r}", timed_out=False) from exc
        if response.will_close:
            self._drop(route)
        return Answer(response.status, response.headers, _decoded(response.headers, content))

    def _connection(self, route: _Route, timeout: float) -> http.client.HTTPConnection:
        connections: dict[_Route, http.client.HTTPConnection] | None = getattr(
            self._local, "connections", None
        )
        if connections is None:
            connections = self._local.connections = {}
        connection = connections.get(route)
        if connection is not None and _closed_by_peer(connection):
            connection.close()
        if connection is None:
            connection = connections[route] = self._open(route, timeout)
        connection.timeout = timeout
        if connection.sock is not None:
            connection.sock.settimeout(timeout)
        return connection

    def _open(self, route: _Route, timeout: float) -> http.client.HTTPConnection:
        host, port = route.host, route.port
        if route.proxy_host is not None:
            host, port = route.proxy_host, route.proxy_port or 80
        if route.scheme == "http":
            return _HTTPConnection(host, port, timeout=timeout)
        connection = _HTTPSConnection(
            host, port, timeout=timeout, context=self._ssl_context or ssl.create_default_context()
        )
        if route.proxy_host is not None:
            tunnel_headers = {"Proxy-Authorization": route.proxy_auth} if route.proxy_auth else {}
            connection.set_tunnel(route.host, route.port, headers=tunnel_headers)
        return connection

    def _drop(self, route: _Route) -> None:
        connections = getattr(self._local, "connections", None) or {}
        connection = connections.pop(route, None)
        if connection is not None:
            connection.close()


def _closed_by_peer(connection: http.client.HTTPConnection) -> bool:
    """Whether an idle kept-alive socket was closed by the server (it reads as ready: EOF)."""
    sock = connection.sock
    if sock is None:
        return False
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def _decoded(headers: Message, content: bytes) -> bytes:
    encoding = (headers.get("content-encoding") or "").strip().lower()
    try:
        if encoding == "gzip":
            return gzip.decompress(content)
        if encoding == "deflate":
            try:
                return zlib.decompress(content)
            except zlib.error:
                return zlib.decompress(content, -zlib.MAX_WBITS)  # raw deflate, as some send
    except (OSError, EOFError, zlib.error):
        return content  # not what it claims: the caller finds it is not JSON
    return content
