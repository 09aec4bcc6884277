"""Kubernetes' URL library: ``url(s)`` (an absolute URI, or an absolute path), ``isURL(s)``,
and on a URL ``getScheme()``, ``getHost()`` (with the port; an IPv6 host in brackets),
``getHostname()`` (without port or brackets), ``getPort()`` (a string, ``''`` when none),
``getEscapedPath()`` and ``getQuery()`` (a map from each key to its list of values)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

from workers.core.probes.cel_lib.base import CelLibraryError, Overload, opaque, unwrap

KIND = "url"


def _parse(text: str) -> dict[str, Any]:
    if not text or any(c.isspace() for c in text):
        raise CelLibraryError(f"URL parse error during conversion from string: {text!r}")
    parts = urlsplit(text)
    if not parts.scheme and not text.startswith("/"):
        raise CelLibraryError(f"URL is not an absolute URI or an absolute path: {text!r}")
    try:
        parts.port  # noqa: B018 - a port that is no number is a parse error
    except ValueError:
        raise CelLibraryError(f"URL parse error during conversion from string: {text!r}") from None
    return opaque(KIND, url=text)


def to_url(text: str) -> dict[str, Any]:
    return _parse(text)


def is_url(text: str) -> bool:
    try:
        _parse(text)
    except CelLibraryError:
        return False
    return True


def _split(value: Any) -> Any:
    return urlsplit(str(unwrap(value, KIND)["url"]))


def get_scheme(value: Any) -> str:
    return str(_split(value).scheme)


def get_host(value: Any) -> str:
    netloc = str(_split(value).netloc)
    return netloc.rpartition("@")[2]


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
    return str(_split(value).path)


def get_query(value: Any) -> dict[str, list[str]]:
    return {
        k: list(v) for k, v in parse_qs(str(_split(value).query), keep_blank_values=True).items()
    }


OVERLOADS = [
    Overload("url", "string_to_url", ("string",), "map", to_url),
    Overload("isURL", "is_url_string", ("string",), "bool", is_url),
    Overload("getScheme", "url_get_scheme", ("map",), "string", get_scheme, True),
    Overload("getHost", "url_get_host", ("map",), "string", get_host, True),
    Overload("getHostname", "url_get_hostname", ("map",), "string", get_hostname, True),
    Overload("getPort", "url_get_port", ("map",), "string", get_port, True),
    Overload("getEscapedPath", "url_get_escaped_path", ("map",), "string", get_escaped_path, True),
    Overload("getQuery", "url_get_query", ("map",), "map", get_query, True),
]
