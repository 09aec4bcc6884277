"""JSON POSTs over one kept-alive connection per thread and endpoint, on plain sockets.

Why not httpx (what the OpenAI SDK and litellm use), nor ``http.client``: at
fleet volume the HTTP client is one of the largest shares of a worker's CPU.
Posting a chat request of about 10 KB to a local endpoint costs, per call,
about 540 us of CPU with httpx, 315 us with urllib3, 150 us with
``http.client`` and 85 us here (bench/bench_http.py prints the figures on the
machine it runs on). ``http.client`` spends most of its share building the
request header by header and parsing the answer's headers with the ``email``
package; h11 measured like ``http.client``. The direct path
(openai_compat.py) only ever sends one kind of request, a POST with a JSON
body, and only needs the answer's status, headers and body, so this module
speaks exactly that much HTTP/1.1 (RFC 9112) and keeps the behaviour of httpx
that matters for it:

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
- **Every framing of an answer**: ``Content-Length``, chunked transfer coding,
  or (HTTP/1.0 style) the body up to the connection's close; interim 1xx
  answers are skipped; 204 and 304 have no body.
- **Compressed answers** (gzip, deflate) are decoded.
- **Stale connections**: a kept-alive connection the server closed while it
  sat idle is reopened before the request is sent, never after; a request
  that fails once sent is the caller's to retry (its retry policy decides).
- **Hostile answers stay bounded**: a head over :data:`MAX_HEAD_BYTES` or with
  more than :data:`MAX_HEADERS` lines, or a malformed status line, chunk size
  or length, is a :class:`TransportFailure`, never a hang or a guess.

The timeout applies to connecting and to each read and write, as httpx's does, and
to the whole answer: one dripped a byte at a time stops being read once it has passed.
Once a plain connection is made it is the kernel's (``SO_RCVTIMEO`` /
``SO_SNDTIMEO``) on a socket Python sees as blocking: a Python-level timeout
makes every send and receive a ``poll`` plus the call, and each of those system
calls hands the GIL to another of the worker's threads (issue 15). TLS
connections keep Python's timeout (see ``KeepAliveClient._open``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import select
import socket
import ssl
import threading
import time
import urllib.request
import zlib
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit

from workers.core.kernel_timeouts import kernel_timeout

MAX_REDIRECTS = 5
MAX_HEAD_BYTES = 64 * 1024  # status line and headers of one answer (http.client's line limit)
MAX_HEADERS = 100  # as http.client
# A chat completion is kilobytes; an endpoint that announces or streams more than this is
# refused rather than allowed to fill the worker's memory (the whole answer is kept).
MAX_BODY_BYTES = 64 * 1024 * 1024
_FOLLOWED = frozenset({307, 308})
_NO_BODY = frozenset({204, 304})
_READ_SIZE = 64 * 1024


class TransportFailure(Exception):
    """No answer: the connection could not be made, dropped, or the timeout passed."""

    def __init__(self, message: str, *, timed_out: bool) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class _Malformed(Exception):
    """The peer's bytes are not an HTTP/1.x answer this module can read."""


class Headers(dict[str, str]):
    """An answer's headers by lower-cased name; a repeated header's values joined by ", "."""

    def get(self, name: str, default: Any = None) -> Any:
        return super().get(name.lower(), default)

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(name.lower())


