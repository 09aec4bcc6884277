"""Kubernetes' URL library: ``url(s)`` (an absolute URI, or an absolute path), ``isURL(s)``,
and on a URL ``getScheme()``, ``getHost()`` (with the port; an IPv6 host in brackets),
``getHostname()`` (without port or brackets), ``getPort()`` (a string, ``''`` when none),
``getEscapedPath()`` (the path escaped for a URL: ``/a b`` is ``/a%20b``) and ``getQuery()``
(a map from each unescaped key to its list of unescaped values).

What is a URL follows the API server's parser (Go's ``net/url``, request form): a scheme
(a letter, then letters, digits, ``+ - .``) followed by ``:``, or else a path starting with
``/``; no control characters; an authority's host without spaces and with a numeric port;
``%`` only as an escape of two hex digits. Spaces are allowed in the path and the query.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, quote

from workers.policy_engine.cel.lib.base import (
    CelLibraryError,
    Overload,
    loops,
    opaque,
    unwrap,
)

KIND = "url"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")
_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_PORT = re.compile(r"^:\d*$")
# Characters a Go URL path keeps as they are (unreserved, and the reserved ones but '?').
_PATH_SAFE = "-_.~$&+,/:;=@"
# Characters Go accepts unescaped in a path as given (validEncoded).
_PATH_VALID = set(_PATH_SAFE) | set("!'()*[]%")
_HOST_VALID = set("!$&'()*+,;=:[]<>\"-_.~%")


def _error(text: str, why: str) -> CelLibraryError:
    return CelLibraryError(f"URL parse error during conversion from string: {text!r}: {why}")


def _split(text: str) -> dict[str, str]:
    """The URL's parts (scheme, authority, path, query, fragment); CelLibraryError when it is
    not an absolute URI or an absolute path."""
    if not text:
        raise _error(text, "empty url")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        raise _error(text, "invalid control character in URL")
    rest, _, fragment = text.partition("#")
    if rest.startswith(":"):
        raise _error(text, "missing protocol scheme")
    match = _SCHEME.match(rest)
    scheme = match.group(1) if match else ""
    rest = rest[match.end() :] if match else rest
    rest, _, query = rest.partition("?")
    if not scheme and not rest.startswith("/"):
        raise _error(text, "invalid URI for request")
    authority = ""
    if rest.startswith("//") and (scheme or not rest.startswith("///")):
        authority, slash, path = rest[2:].partition("/")
        rest = slash + path
        _check_authority(text, authority)
    if _ESCAPE.search(rest):
        raise _error(text, "invalid URL escape")
    return {"scheme": scheme, "authority": authority, "path": rest, "query": query,
            "fragment": fragment}  # fmt: skip


def _check_authority(text: str, authority: str) -> None:
    host = authority.rpartition("@")[2]
    if host.startswith("["):
        end = host.find("]")
        if end < 0:
            raise _error(text, "missing ']' in host")
        port = host[end + 1 :]
    else:
        port = host[host.rfind(":") :] if ":" in host else ""
    if port and not _PORT.match(port):
        raise _error(text, f"invalid port {port!r} after host")
    if any(not (c.isalnum() or c in _HOST_VALID or ord(c) > 0x7F) for c in host):
        raise _error(text, "invalid character in host name")


def to_url(text: str) -> dict[str, Any]:
    _split(text)
    return opaque(KIND, url=text)


def is_url(text: str) -> bool:
    try:
        _split(text)
    except CelLibraryError:
        return False
    return True


def _parts(value: Any) -> dict[str, str]:
    return _split(str(unwrap(value, KIND)["url"]))


def get_scheme(value: Any) -> str:
    return _parts(value)["scheme"]


def get_host(value: Any) -> str:
    return _parts(value)["authority"].rpartition("@")[2]


def get_hostname(value: Any) -> str:
    host = get_host(value)
    if host.startswith("["):
        return host[1 : host.find("]")]
    return host.rpartition(":")[0] if ":" in host else host


def get_port(value: Any) -> str:
    host = get_host(value)
    if host.startswith("["):
        rest = host[host.find("]") + 1 :]
        return rest[1:] if rest.startswith(":") else ""
    return host.rpartition(":")[2] if ":" in host else ""


def get_escaped_path(value: Any) -> str:
    """The path as written when it is validly escaped already, else escaped."""
    path = _parts(value)["path"]
    if all(c.isascii() and (c.isalnum() or c in _PATH_VALID) for c in path):
        return path
    return quote(_unescape(path), safe=_PATH_SAFE)


def _unescape(text: str) -> str:
    return re.sub(
        rb"%([0-9A-Fa-f]{2})", lambda m: bytes([int(m.group(1), 16)]), text.encode()
    ).decode("utf-8", errors="replace")


def get_query(value: Any) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for key, item in parse_qsl(_parts(value)["query"], keep_blank_values=True):
        out.setdefault(key, []).append(item)
    return out


# Each call parses the URL in Python, character by character: costed as a Python loop.
OVERLOADS = [
    Overload("url", "string_to_url", ("string",), KIND, to_url, cost=loops),
    Overload("isURL", "is_url_string", ("string",), "bool", is_url, cost=loops),
    Overload("getScheme", "url_get_scheme", (KIND,), "string", get_scheme, True, loops),
    Overload("getHost", "url_get_host", (KIND,), "string", get_host, True, loops),
    Overload("getHostname", "url_get_hostname", (KIND,), "string", get_hostname, True, loops),
    Overload("getPort", "url_get_port", (KIND,), "string", get_port, True, loops),
    Overload("getEscapedPath", "url_get_escaped_path", (KIND,), "string", get_escaped_path,
             True, loops),
    Overload("getQuery", "url_get_query", (KIND,), "map", get_query, True, loops),
]  # fmt: skip