@dataclass(frozen=True)
class Answer:
    """An HTTP answer, read whole; ``headers`` look up case-insensitively (Retry-After)."""

    status_code: int
    headers: Headers
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

    @property
    def authority(self) -> str:
        """``host[:port]`` as the Host header and CONNECT name it (the port only when not
        the scheme's default; an IPv6 literal in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


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


@dataclass
class _Wire:
    """One open connection: its socket, and the bytes received but not yet read."""

    sock: socket.socket
    pending: bytearray = field(default_factory=bytearray)
    # When the answer being read must be in (time.monotonic()): the socket's timeout bounds
    # each read, and an answer dripped a byte at a time would pass any number of those.
    deadline: float = float("inf")
    # The kernel timeout set on the socket now (None: not set). A call with the same timeout
    # as the last (a run's calls mostly get llm_call_timeout_seconds) sets nothing: two
    # system calls fewer per request; any other value, shorter or longer, is set.
    timeout: float | None = None

    def send(self, data: bytes) -> None:
        """The whole request in one write: head and body leave together."""
        self.sock.sendall(data)

    def receive(self) -> bytes:
        """What the peer sent next (b"" once it closed its side)."""
        return self.sock.recv(_READ_SIZE)

    def line(self, limit: int) -> bytes:
        """One CRLF-terminated line, without its terminator."""
        while True:
            end = self.pending.find(b"\n")
            if end >= 0:
                line = bytes(self.pending[:end])
                del self.pending[: end + 1]
                return line.removesuffix(b"\r")
            if len(self.pending) > limit:
                raise _Malformed(f"a line of the answer is longer than {limit} bytes")
            if not self._fill():
                raise _Malformed("the connection closed in the middle of the answer's head")

    def exactly(self, size: int) -> bytes:
        if size > MAX_BODY_BYTES:
            raise _Malformed(f"the answer's body is over {MAX_BODY_BYTES} bytes")
        while len(self.pending) < size:
            if not self._fill():
                raise _Malformed(f"the connection closed {size - len(self.pending)} bytes short")
        data = bytes(self.pending[:size])
        del self.pending[:size]
        return data

    def to_close(self) -> bytes:
        while self._fill():
            if len(self.pending) > MAX_BODY_BYTES:
                raise _Malformed(f"the answer's body is over {MAX_BODY_BYTES} bytes")
        data = bytes(self.pending)
        self.pending.clear()
        return data

    def _fill(self) -> bool:
        chunk = self.receive()
        if time.monotonic() > self.deadline:
            raise TimeoutError("the answer was still arriving when its time was up")
        self.pending += chunk
        return bool(chunk)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


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
        request = _request_bytes(target, route.authority, sent, body)
        try:
            wire = self._connection(route, timeout)
            wire.send(request)
            status, answer_headers, content, will_close = _read_answer(wire)
            content = _decoded(answer_headers, content)
        except (TimeoutError, BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError) as exc:
            self._drop(route)  # the kernel's timeout on a blocking socket reads as EAGAIN
            raise TransportFailure(f"no answer within {timeout:.1f}s", timed_out=True) from exc
        except (OSError, _Malformed) as exc:
            self._drop(route)
            raise TransportFailure(f"the connection failed: {exc!r}", timed_out=False) from exc
        if will_close:
            self._drop(route)
        return Answer(status, answer_headers, content)

    def _connection(self, route: _Route, timeout: float) -> _Wire:
        wires: dict[_Route, _Wire] | None = getattr(self._local, "wires", None)
        if wires is None:
            wires = self._local.wires = {}
        wire = wires.get(route)
        if wire is not None and (wire.pending or _closed_by_peer(wire.sock)):
            wire.close()  # stray bytes or the server's close: never send on it
            wire = None
        if wire is None:
            wire = wires[route] = _Wire(self._open(route, timeout))
        if isinstance(wire.sock, ssl.SSLSocket):
            wire.sock.settimeout(timeout)  # see _open
        elif wire.timeout != timeout:
            kernel_timeout(wire.sock, timeout)
            wire.timeout = timeout
        wire.deadline = time.monotonic() + timeout
        return wire

    def _open(self, route: _Route, timeout: float) -> socket.socket:
        host, port = route.host, route.port
        if route.proxy_host is not None:
            host, port = route.proxy_host, route.proxy_port or 80
        sock = socket.create_connection((host, port), timeout=timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if route.scheme == "https":
                if route.proxy_host is not None:
                    _tunnel(sock, route)
                context = self._ssl_context or ssl.create_default_context()
                return context.wrap_socket(sock, server_hostname=route.host)
            # A plain socket uses the kernel's timeouts from here on (kernel_timeout). A TLS
            # one keeps Python's: on a blocking TLS socket, ``ssl`` retries a read the kernel
            # timed out (SSL_ERROR_WANT_READ) instead of raising, so the timeout never ends.
            sock.settimeout(None)
        except BaseException:
            sock.close()
            raise
        return sock

    def _drop(self, route: _Route) -> None:
        wires = getattr(self._local, "wires", None) or {}
        wire = wires.pop(route, None)
        if wire is not None:
            wire.close()


def _request_bytes(target: str, authority: str, headers: dict[str, str], body: bytes) -> bytes:
    """A POST's head and body as one buffer. Header names and values with a CR or LF are
    refused (they would split the request), as http.client refuses them."""
    lines = [f"POST {target} HTTP/1.1", f"Host: {authority}"]
    for name, value in headers.items():
        if _splits(name) or _splits(value) or ":" in name or not name:
            raise ValueError(f"invalid HTTP header {name!r}")
        lines.append(f"{name}: {value}")
    lines.append(f"Content-Length: {len(body)}")
    if _splits(target) or " " in target:
        raise ValueError(f"invalid request target {target!r}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _splits(text: str) -> bool:
    return "\r" in text or "\n" in text or "\0" in text


def _tunnel(sock: socket.socket, route: _Route) -> None:
    """CONNECT through an HTTP proxy to the route's host; the proxy must answer 2xx."""
    head = [f"CONNECT {route.authority} HTTP/1.1", f"Host: {route.authority}"]
    if route.proxy_auth:
        head.append(f"Proxy-Authorization: {route.proxy_auth}")
    sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
    wire = _Wire(sock)
    try:
        _, status, _ = _read_head(wire)
    except _Malformed as exc:
        raise OSError(f"the proxy's answer to CONNECT is not HTTP: {exc}") from exc
    if not 200 <= status < 300:
        raise OSError(f"the proxy refused the tunnel to {route.authority}: {status}")
    if wire.pending:
        raise OSError("the proxy sent bytes after its answer to CONNECT")


def _read_head(wire: _Wire) -> tuple[str, int, Headers]:
    """(HTTP version, status, headers) of the next answer on ``wire``."""
    status_line = wire.line(MAX_HEAD_BYTES)
    version, _, rest = status_line.partition(b" ")
    code = rest[:3]
    if not version.startswith(b"HTTP/1.") or len(code) != 3 or not code.isdigit():
        raise _Malformed(f"not an HTTP/1.x status line: {status_line[:80]!r}")
    headers = Headers()
    size = len(status_line)
    for _ in range(MAX_HEADERS + 1):
        line = wire.line(MAX_HEAD_BYTES)
        if not line:
            return version.decode("latin-1"), int(code), headers
        size += len(line)
        if size > MAX_HEAD_BYTES:
            raise _Malformed(f"the answer's head is over {MAX_HEAD_BYTES} bytes")
        name, colon, value = line.decode("latin-1").partition(":")
        if not colon or not name or name != name.strip():
            raise _Malformed(f"not a header line: {line[:80]!r}")
        key, text = name.lower(), value.strip()
        previous = dict.get(headers, key)
        dict.__setitem__(headers, key, text if previous is None else f"{previous}, {text}")
    raise _Malformed(f"the answer has more than {MAX_HEADERS} headers")


def _read_answer(wire: _Wire) -> tuple[int, Headers, bytes, bool]:
    """(status, headers, body, whether the connection must close) of the next final answer."""
    version, status, headers = _read_head(wire)
    while 100 <= status < 200 and status != 101:  # interim answers (100 Continue, 103 ...)
        version, status, headers = _read_head(wire)
    connection = (headers.get("connection") or "").lower()
    will_close = "close" in connection or (version == "HTTP/1.0" and "keep-alive" not in connection)
    if status in _NO_BODY or status == 101:
        return status, headers, b"", will_close or status == 101
    coding = (headers.get("transfer-encoding") or "").lower()
    if coding:
        if coding.rsplit(",", 1)[-1].strip() != "chunked":
            return status, headers, wire.to_close(), True  # RFC 9112 6.3: read to the close
        return status, headers, _chunked(wire), will_close
    length = headers.get("content-length")
    if length is None:
        return status, headers, wire.to_close(), True
    values = {part.strip() for part in length.split(",")}
    if len(values) != 1 or not next(iter(values)).isdigit():
        raise _Malformed(f"bad Content-Length {length[:40]!r}")
    return status, headers, wire.exactly(int(next(iter(values)))), will_close


def _chunked(wire: _Wire) -> bytes:
    body = bytearray()
    while True:
        size_text = wire.line(1024).split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError as exc:
            raise _Malformed(f"bad chunk size {size_text[:20]!r}") from exc
        if size < 0:
            raise _Malformed("negative chunk size")
        if size == 0:
            for _ in range(MAX_HEADERS + 1):  # trailer fields, then the empty line
                if not wire.line(MAX_HEAD_BYTES):
                    return bytes(body)
            raise _Malformed("too many trailer fields")
        if len(body) + size > MAX_BODY_BYTES:
            raise _Malformed(f"the answer's body is over {MAX_BODY_BYTES} bytes")
        body += wire.exactly(size)
        if wire.exactly(2) != b"\r\n":
            raise _Malformed("a chunk does not end with CRLF")


def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether an idle kept-alive socket was closed by the server (it reads as ready: EOF)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def _decoded(headers: Headers, content: bytes) -> bytes:
    """The body decoded; _Malformed when it would inflate past MAX_BODY_BYTES (a few KB of
    gzip can hold gigabytes: the bound on the body read must hold for what it decodes to)."""
    encoding = (headers.get("content-encoding") or "").strip().lower()
    try:
        if encoding == "gzip":
            return _inflated(content, 16 + zlib.MAX_WBITS)
        if encoding == "deflate":
            try:
                return _inflated(content, zlib.MAX_WBITS)
            except zlib.error:
                return _inflated(content, -zlib.MAX_WBITS)  # raw deflate, as some send
    except (OSError, EOFError, zlib.error):
        return content  # not what it claims: the caller finds it is not JSON
    return content


def _inflated(content: bytes, wbits: int) -> bytes:
    """``content`` decompressed as gzip.decompress / zlib.decompress read it (gzip members one
    after another), at most MAX_BODY_BYTES of it."""
    data = bytearray()
    rest = content
    while True:
        inflater = zlib.decompressobj(wbits)
        data += inflater.decompress(rest, MAX_BODY_BYTES + 1 - len(data))
        if len(data) > MAX_BODY_BYTES or inflater.unconsumed_tail:
            raise _Malformed(f"the answer's body decodes to over {MAX_BODY_BYTES} bytes")
        if not inflater.eof:
            raise zlib.error("the compressed body is incomplete")
        rest = inflater.unused_data
        if wbits <= zlib.MAX_WBITS or not rest.strip(b"\0"):  # deflate: one stream
            return bytes(data)
